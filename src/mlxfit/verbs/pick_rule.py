"""pick's rule, pure: which of the downloaded candidates to auto-load, with a reason for
every candidate (the seed's chooseAutoModel). ``verbs.pick`` gathers the candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Option:
    """What the rule needs of a candidate."""

    model: str
    weights_bytes: int
    total_bytes: int
    fits: bool  # runs: total <= usable and no array over the GPU's largest buffer
    fits_coexist: bool  # runs and total <= coexist budget
    blocked: str = ""  # why it cannot run although the total fits (an oversize array)
    tight: bool = False  # fits at the estimate, not at its peak band's upper bound (issue 27)


@dataclass(frozen=True)
class Verdict:
    chosen: bool
    budget: str  # "usable" | "coexist": the budget the rule held this candidate to
    reason: str


@dataclass(frozen=True)
class Choice:
    index: int | None  # into the options, None when nothing was chosen
    rule: str  # "default" | "coexist" | "fits" | "none"
    reason: str
    verdicts: tuple[Verdict, ...]  # one per option, in the options' order


def gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB"


def choose(options: Sequence[Option], default_model: str | None, usable: int, coexist: int,
           coexist_fraction: float, default_absent: str = "is not downloaded") -> Choice:
    """The seed's chooseAutoModel, with a reason for every candidate. ``default_absent`` says
    why the default is not among the options, when it is not. ``default_model`` None: no
    default model is set, the rule goes by size alone."""
    n = len(options)
    default_i = None if default_model is None else next(
        (i for i, o in enumerate(options) if o.model.casefold() == default_model.casefold()),
        None)
    order = sorted(range(n), key=lambda i: (-options[i].weights_bytes, options[i].model))
    cx = f"the coexist budget ({coexist_fraction:g} of RAM, {gb(coexist)})"
    us = f"the usable {gb(usable)}"

    def needs(o: Option, budget: str) -> str:
        return f"needs {gb(o.total_bytes)} > {budget}"

    def no_fit(o: Option) -> str:
        return o.blocked or needs(o, us)

    def own(o: Option) -> str:
        """What this candidate would do here, whatever was chosen."""
        if o.fits_coexist:
            return f"it fits the coexist budget ({gb(o.total_bytes)} of {gb(coexist)})"
        if o.fits:
            return (f"it fits {us} ({gb(o.total_bytes)}) but not the coexist budget "
                    f"({gb(coexist)})")
        return f"it does not fit: {no_fit(o)}"

    verdicts: list[Verdict | None] = [None] * n
    if default_i is not None and options[default_i].fits:
        default = options[default_i].model
        for i, o in enumerate(options):
            if i == default_i:
                verdicts[i] = Verdict(True, "usable", f"the default model, downloaded, fits {us}")
            else:
                verdicts[i] = Verdict(False, "usable", f"{own(o)}; the default model ({default})"
                                      " comes first when it is downloaded and fits")
        return Choice(default_i, "default",
                      f"the default model {options[default_i].model} is downloaded and fits "
                      f"{us}", tuple(v for v in verdicts if v))

    if default_i is not None:
        verdicts[default_i] = Verdict(False, "usable", f"the default model, but it does not fit "
                                      f"({no_fit(options[default_i])})")
    # The default, when present here, does not fit: neither test below can pick it.
    chosen = next((i for i in order if options[i].fits_coexist), None)
    rule = "coexist"
    if chosen is None:
        # A model that fits outright comes before a tight one (issue 27), then the largest.
        fitting = [i for i in order if options[i].fits]
        chosen = next((i for i in fitting if not options[i].tight),
                      fitting[0] if fitting else None)
        rule = "fits" if chosen is not None else "none"
    budget = "coexist" if rule == "coexist" else "usable"
    seen_chosen = False
    for i in order:
        if i == default_i:
            continue
        o = options[i]
        if rule == "fits" and i != chosen and o.tight and not options[chosen].tight:  # type: ignore[index]
            verdicts[i] = Verdict(False, budget, f"{own(o)}, but tight: not at the upper "
                                  f"bound of its peak band; {options[chosen].model} fits "
                                  "outright")
            continue
        if i == chosen:
            seen_chosen = True
            why = ("the largest that fits the coexist budget" if rule == "coexist" else
                   f"nothing fits the coexist budget; the largest that fits {us} (other apps "
                   "will be squeezed)")
            if o.tight:
                why += "; tight: fits at the estimate, not at its upper bound"
            verdicts[i] = Verdict(True, budget, why)
        elif not seen_chosen:  # larger than the chosen one (or nothing chosen)
            if rule == "coexist":
                why = f"over the coexist budget: {needs(o, gb(coexist))}" + (
                    f"; fits {us}, but an auto-pick leaves room for other apps" if o.fits
                    else f"; and {o.blocked}" if o.blocked else f"; over {us} too")
            else:
                why = f"does not fit: {no_fit(o)}"
            verdicts[i] = Verdict(False, budget, why)
        else:
            verdicts[i] = Verdict(False, budget, f"smaller than {options[chosen].model}, "
                                  f"which was chosen; {own(o)}")
    if rule == "none":
        if n == 0:
            reason = "no candidate: no loadable MLX model in the Hugging Face cache"
        else:
            small = min(options, key=lambda o: o.total_bytes)
            reason = (f"none of the {n} downloaded models fits: the smallest peak, "
                      f"{small.model}, {no_fit(small)}")
    elif rule == "coexist":
        reason = f"{options[chosen].model} is the largest that fits {cx}"  # type: ignore[index]
        if default_i is None and default_model is not None:
            reason = f"the default model {default_model} {default_absent}; " + reason
        elif default_i is not None:
            reason = "the default model does not fit; " + reason
    else:
        reason = (f"nothing fits {cx}; {options[chosen].model} "  # type: ignore[index]
                  f"is the largest that fits {us}")
    return Choice(chosen, rule, reason, tuple(v for v in verdicts if v))
