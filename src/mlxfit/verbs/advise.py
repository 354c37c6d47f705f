"""What would make it fit: the smallest changes to a run that does not fit (or needs an array
larger than the GPU's largest buffer), each re-evaluated through the same core as ``fit``.

The levers, cheapest first (``RANK``): a smaller --prefill-step-size, a smaller prompt cache
(server), 8-bit KV, raising the wired limit, 4-bit KV, dropping the draft model, a smaller
quantization of the same model, --max-kv-size, fewer parallel sequences, a shorter context.
The context is the user's: it is only ever shown as one option among the others, never applied.
Every option carries the exact mlx-lm command line (and the sysctl, for the wired limit).

Pure logic over an ``Evaluator`` (built by ``mlxfit.verbs.fit``), which runs ``fit_core`` for a
candidate run, serving set-up, sibling model or wired limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from mlxfit.errors import MlxfitError
from mlxfit.estimate.memory import Run, kv_bits_refusal
from mlxfit.estimate.serving import SERVER_PROMPT_CONCURRENCY, Serving, command_line
from mlxfit.estimate.solve import FitResult
from mlxfit.model.config import ModelConfig

MIB = 2**20
GIB = 2**30
# ASSUMPTION (no measurement): what raising iogpu.wired_limit_mb must leave to macOS and the
# apps beside the model: max(4 GiB, 1/16 of RAM) (24 GB -> 20 GiB wired at most, 128 GB -> 120).
WIRED_RESERVE_MIN = 4 * GIB
WIRED_RESERVE_FRACTION = 1 / 16
WIRED_ROUND_MB = 256  # the sysctl value is rounded up to this (the prediction plus < 256 MiB)

# Cost to the user, lowest first. Ties keep the order below.
RANK = {
    "prefill_step_size": 10,   # prompt processing slower; output identical
    "prompt_cache": 20,   # evicted conversations are prefilled again
    "kv_bits_8": 30,      # small quality loss past --quantized-kv-start
    "wired_limit": 40,    # less memory for macOS and the other apps
    "kv_bits_4": 50,      # noticeable quality loss at long context
    "draft": 55,          # no speculative speed-up
    "quant": 60,          # other weights: lower quality, a new download
    "max_kv_size": 70,    # the model forgets beyond the window
    "parallel": 80,       # fewer concurrent requests
    "context": 90,        # not the run that was asked for
}

MIN_PREFILL_STEP = 256  # the smallest --prefill-step-size offered (KVCache grows in 256 steps)
KV_BITS = (8, 4)
MAX_OPTIONS = 8


class Evaluator(Protocol):
    """What advise needs from the API layer."""

    model_ref: str  # the model as the user named it (goes into command lines)
    cfg: ModelConfig  # of the model
    ram_bytes: int
    wired_refusal: str | None  # why raising the wired limit cannot help here (None: it can)
    siblings: list[str]  # smaller quantizations of the same model (catalog / HF cache)

    def __call__(self, run: Run, serving: Serving, *, model: str | None = None,
                 wired_limit_mb: int | None = None) -> FitResult: ...

    def ttft(self, run: Run, *, model: str | None = None) -> float | None: ...

    def longer_context(self, run: Run, serving: Serving) -> list[tuple[str, FitResult]]: ...


@dataclass(frozen=True)
class Change:
    kind: str  # a key of RANK
    label: str  # mlx-lm's flag ("--prefill-step-size 512"), or the sysctl / model to use
    cost: str  # what it costs the user, in words
    # mlxfit's own flag that re-checks this change, where it is not the label's
    # ("--prompt-cache 0" for mlx_lm.server's "--prompt-cache-size 0"); "" when the same.
    mlxfit: str = ""

    @property
    def rank(self) -> int:
        return RANK[self.kind]


@dataclass(frozen=True)
class Option:
    changes: tuple[Change, ...]
    result: FitResult
    model: str  # the model the command runs
    command: str  # the exact mlx-lm command line
    setup: tuple[str, ...] = ()  # to run first (the sysctl)
    # What a smaller --prefill-step-size costs in time to first token (None: no such change,
    # or no prediction)
    ttft_cost_s: float | None = None

    @property
    def rank(self) -> tuple[int, int]:
        ranks = [c.rank for c in self.changes]
        return max(ranks), sum(ranks)

    @property
    def label(self) -> str:
        return " + ".join(c.label for c in self.changes)


@dataclass(frozen=True)
class Refused:
    kind: str
    reason: str


@dataclass(frozen=True)
class Advice:
    needed: bool  # False: the run fits as asked
    problem: str  # what is wrong with the run as asked (empty when nothing)
    options: tuple[Option, ...] = ()
    refused: tuple[Refused, ...] = ()
    notes: tuple[str, ...] = field(default=())
    margin: bool = False  # a tight run: the options buy margin (fit at the upper bound too)


def prefill_steps_below(step: int) -> list[int]:
    """Powers of two below the current step, down to 256: 2048 -> 1024, 512, 256."""
    out, v = [], MIN_PREFILL_STEP
    while v < step:
        out.append(v)
        v *= 2
    return out[::-1]


# --------------------------------------------------------------------------- commands


def wired_command(mb: int) -> str:
    return f"sudo sysctl iogpu.wired_limit_mb={mb}"


def wired_cap_mb(ram_bytes: int) -> int:
    reserve = max(WIRED_RESERVE_MIN, int(ram_bytes * WIRED_RESERVE_FRACTION))
    return (ram_bytes - reserve) // MIB


def wired_needed_mb(total_bytes: int) -> int:
    return math.ceil(total_bytes / MIB / WIRED_ROUND_MB) * WIRED_ROUND_MB


# --------------------------------------------------------------------------- search


@dataclass(frozen=True)
class _Cand:
    run: Run
    serving: Serving
    model: str | None = None  # a sibling repo id; None: the model asked for
    wired_mb: int | None = None
    changes: tuple[Change, ...] = ()


# One setting of a lever, applied on top of a candidate (its Change appended).
Step = Callable[[_Cand], _Cand]


@dataclass
class _Lever:
    """A way to shrink the run. ``levels``: a few settings, least aggressive first (used when
    the lever is the first of a pair); ``solve``: the least aggressive setting that runs on top
    of a candidate (a bisection for the levers with a value to solve for)."""

    name: str
    rank: int
    levels: list[Step]
    solve: Callable[[_Search, _Cand], _Cand | None]
    in_pairs: bool = True
    discrete: bool = False  # solve() is the first running level (no value to bisect)


def _change(c: _Cand, ch: Change, **kw: Any) -> _Cand:
    return replace(c, changes=c.changes + (ch,), **kw)


class _Search:
    def __init__(self, base: FitResult, ev: Evaluator, serving: Serving):
        self.base = base
        self.ev = ev
        self.serving = serving
        self.cache: dict[Any, FitResult | MlxfitError] = {}
        self.refused: dict[str, str] = {}
        # A tight run (issue 27): what buys margin, i.e. makes it fit at its upper bound too
        self.margin = base.verdict == "tight"

    def ok(self, r: FitResult) -> bool:
        return r.verdict == "fits" if self.margin else r.runs

    def eval(self, c: _Cand) -> FitResult | MlxfitError:
        key = (c.run, c.serving, c.model, c.wired_mb)
        if key not in self.cache:
            try:
                self.cache[key] = self.ev(c.run, c.serving, model=c.model,
                                          wired_limit_mb=c.wired_mb)
            except MlxfitError as e:
                self.cache[key] = e
        return self.cache[key]

    def runs(self, c: _Cand) -> bool:
        r = self.eval(c)
        return isinstance(r, FitResult) and self.ok(r)

    def with_wired(self, c: _Cand) -> _Cand | None:
        """The candidate plus the smallest wired limit that makes it fit, when the total is its
        only problem and the limit leaves macOS its reserve."""
        if self.ev.wired_refusal is not None or c.wired_mb is not None:
            return None
        r = self.eval(c)
        if not isinstance(r, FitResult) or r.oversize_buffers or self.ok(r):
            return None
        if r.fits and not self.margin:
            return None
        # tight: the upper bound of the peak band is what must fit
        mb = wired_needed_mb(r.bands.peak_hi if self.margin and r.bands else r.total_bytes)
        if mb > wired_cap_mb(self.ev.ram_bytes):
            return None
        ch = Change("wired_limit", f"sudo sysctl iogpu.wired_limit_mb={mb}",
                    _wired_cost(mb, self.ev.ram_bytes))
        out = _change(c, ch, wired_mb=mb)
        return out if self.runs(out) else None

    def first(self, c: _Cand, levels: list[Step]) -> _Cand | None:
        for step in levels:
            d = step(c)
            if self.runs(d):
                return d
        return None

    def largest(self, lo: int, hi: int, make: Callable[[int], _Cand]) -> _Cand | None:
        """The candidate with the largest v in [lo, hi] that runs (memory grows with v)."""
        if hi < lo or not self.runs(make(lo)):
            return None
        if self.runs(make(hi)):
            return make(hi)
        good, bad = lo, hi
        while bad - good > 1:
            mid = (good + bad) // 2
            if self.runs(make(mid)):
                good = mid
            else:
                bad = mid
        return make(good)


def _wired_cost(mb: int, ram: int) -> str:
    left = ram / GIB - mb / 1024
    return (f"the GPU may then wire {mb / 1024:.1f} of {ram / GIB:.0f} GiB, leaving {left:.1f} GiB "
            "to macOS and the other apps: under memory pressure they swap, and the system can "
            "stall or panic; it resets at reboot (undo now: sudo sysctl iogpu.wired_limit_mb=0)")


def _discrete(name: str, rank: int, levels: list[Step]) -> _Lever:
    return _Lever(name, rank, levels, lambda s, c: s.first(c, levels), discrete=True)


def _coarse(values: list[int], hi: int, lo: int) -> list[int]:
    return sorted({v for v in values if lo <= v < hi}, reverse=True)


def _levers(s: _Search, run: Run, serving: Serving) -> list[_Lever]:
    """Every lever that applies to this run, cheapest first; refusals recorded with why."""
    cfg = s.ev.cfg
    out: list[_Lever] = []

    steps = prefill_steps_below(run.prefill_step_size)
    if steps:
        out.append(_discrete("prefill_step_size", RANK["prefill_step_size"], [
            (lambda c, st=st: _change(c, Change(
                "prefill_step_size", f"--prefill-step-size {st}",
                f"prompt processing slower ({st}-token chunks instead of {c.run.prefill_step_size} use "
                "the GPU less efficiently); the transient shrinks, the output is identical"),
                run=replace(c.run, prefill_step_size=st)))
            for st in steps]))

    k = serving.cached_prompts
    if serving.server and k > 0:
        def pc(c: _Cand, v: int) -> _Cand:
            return _change(c, Change(
                "prompt_cache", f"--prompt-cache-size {v}",
                f"mlx_lm.server keeps {v} cached prompts instead of {k}: a conversation evicted "
                "from the cache is prefilled again", f"--prompt-cache {v}"),
                serving=replace(c.serving, prompt_cache=v))
        out.append(_Lever("prompt_cache", RANK["prompt_cache"],
                          [lambda c, v=v: pc(c, v) for v in _coarse([k * 3 // 4, k // 2, k // 4, 0],
                                                                    k, 0)],
                          lambda s, c: s.largest(0, k - 1, lambda v: pc(c, v))))

    kv_levels: list[Step] = []
    refusal = kv_bits_refusal(cfg, run)
    if refusal:
        s.refused["kv_bits"] = f"--kv-bits: {refusal}"
    elif serving.sequences > 1:
        s.refused["kv_bits"] = ("--kv-bits: mlx_lm.server then serves one request at a time "
                                f"(no batching), not the --parallel {serving.sequences} asked for")
    else:
        for bits in KV_BITS:
            if run.kv_bits is not None and bits >= run.kv_bits:
                continue
            starts = [run.quantized_kv_start] if run.quantized_kv_start <= run.ctx else []
            if 0 not in starts:
                starts.append(0)
            for start in starts:
                kind = "kv_bits_8" if bits == 8 else "kv_bits_4"
                loss = "a small quality loss" if bits == 8 else "a noticeable quality loss"
                when = "from the first token" if start == 0 else f"past token {start}"
                kv_levels.append(lambda c, bits=bits, start=start, kind=kind, loss=loss,
                                 when=when: _change(c, Change(
                                     kind, f"--kv-bits {bits} --quantized-kv-start {start}",
                                     f"KV cache stored at {bits} bits {when}: {loss}; attention "
                                     "over a quantized cache is unfused (slower prefill at long "
                                     "context)"),
                                     run=replace(c.run, kv_bits=bits, quantized_kv_start=start)))
    if kv_levels:
        out.append(_discrete("kv_bits", RANK["kv_bits_8" if run.kv_bits is None
                                             or run.kv_bits > 8 else "kv_bits_4"], kv_levels))

    if serving.draft is not None:
        name = serving.draft.name
        out.append(_discrete("draft", RANK["draft"], [lambda c: _change(c, Change(
            "draft", f"no --draft-model {name}",
            "no speculative decoding: decode at the plain speed"),
            serving=replace(c.serving, draft=None))]))

    if s.ev.siblings:
        out.append(_discrete("quant", RANK["quant"], [
            (lambda c, sib=sib: _change(c, Change(
                "quant", f"--model {sib}",
                "different weights: a smaller quantization (lower quality) and a new download",
                f"mlxfit fit {sib}"),
                model=sib))
            for sib in s.ev.siblings]))
    else:
        s.refused["quant"] = ("a smaller quantization: none of this model in the built-in "
                              "catalog or the local Hugging Face cache")

    if serving.server:
        s.refused["max_kv_size"] = "--max-kv-size: mlx_lm.server has no such flag"
    elif cfg.own_cache:
        s.refused["max_kv_size"] = ("--max-kv-size: mlx-lm ignores it for this model (it builds "
                                    "its own caches with make_cache())")
    elif serving.draft is not None:
        s.refused["max_kv_size"] = ("--max-kv-size: mlx-lm drops it with --draft-model "
                                    "(stream_generate pops it)")
    elif run.kv_bits is not None:
        s.refused["max_kv_size"] = ("--max-kv-size: it makes every cache a RotatingKVCache, "
                                    "which mlx-lm cannot quantize (the --kv-bits asked for)")
    elif run.ctx > 257:
        def mk(c: _Cand, v: int) -> _Cand:
            return _change(c, Change(
                "max_kv_size", f"--max-kv-size {v}",
                f"a rotating cache: the model forgets all but the first 4 and the last {v - 4} "
                "tokens (everything older is gone)"),
                run=replace(c.run, max_kv_size=v))

        def solve_mk(s: _Search, c: _Cand) -> _Cand | None:
            found = s.largest(256, run.ctx - 1, lambda v: mk(c, v))
            if found is None:
                return None
            v = found.run.max_kv_size or 0
            if v >= 512 and v % 256:  # a round window (fits: memory grows with the window)
                found = mk(c, v - v % 256)
            return found

        out.append(_Lever("max_kv_size", RANK["max_kv_size"],
                          [lambda c, v=v: mk(c, v) for v in _coarse(
                              [run.ctx // d // 256 * 256 for d in (2, 4, 8, 16)], run.ctx, 256)],
                          solve_mk))

    n = serving.sequences
    if serving.server and n > 1:
        def par(c: _Cand, v: int) -> _Cand:
            return _change(c, Change(
                "parallel", f"--decode-concurrency {v} --prompt-concurrency "
                f"{min(v, SERVER_PROMPT_CONCURRENCY)}",
                f"{v} concurrent requests instead of {n}: the others wait in the queue",
                f"--parallel {v}"),
                serving=replace(c.serving, parallel=v))
        out.append(_Lever("parallel", RANK["parallel"],
                          [lambda c, v=v: par(c, v) for v in _coarse(
                              [n * 3 // 4, n // 2, n // 4, 1], n, 1)],
                          lambda s, c: s.largest(1, n - 1, lambda v: par(c, v))))

    def at(c: _Cand, v: int) -> _Cand:
        return _change(c, Change(
            "context", f"a context of {v:,} tokens",
            f"not the run asked for: prompt + output must stay within {v:,} tokens instead of "
            f"{run.ctx:,} (mlx-lm has no flag for it: trim the prompt)", f"--ctx {v}"),
            run=replace(c.run, ctx=v, gen=min(c.run.gen, v - 1)))
    hi = min(s.base.max_safe_context, run.ctx - 1)
    out.append(_Lever("context", RANK["context"], [],
                      lambda s, c: s.largest(1, hi, lambda v: at(c, v)) if hi >= 1 else None,
                      in_pairs=False))
    return out


def advise(base: FitResult, ev: Evaluator, serving: Serving) -> Advice:
    """The smallest changes that make ``base``'s run fit (and allocate), cheapest first."""
    problem = _problem(base)
    if not problem:
        return Advice(needed=False, problem="", notes=("fits as asked: nothing to change",))
    margin = not base.problems  # tight (issue 27): the changes that buy margin
    if base.beyond_context:  # no memory lever reads past the model's limit; --ctx is the user's
        return Advice(needed=True, problem=problem, notes=_past_context(base, ev, serving))
    s = _Search(base, ev, serving)
    start = _Cand(run=base.run, serving=serving)
    levers = _levers(s, base.run, serving)
    found: list[_Cand] = []

    # Each lever alone.
    alone = {lv.name: lv.solve(s, start) for lv in levers}
    found += [c for c in alone.values() if c is not None]
    if alone.get("context") is None:
        s.refused["context"] = "a shorter context: not even one token fits"

    # The wired limit alone.
    wired = s.with_wired(start)
    if base.run.backend != "metal":
        s.refused["wired_limit"] = "raising the wired limit: the CPU backend does not wire memory"
    elif ev.wired_refusal is not None:
        s.refused["wired_limit"] = ev.wired_refusal
    elif wired is not None:
        found.append(wired)
    elif base.fits and not margin:
        s.refused["wired_limit"] = ("raising the wired limit: the total already fits; an array "
                                    "larger than the GPU's largest buffer is the problem")
    else:
        cap = wired_cap_mb(ev.ram_bytes)
        s.refused["wired_limit"] = (
            f"raising the wired limit: {wired_needed_mb(base.total_bytes)} MB would be needed; "
            f"mlxfit suggests at most {cap} MB on {ev.ram_bytes / GIB:.0f} GiB (it leaves macOS "
            f"{(ev.ram_bytes / MIB - cap) / 1024:.0f} GiB)")

    # Two levers, neither enough alone: each level of the cheaper one, then the least
    # aggressive setting of the other on top. The wired limit finishes any single lever.
    failing = [lv for lv in levers if alone[lv.name] is None and lv.in_pairs]
    for i, a in enumerate(failing):
        for b in failing[i + 1:]:
            c = _pair(s, start, a, b)
            if c is not None:
                found.append(c)
        if wired is None:
            for step in a.levels:
                c = s.with_wired(step(start))
                if c is not None:
                    found.append(c)
                    break

    options = [_option(s, c) for c in _dedupe(found)]
    options.sort(key=lambda o: (o.rank, -o.result.max_safe_context))
    notes = []
    if not options:
        notes.append("no change of one or two of these levers makes this run fit"
                     + (" at the upper bound of its peak band" if margin else ""))
    return Advice(needed=True, problem=problem, margin=margin,
                  options=tuple(options[:MAX_OPTIONS]),
                  refused=tuple(Refused(k, v) for k, v in s.refused.items()),
                  notes=tuple(notes))


