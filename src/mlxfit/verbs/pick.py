"""`mlxfit pick`: which downloaded model to load when the user names none, and why.

The rule is the one the original TypeScript tool shipped (chooseAutoModel), kept because it is
right for an auto-load:
  1. the default model, if it is downloaded and fits the usable memory at all;
  2. else the largest downloaded model whose peak fits the coexist budget, a fraction of RAM
     (0.6) that leaves the machine usable for other apps: an auto-pick must never grab a model
     that needs the whole machine (a 17 GB model on a 24 GB Mac); that one stays an explicit
     choice, while the same model is auto-eligible on a bigger Mac;
  3. else the largest that fits the usable memory at all, so a user whose only model is a heavy
     one still gets it;
  4. else none, with the reason.
"Largest" is the weights' bytes (what was downloaded), as in the original.

Candidates are the models in the local Hugging Face cache that mlx-lm can load: a snapshot
with config.json and model*.safetensors (any revision). Each is sized from its headers with
the same functions as `fit`. Adapters and speculative-decoding drafters are not models to
auto-load and are skipped (see `adapter_reason` / `drafter_reason`); a broken model (missing
shard, corrupted header, broken symlink, unreadable) is skipped with a warning and never stops
the pick.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from mlxfit.errors import MlxfitError, UsageError
from mlxfit.estimate.memory import Run, run_from
from mlxfit.estimate.solve import FitResult
from mlxfit.hardware.resolve import Machine
from mlxfit.json_result import JsonResult
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model.inputs import ModelInputs, WeightsDetail, model_arrays, model_inputs
from mlxfit.model.mlx_extra import require_mlx
from mlxfit.model.quantize import ConversionPlan
from mlxfit.settings import Settings, config_table
from mlxfit.sources.catalog import catalog_ids, load_entry
from mlxfit.sources.folder import missing_numbered_shards, read_config
from mlxfit.sources.hf_cache import (
    adapter_reason,
    drafter_reason,
    hf_hub_cache_dir,
    repo_id_of,
    snapshot_order,
)
from mlxfit.sources.resolve import resolve_model
from mlxfit.sources.source import CATALOG_NOTE, INDEX_NAME, ModelSource
from mlxfit.verbs.convert_plan import pick_recipes, predicted_quants
from mlxfit.verbs.edges import (
    calibration_for_user,
    check_machine_params,
    machine_for,
    this_machine_warnings,
)
from mlxfit.verbs.fit import fit_served
from mlxfit.verbs.pick_rule import Option, choose
from mlxfit.verbs.pick_rule import gb as _gb
from mlxfit.verbs.plan import check_plan, with_plan

# ---------------------------------------------------------------------------------------------
# Settings: ~/.config/mlxfit/config.toml, [pick] table
# ---------------------------------------------------------------------------------------------

COEXIST_FRACTION = 0.6  # from the original tool (fit.ts COEXIST_FRACTION)


@dataclass(frozen=True)
class PickSettings:
    default_model: str | None  # None: no default model set (the rule goes by size)
    default_model_from: str  # "none", the config file, or "argument"
    coexist_fraction: float
    coexist_fraction_from: str


_KEYS = ("default_model", "coexist_fraction")


def load_settings(path: Path | None = None, *, settings: Settings | None = None) -> PickSettings:
    """The [pick] table of config.toml (`path`, default config.toml in the user config folder,
    ~/.config/mlxfit): ``default_model = "org/name"`` and ``coexist_fraction = 0.6``. Other
    tables are other verbs' business and are ignored; a missing file means the built-in values."""
    p, table = config_table("pick", path, settings)
    # No default model unless the user names one: mlxfit's own default (the model `fit` sizes
    # when none is named) is not the user's choice and must not win the pick (ux-3 F16).
    s = PickSettings(None, "none", COEXIST_FRACTION, "built-in")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise UsageError(f"{p}: unknown key {unknown[0]!r} in [pick] (known: {', '.join(_KEYS)})")
    if "default_model" in table:
        dm = table["default_model"]
        if not isinstance(dm, str) or not dm.strip():
            raise UsageError(f"{p}: [pick] default_model must be a repo id string")
        s = replace(s, default_model=dm.strip(), default_model_from=str(p))
    if "coexist_fraction" in table:
        s = replace(s, coexist_fraction=check_fraction(table["coexist_fraction"], str(p)),
                    coexist_fraction_from=str(p))
    return s