def _past_context(base: FitResult, ev: Evaluator, serving: Serving) -> tuple[str, ...]:
    """What reads past the trained context: rope_scaling (mlx-lm applies YaRN from
    config.json), a same-size catalog model trained longer, or a shorter --ctx."""
    notes = []
    if not base.context_source:  # no rope_scaling stretches it yet
        notes.append(
            f"past {base.context_limit:,} tokens: mlx-lm applies a rope_scaling entry of "
            "config.json (YaRN): where the model card documents one (Qwen3's: {\"rope_type\": "
            "\"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}), adding "
            "it to the model folder's config.json raises the limit to factor x that length")
    for rid, r in ev.longer_context(base.run, serving):
        speed = (f", {r.predicted_decode_tps:,.1f} tok/s" if r.predicted_decode_tps is not None
                 else "")
        verdict = "fits here" if r.runs else "does not fit here either"
        notes.append(f"{rid}: same size ({r.weights_bytes / 1e9:,.2f} GB of weights), trained "
                     f"to {r.context_limit:,} tokens; at {base.context_tokens:,} it {verdict} "
                     f"({r.total_bytes / 1e9:,.2f} of {r.usable_bytes / 1e9:,.2f} GB{speed})")
    notes.append(f"or ask for --ctx {base.context_limit:,} or less")
    return tuple(notes)


def _pair(s: _Search, start: _Cand, a: _Lever, b: _Lever) -> _Cand | None:
    """The cheapest pair of settings that runs. Two discrete levers: every combination, by
    cost (the dearer change, then both, then how far down each list). Otherwise each level of
    the discrete (or cheaper) lever, then the other solved on top."""
    if a.discrete and b.discrete:
        combos = []
        for i, sa in enumerate(a.levels):
            for j, sb in enumerate(b.levels):
                c = sb(sa(start))
                ranks = [ch.rank for ch in c.changes]
                combos.append(((max(ranks), sum(ranks), i + j), c))
        for _, c in sorted(combos, key=lambda x: x[0]):
            if s.runs(c):
                return c
        return None
    first, second = (a, b) if (a.discrete, -a.rank) > (b.discrete, -b.rank) else (b, a)
    for step in first.levels:
        c = second.solve(s, step(start))
        if c is not None:
            return c
    return None


def _dedupe(cands: list[_Cand]) -> list[_Cand]:
    seen, out = set(), []
    for c in cands:
        key = tuple(ch.label for ch in c.changes)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _option(s: _Search, c: _Cand) -> Option:
    r = s.eval(c)
    assert isinstance(r, FitResult) and r.runs
    model = c.model or s.ev.model_ref
    setup = (wired_command(c.wired_mb),) if c.wired_mb is not None else ()
    cost = None
    if any(ch.kind == "prefill_step_size" for ch in c.changes):
        now = s.ev.ttft(c.run, model=c.model)
        was = s.ev.ttft(replace(c.run, prefill_step_size=s.base.run.prefill_step_size),
                        model=c.model)
        cost = now - was if now is not None and was is not None else None
    return Option(changes=c.changes, result=r, model=model,
                  command=command_line(model, c.run, c.serving), setup=setup, ttft_cost_s=cost)


def _problem(r: FitResult) -> str:
    if r.verdict == "tight" and r.bands is not None:
        return (f"tight: needs {r.total_bytes / 1e9:,.2f} GB at the estimate, up to "
                f"{r.bands.peak_hi / 1e9:,.2f} GB at its upper bound, "
                f"{r.usable_bytes / 1e9:,.2f} GB usable")
    return "; ".join(r.problems)