def _is_default(model: str, settings: PickSettings) -> bool:
    """Whether ``model`` is the user's default model (repo ids match case-insensitively)."""
    dm = settings.default_model
    return dm is not None and model.casefold() == dm.casefold()


def check_fraction(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise UsageError(f"{where}: coexist_fraction must be a number in (0, 1], got {v!r}")
    return float(v)


# ---------------------------------------------------------------------------------------------
# Scanning the Hugging Face cache
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Skipped:
    model: str
    revision: str | None
    location: str
    kind: str  # "adapter" | "drafter" | "not-a-model" | "broken"
    reason: str


@dataclass(frozen=True)
class _Loaded:
    inputs: ModelInputs
    arrays: tuple  # its largest weight arrays, for the maxBufferLength check
    revision: str
    location: str
    notes: tuple[str, ...] = ()
    config: dict = field(default_factory=dict, repr=False)  # config.json, for --plan mlx-lm


def _os_reason(e: OSError) -> str:
    return f"{e.strerror or type(e).__name__}: {e.filename}" if e.filename else str(e)


def _load_snapshot(repo_id: str, snap: Path) -> _Loaded | Skipped:
    rev = snap.name
    loc = str(snap)

    def skip(kind: str, reason: str) -> Skipped:
        return Skipped(repo_id, rev, loc, kind, reason)

    try:
        files = sorted(os.listdir(snap))
    except OSError as e:
        return skip("broken", f"cannot list the snapshot ({_os_reason(e)})")
    why = adapter_reason(files)
    if why:
        return skip("adapter", why)
    why = drafter_reason(repo_id, None)
    if why:
        return skip("drafter", why)
    weights = [f for f in files if f.startswith("model") and f.endswith(".safetensors")]
    if "config.json" not in files:
        if weights:
            return skip("broken", "safetensors without config.json (download incomplete?)")
        if any(f.endswith(".gguf") for f in files):
            return skip("not-a-model", "GGUF files only (llama.cpp's format; MLX loads "
                                       "safetensors: look for an MLX conversion)")
        return skip("not-a-model", "no config.json and no safetensors")
    try:
        config = read_config(snap / "config.json")
        why = drafter_reason(repo_id, config)
        if why:
            return skip("drafter", why)
        if not weights and INDEX_NAME not in files:
            others = [f for f in files
                      if f.endswith((".safetensors", ".gguf", ".bin", ".pt", ".pth", ".npz"))]
            return skip("not-a-model", "no model*.safetensors: " + (
                f"weights in another format ({', '.join(others[:3])})" if others
                else "weights not downloaded (config.json only)"))
        # With an index, sources names the missing shard itself; without one, mlx-lm's glob
        # would load the shards present and run short.
        missing = [] if INDEX_NAME in files else (
            missing_numbered_shards(weights))
        if missing:
            return skip("broken", f"half-downloaded: {', '.join(missing[:3])}"
                                  f"{' ...' if len(missing) > 3 else ''} missing")
        src = resolve_model(str(snap))  # the folder path: config, index check, headers
        src = replace(src, name=repo_id, kind="hf-cache", revision=rev)
        return _Loaded(model_inputs(src), model_arrays(src), rev, loc, tuple(src.notes),
                       src.config)
    except MlxfitError as e:
        return skip("broken", str(e).splitlines()[0] if str(e) else type(e).__name__)
    except OSError as e:
        return skip("broken", _os_reason(e))
    except Exception as e:  # noqa: BLE001 - one odd model must never abort the whole pick
        return skip("broken", f"unexpected {type(e).__name__}: {e}")


_SEVERITY = {"broken": 0, "not-a-model": 1}


def scan_cache(cache: Path) -> tuple[list[_Loaded], list[Skipped], list[str]]:
    """Every model repo of the hub cache at `cache`: loaded, skipped (why), cache-level warnings."""
    loaded: list[_Loaded] = []
    skipped: list[Skipped] = []
    warnings: list[str] = []
    if not cache.exists() and not cache.is_symlink():
        return loaded, skipped, warnings
    try:
        repos = sorted((p, rid) for p in cache.iterdir() if (rid := repo_id_of(p.name)))
    except OSError as e:
        warnings.append(f"cannot read the Hugging Face cache at {cache}: {_os_reason(e)}")
        return loaded, skipped, warnings
    for repo_dir, repo_id in repos:
        try:
            snaps = snapshot_order(repo_dir)
        except OSError as e:
            skipped.append(Skipped(repo_id, None, str(repo_dir), "broken",
                                   f"cannot list its snapshots ({_os_reason(e)})"))
            continue
        if not snaps:
            skipped.append(Skipped(repo_id, None, str(repo_dir), "not-a-model",
                                   "no snapshot (nothing downloaded)"))
            continue
        fails: list[Skipped] = []
        for snap in snaps:
            got = _load_snapshot(repo_id, snap)
            if isinstance(got, _Loaded):
                loaded.append(replace(got, notes=got.notes + tuple(
                    f"revision {f.revision[:12]} skipped: {f.reason}"
                    for f in fails if f.revision)))
                break
            fails.append(got)
            if got.kind in ("adapter", "drafter"):  # what the repo is, whatever the revision
                break
        else:  # no revision loads: report the worst reason (a broken download first)
            skipped.append(min(fails, key=lambda f: _SEVERITY.get(f.kind, 2)))
            continue
        if fails and fails[-1].kind in ("adapter", "drafter"):
            skipped.append(fails[-1])
    for s in skipped:
        if s.kind == "broken":
            rev = f"@{s.revision[:12]}" if s.revision else ""
            warnings.append(f"skipped {s.model}{rev}: {s.reason}")
    return loaded, skipped, warnings


# ---------------------------------------------------------------------------------------------
# pick()
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    model: str
    revision: str | None  # hf-cache snapshot sha; None for the catalog
    source_kind: str  # "hf-cache" | "catalog"
    location: str
    quant: str  # "4-bit", "8-bit", "bf16", "mxfp4", ...
    weights_bytes: int
    total_bytes: int  # peak at the context
    fits: bool  # the total fits the usable memory (FitResult.fits)
    runs: bool  # ... and no single array exceeds the GPU's largest buffer (FitResult.runs)
    fits_coexist: bool  # runs within the coexist budget
    max_safe_context: int
    context_limit: int
    predicted_decode_tps: float | None
    is_default: bool
    chosen: bool
    budget: str  # "usable" | "coexist": the budget the rule held it to
    budget_bytes: int
    reason: str
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    result: FitResult | None = field(default=None, repr=False, compare=False)
    predicted_prefill_tps: float | None = None  # FitResult's (estimate/compute.py)
    predicted_ttft_s: float | None = None
    watchdog: str | None = None  # FitResult.watchdog: prefill may trip macOS's GPU watchdog
    # the mlx_lm.convert plan of a predicted conversion ("<id> as 4bit", --quants); else None
    conversion: ConversionPlan | None = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> str:
        """FitResult's verdict (estimate/bands.verdict); without a result, from ``runs``."""
        if self.result is not None:
            return self.result.verdict
        return "fits" if self.runs else "does_not_fit"


@dataclass(frozen=True)
class PickResult(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.pick:pick_to_json"
    chosen: str | None  # repo id, or None
    rule: str  # "default" | "coexist" | "fits" | "none"
    reason: str
    context_tokens: int
    machine_name: str
    ram_bytes: int
    usable_bytes: int
    usable_source: str
    coexist_fraction: float
    coexist_fraction_from: str
    coexist_bytes: int
    default_model: str | None
    default_model_from: str
    cache_dir: str
    candidates: tuple[Candidate, ...]  # largest first
    skipped: tuple[Skipped, ...]
    catalog: tuple[Candidate, ...] | None  # with catalog=True: not downloaded, best first
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    machine: Machine | None = None  # the machine sized for (the JSON's machine object)
    run: Run | None = None  # the run every candidate was sized for
    only_fits: bool = False  # the catalog rows are only those that run here

    @property
    def chosen_candidate(self) -> Candidate | None:
        return next((c for c in self.candidates if c.chosen), None)

    @property
    def answered(self) -> bool:
        """A downloaded model was chosen, or (asked with the catalog) a catalog model runs
        here: the question has an answer (exit 0)."""
        return self.chosen is not None or any(c.runs for c in self.catalog or ())


def quant_label(weights_detail: WeightsDetail | None) -> str:
    if weights_detail is None:
        return "?"
    q = weights_detail.quantization
    if q:
        return f"{q.bits}-bit" if q.mode == "affine" else str(q.mode)
    return next(iter(weights_detail.by_dtype or {}), "?").lower()


def pick(
    ctx: int = 8192,
    *,
    catalog: bool = False,
    machine: str | None = None,
    memory_budget_gb: float | None = None,
    macos: int | None = None,
    default_model: str | None = None,
    no_default_model: bool = False,
    coexist_fraction: float | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    config_path: str | os.PathLike[str] | None = None,
    calibration=None,
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: int | None = None,
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: int | None = None,
    only_fits: bool = False,
    quants: str | None = None,
    q_bits: int | None = None, q_group_size: int | None = None, q_mode: str | None = None,
    quant_predicate: str | None = None, dtype: str | None = None,
    plan: str = "auto",
) -> PickResult:
    """The model to auto-load on this (or the named) Mac at ``ctx`` tokens, and why.

    ``default_model`` / ``coexist_fraction`` override config.toml's [pick] table (without
    either there is no default model: the rule goes by size); ``no_default_model`` ignores the
    table's default model;
    ``cache_dir`` replaces the Hugging Face cache found from the environment. The run
    parameters are ``fit``'s (mlx-lm's flags); ``only_fits`` keeps only the catalog rows that
    run here (the downloaded candidates are all kept: the rule's reasons name them);
    ``quants`` ("4,mixed_3_6,mxfp4") and the convert flags ``q_bits``...``dtype`` add, with
    ``catalog``, each unquantized entry as mlx_lm.convert would write it in those
    quantizations; ``plan``: where each downloaded model's cache plan comes from, as
    ``fit``'s (mlxfit.verbs.plan: auto reads mlx-lm's own classes for a family the table
    lacks)."""
    # Every parameter is checked before the settings file is read or the machine probed.
    check_plan(plan)
    if plan == "mlx-lm":
        require_mlx()  # one line up front, not every candidate skipped for it
    run = run_from(ctx=ctx, prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                   kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
                   max_kv_size=max_kv_size)
    check_machine_params(memory_budget_gb, macos)
    recipes = pick_recipes(quants, q_bits, q_group_size, q_mode, quant_predicate, dtype)
    if default_model is not None and not default_model.strip():
        raise UsageError("default_model is empty", param="default_model")
    if default_model is not None and no_default_model:
        raise UsageError("default_model and no_default_model contradict each other: give one",
                         param="no_default_model", also=("default_model",))
    if coexist_fraction is not None and (
            isinstance(coexist_fraction, bool) or not isinstance(coexist_fraction, (int, float))
            or not 0 < coexist_fraction <= 1):
        raise UsageError(f"coexist_fraction must be a number in (0, 1], got "
                         f"{coexist_fraction!r}", param="coexist_fraction")
    settings = load_settings(Path(config_path) if config_path is not None else None)
    if default_model is not None:
        settings = replace(settings, default_model=default_model.strip(),
                           default_model_from="argument")
    if no_default_model:
        settings = replace(settings, default_model=None, default_model_from="argument")
    if coexist_fraction is not None:
        settings = replace(settings, coexist_fraction=float(coexist_fraction),
                           coexist_fraction_from="argument")
    m = machine_for(machine, memory_budget_gb, macos)
    cal = calibration_for_user(calibration)
    usable = m.usable_bytes
    coexist = min(int(m.ram_bytes * settings.coexist_fraction), usable)
    cache = Path(cache_dir) if cache_dir is not None else hf_hub_cache_dir()

    loaded, skipped, warnings = scan_cache(cache)
    warnings[:0] = this_machine_warnings(machine)
    notes = list(m.notes)
    if not cache.exists():
        notes.append(f"no Hugging Face cache at {cache}")

    evaluated: list[tuple[_Loaded, FitResult]] = []
    for ld in loaded:
        try:
            inputs, plan_warnings, plan_notes = with_plan(ld.inputs, ld.config, plan, run)
            # The function `fit` ends in: the same terms and the same buffer check.
            r = fit_served(inputs, run, m, cal, None, ld.arrays, model_ref=ld.inputs.name)
            # Where the cache plan came from is the candidate's own note (as its source's).
            evaluated.append((replace(ld, notes=ld.notes + plan_notes),
                              replace(r, warnings=plan_warnings + r.warnings)))
        except MlxfitError as e:  # e.g. a config the run cannot apply to: skip, never abort
            s = Skipped(ld.inputs.name, ld.revision, ld.location, "broken", str(e))
            skipped.append(s)
            warnings.append(f"skipped {s.model}@{ld.revision[:12]}: {s.reason}")

    options = [Option(ld.inputs.name, r.weights_bytes, r.total_bytes, r.runs,
                      r.runs and r.total_bytes <= coexist, _blocked(r),
                      tight=r.verdict == "tight") for ld, r in evaluated]
    default_skip = next((s for s in skipped
                         if _is_default(s.model, settings)), None)
    choice = choose(options, settings.default_model, usable, coexist, settings.coexist_fraction,
                    "is not downloaded" if default_skip is None
                    else f"is in the cache but skipped ({default_skip.kind})")
    cands = []
    for (ld, r), opt, v in zip(evaluated, options, choice.verdicts):
        cands.append(_candidate(r, ld.revision, ld.location, opt.fits_coexist, v.chosen,
                                v.budget, usable if v.budget == "usable" else coexist, v.reason,
                                _is_default(opt.model, settings),
                                ld.notes))
    cands.sort(key=lambda c: (-c.weights_bytes, c.model))
    reason = choice.reason
    if not options and not loaded:
        reason = (f"no candidate: no loadable MLX model (config.json + safetensors) in the "
                  f"Hugging Face cache at {cache}")

    cat_rows = _catalog_rows(run, m, cal, usable, coexist, settings,
                             {c.model.casefold() for c in cands}, notes, recipes) \
        if catalog else None
    if cat_rows is not None and only_fits:
        cat_rows = [c for c in cat_rows if c.runs]
    return PickResult(
        chosen=options[choice.index].model if choice.index is not None else None,
        rule=choice.rule, reason=reason, context_tokens=run.ctx, machine_name=m.name,
        ram_bytes=m.ram_bytes, usable_bytes=usable, usable_source=m.usable_source,
        coexist_fraction=settings.coexist_fraction,
        coexist_fraction_from=settings.coexist_fraction_from, coexist_bytes=coexist,
        default_model=settings.default_model, default_model_from=settings.default_model_from,
        cache_dir=str(cache), candidates=tuple(cands),
        skipped=tuple(sorted(skipped, key=lambda s: s.model.casefold())),
        catalog=tuple(cat_rows) if cat_rows is not None else None,
        warnings=tuple(warnings), notes=tuple(notes), machine=m, run=run, only_fits=only_fits,
    )


def _blocked(r: FitResult) -> str:
    """Why a model cannot run beside its total: past its context limit, an oversize array."""
    if r.beyond_context:
        return f"--ctx {r.context_tokens:,} is beyond its context limit ({r.context_limit:,})"
    if not r.fits or r.runs:
        return ""
    b = max(r.oversize_buffers, key=lambda b: b.bytes)
    return (f"one array ({b.name}, {_gb(b.bytes)}) exceeds the GPU's largest buffer "
            f"({_gb(r.max_buffer_bytes or 0)}, maxBufferLength)")


def _candidate(r: FitResult, revision: str | None, location: str, fits_coexist: bool,
               chosen: bool, budget: str, budget_bytes: int, reason: str, is_default: bool,
               notes: tuple[str, ...]) -> Candidate:
    # Per-machine warnings (unverified SKU, swap, no bandwidth) are the header's business:
    # keep what is about the model.
    warns = tuple(w for w in r.warnings if not w.startswith((
        "over the usable memory", "memory bandwidth unknown", f"{r.machine_name}:")))
    if r.context_tokens > r.context_limit:
        reason += f"; note: beyond its context limit {r.context_limit:,}"
    return Candidate(
        model=r.model, revision=revision, source_kind=r.source_kind, location=location,
        quant=quant_label(r.weights_detail), weights_bytes=r.weights_bytes,
        total_bytes=r.total_bytes, fits=r.fits, runs=r.runs, fits_coexist=fits_coexist,
        max_safe_context=r.max_safe_context, context_limit=r.context_limit,
        predicted_decode_tps=r.predicted_decode_tps if r.fits else None,
        is_default=is_default, chosen=chosen,
        budget=budget, budget_bytes=budget_bytes, reason=reason, warnings=warns,
        notes=notes, result=r,
        predicted_prefill_tps=r.predicted_prefill_tps, predicted_ttft_s=r.predicted_ttft_s,
        watchdog=r.watchdog if r.runs else None,
    )


def _catalog_rows(run, m, cal, usable: int, coexist: int, settings: PickSettings,
                  downloaded: set[str], notes: list[str], quants: tuple = ()
                  ) -> list[Candidate]:
    """The built-in catalog minus what is downloaded: what could run here, one row per quant
    variant; those that fit first, largest first, then the rest, closest to fitting first. An
    entry the run cannot apply to (--kv-bits on a sliding-window model) is left out, with a
    note saying why."""
    rows: list[Candidate] = []
    for rid in catalog_ids():
        if rid.casefold() in downloaded:
            continue
        e = load_entry(rid)
        if e is None:  # pragma: no cover - listed ids always load or raise
            continue
        src = ModelSource(name=e.repo_id, kind="catalog", location="built-in catalog",
                          config=e.config, tensors=e.tensors, files=(), notes=(CATALOG_NOTE,))
        variants = [(e.repo_id, src, None), *predicted_quants(src, quants, e.repo_id)]
        for name, s, plan in variants:
            try:
                rows.append(replace(_catalog_row(s, name, run, m, cal, usable, coexist,
                                                 settings), conversion=plan))
            except MlxfitError as err:
                notes.append(f"catalog {name} left out: {err}")
    # those that fit outright, largest first, then the tight ones (issue 27), then the rest
    rows.sort(key=lambda c: (0 if c.verdict == "fits" else 1, -c.weights_bytes, c.model)
              if c.runs else (2, c.total_bytes, c.model))
    return rows


def _catalog_row(src: ModelSource, rid: str, run, m, cal, usable: int, coexist: int,
                 settings: PickSettings) -> Candidate:
    """One catalog entry (or a predicted conversion of one, "<id> as 4bit") on this machine."""
    r = fit_served(model_inputs(src), run, m, cal, None, model_arrays(src), model_ref=rid)
    fc = r.runs and r.total_bytes <= coexist
    if r.verdict == "tight":
        why = "tight: fits the usable memory at the estimate, not at its upper bound"
    elif fc:
        why = f"fits the coexist budget ({_gb(coexist)})"
    elif r.runs:
        why = f"fits the usable {_gb(usable)}, over the coexist budget ({_gb(coexist)})"
    else:
        why = "does not fit: " + (_blocked(r) or
                                  f"needs {_gb(r.total_bytes)} > the usable {_gb(usable)}")
    return _candidate(r, None, "built-in catalog", fc, False,
                      "coexist" if r.runs else "usable", coexist if r.runs else usable,
                      why, _is_default(rid, settings), ())
