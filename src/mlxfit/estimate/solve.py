"""The pure core: (ModelConfig, weights, run, machine figures, calibration) -> FitResult.

No I/O, no clock, no environment: everything arrives as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from mlxfit.calibration.constants import Calibration
from mlxfit.estimate.bands import Bands, peak_band_at, run_bands, verdict
from mlxfit.estimate.compute import (
    ChipCompute,
    decode_matmul_flops,
    predicted_ttft,
    watchdog_warning,
)
from mlxfit.estimate.memory import (
    Phase,
    Run,
    Term,
    as_mlx_lm_runs,
    kv_term,
    peak_phase,
    state_bytes_final,
    state_term,
    validate_run,
)
from mlxfit.estimate.serving_summary import ServingSummary
from mlxfit.estimate.speed import predicted_decode, predicted_decode_seconds
from mlxfit.json_result import JsonResult
from mlxfit.model.config import ModelConfig
from mlxfit.model.inputs import Buffer, WeightsDetail, WeightsRead

# The short context a decode speed is also given at (1K tokens: what reviews and benchmarks
# quote, mlx_lm.benchmark's prompts are of that order).
SHORT_CONTEXT = 1024

# Used when config.json has no max_position_embeddings: the solver needs an upper bound.
DEFAULT_MAX_CONTEXT = 131072

# Terms beyond one generation's (serving budgets: more sequences, cached prompts, a draft
# model): a function of the run at the probed context and of that run's peak phase, so the
# solver and the fit add exactly the same bytes. See estimate/serving.py.
ExtraTerms = Callable[[Run, Phase], tuple[Term, ...]]


@dataclass(frozen=True)
class Totals:
    """Everything at one context: the peak is weights + KV + state + transient."""

    weights: int
    kv: int
    state: int
    phase: Phase
    extra: tuple[Term, ...] = ()  # serving terms (empty for one mlx_lm.generate run)

    @property
    def transient(self) -> int:
        # The peak moment's caches may differ from the final ones (a sliding window holds
        # window-1+chunk tokens during prefill; a full cache is smaller mid-prefill).
        return self.phase.total_over_weights - self.kv - self.state

    @property
    def extra_bytes(self) -> int:
        return sum(t.bytes for t in self.extra)

    @property
    def total(self) -> int:
        return self.weights + self.phase.total_over_weights + self.extra_bytes


def totals_at(cfg: ModelConfig, weights_bytes: int, run: Run, cal: Calibration,
              extra: ExtraTerms | None = None) -> Totals:
    be = cal.backend(run.backend)
    phase = peak_phase(cfg, run, be, weights_bytes)
    return Totals(
        weights=weights_bytes,
        kv=kv_term(cfg, run).bytes,
        state=state_bytes_final(cfg, run),
        phase=phase,
        extra=tuple(extra(run, phase)) if extra is not None else (),
    )


def memo_totals(cfg: ModelConfig, weights_bytes: int, run: Run, cal: Calibration) -> Totals:
    """``totals_at`` through the model's memo: the peak does not depend on the machine beyond
    what the run holds, so matrix and pick compute each (run, constants) once for every Mac."""
    memo = cfg.totals_memo
    hit = memo.get((weights_bytes, run))
    if hit is not None and hit[0] is cal:  # the same constants, by identity
        return hit[1]
    t = totals_at(cfg, weights_bytes, run, cal)
    if len(memo) < 4096:
        memo[(weights_bytes, run)] = (cal, t)
    return t


def context_limit(cfg: ModelConfig, run: Run) -> tuple[int, list[str]]:
    """The largest context the solver searches (max_position_embeddings, else
    DEFAULT_MAX_CONTEXT) and the warnings about it: none in the config, ctx beyond it."""
    limit = cfg.max_position or DEFAULT_MAX_CONTEXT
    warn = []
    if not cfg.max_position:
        warn.append(f"config has no max_position_embeddings: max context searched up to {limit}")
    if run.ctx > limit:
        warn.append(f"--ctx {run.ctx:,} is past the model's trained context of {limit:,} tokens "
                    f"({cfg.context_source or 'max_position_embeddings'}): mlx-lm runs it, but "
                    "output quality past it is not what the model was trained for")
    return limit, warn


def run_at(run: Run, n: int) -> Run:
    """The same run at another context (generated tokens capped below it)."""
    return replace(run, ctx=n, gen=min(run.gen, n - 1))


def largest_true(ok: Callable[[int], bool], hi: int) -> int:
    """Largest n in [1, hi] with ok(n), by bisection (0 if not even ok(1)); ok is assumed
    monotone, and the invariant ok(lo) and not ok(top) makes the answer's n+1 fail."""
    if hi < 1 or not ok(1):
        return 0
    if ok(hi):
        return hi
    lo, top = 1, hi
    while top - lo > 1:
        mid = (lo + top) // 2
        if ok(mid):
            lo = mid
        else:
            top = mid
    return lo


def solve_max_context(cfg: ModelConfig, weights_bytes: int, run: Run, cal: Calibration,
                      usable: int, hi: int, extra: ExtraTerms | None = None,
                      factor: Callable[[int], float] | None = None) -> int:
    """Largest n in [1, hi] whose total fits (0 if even one token does not): bisection on the
    same total the fit uses, keeping the invariant total(lo) fits and total(hi') does not.
    ``factor``: the total at n is taken times factor(n) (a bound of its peak band)."""

    def total(n: int) -> int:
        r = run_at(run, n)
        if extra is not None:  # a serving closure: its terms are not part of the key
            return totals_at(cfg, weights_bytes, r, cal, extra).total
        return memo_totals(cfg, weights_bytes, r, cal).total

    if factor is None:
        return largest_true(lambda n: total(n) <= usable, hi)
    return largest_true(lambda n: total(n) * factor(n) <= usable, hi)


@dataclass(frozen=True)
class FitResult(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.fit:fit_to_json"
    model: str
    source_kind: str
    machine_name: str
    ram_bytes: int
    bandwidth_gbs: float | None
    usable_bytes: int
    usable_source: str
    context_tokens: int
    weights_bytes: int
    kv_bytes: int
    state_bytes: int
    transient_bytes: int
    total_bytes: int
    fits: bool  # the total fits the usable memory and the context is within the model's limit
    max_safe_context: int
    context_limit: int
    predicted_decode_tps: float | None
    peak_phase: str
    terms: tuple[Term, ...]
    speed_terms: tuple[Term, ...]
    run: Run
    warnings: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    weights_detail: WeightsDetail | None = None  # None: made by the pure core alone
    # Serving budgets (--parallel, --prompt-cache, --draft-model): named terms included in
    # total_bytes, and the command and serving set-up (None: made by the pure core alone).
    extra_terms: tuple[Term, ...] = field(default=())
    serving: ServingSummary | None = None
    # Single arrays checked against the GPU's maxBufferLength (mlxfit.model.inputs.Buffer), largest
    # first, and the limit (None when unknown).
    buffers: tuple[Buffer, ...] = field(default=())
    max_buffer_bytes: int | None = None
    # The cache plan's origin (ModelConfig.plan_source): "table", "mlx-lm <version>" or an
    # unverified plain-transformer estimate (family_known False).
    family_known: bool = True
    plan_source: str = "table"
    advice: Any = None  # mlxfit.verbs.advise.Advice when asked for (fit(advise=...))
    chart: Any = None  # mlxfit.verbs.chart.ChartData when asked for (fit(chart=True))
    # --ctx past the config's max_position_embeddings: mlx-lm would run it, but the model was
    # not trained to read that far, so it does not fit whatever the memory (issue 13)
    beyond_context: bool = False
    # The hardware.resolve.Machine it was sized for (set by verbs.fit.fit_inputs; the pure core
    # takes only its figures): what the JSON's machine object is made from.
    machine: Any = None
    # Prompt processing (estimate/compute.py): None without a compute figure for the chip.
    predicted_prefill_tps: float | None = None
    predicted_ttft_s: float | None = None
    prefill_terms: tuple[Any, ...] = field(default=())
    # Decode speed depends on the context it reads (ux-3 F17): predicted_decode_tps is the last
    # token's, with the whole context in the cache; this one at SHORT_CONTEXT tokens, as
    # reviews quote it (None when the run is no longer than that, or has no speed).
    predicted_decode_tps_short: float | None = None
    # Decode: the per-op seconds of one token (speed.decode_time_terms), for --explain
    decode_terms: tuple[Any, ...] = field(default=())
    # estimate.compute.watchdog_warning's text (also in warnings): a prefill chunk may trip
    # macOS's GPU watchdog. Every verb's rows read it here: one rule for fit, matrix, pick,
    # serve-plan and a single-host cluster.
    watchdog: str | None = None
    # Why context_limit is longer than max_position_embeddings (ModelConfig.context_source).
    context_source: str = ""
    # The range each figure really holds (estimate/bands.py; None without a band table)
    bands: Bands | None = None

    @property
    def verdict(self) -> str:
        """"fits", "tight" (fits at the estimate, not at its peak band's upper bound) or
        "does_not_fit": estimate/bands.verdict, the rule of every verb."""
        return verdict(self.runs, self.bands.peak_hi if self.bands else None,
                       self.usable_bytes)

    @property
    def oversize_buffers(self) -> tuple[Any, ...]:
        """Arrays larger than maxBufferLength: Metal cannot allocate them, whatever the total."""
        if self.max_buffer_bytes is None:
            return ()
        return tuple(b for b in self.buffers if b.bytes > self.max_buffer_bytes)

    @property
    def problems(self) -> tuple[str, ...]:
        """Why the run does not fit or run, each in a phrase; empty when it runs."""
        out = []
        if self.beyond_context:
            out.append(f"--ctx {self.context_tokens:,} is beyond the model's context limit "
                       f"({self.context_limit:,} tokens, max_position_embeddings)")
        if self.total_bytes > self.usable_bytes:
            out.append(f"needs {self.total_bytes / 1e9:,.2f} GB, "
                       f"{self.usable_bytes / 1e9:,.2f} GB usable")
        out += [f"{b.name} is {b.bytes / 1e9:,.2f} GB, over the GPU's largest buffer "
                f"({(self.max_buffer_bytes or 0) / 1e9:,.2f} GB)" for b in self.oversize_buffers]
        return tuple(out)

    @property
    def runs(self) -> bool:
        """Fits in memory and no single array exceeds the GPU's largest buffer."""
        return self.fits and not self.oversize_buffers


def fit_core(
    *,
    model: str,
    source_kind: str,
    cfg: ModelConfig,
    weights: WeightsRead,
    run: Run,
    cal: Calibration,
    machine_name: str,
    ram_bytes: int,
    bandwidth_gbs: float | None,
    usable_bytes: int,
    usable_source: str,
    warnings: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    weights_detail: WeightsDetail | None = None,
    extra_terms: ExtraTerms | None = None,
    compute: ChipCompute | None = None,
) -> FitResult:
    run, ignored = as_mlx_lm_runs(cfg, run)
    validate_run(cfg, run)
    warn = list(warnings) + list(cfg.warnings) + list(ignored)
    t = (totals_at(cfg, weights.total_bytes, run, cal, extra_terms) if extra_terms is not None
         else memo_totals(cfg, weights.total_bytes, run, cal))
    limit, limit_warnings = context_limit(cfg, run)
    warn += limit_warnings
    memory_fits = t.total <= usable_bytes
    beyond = bool(cfg.max_position) and run.ctx > limit  # a limit the config states
    fits = memory_fits and not beyond
    if cal.bands is None:
        max_ctx = solve_max_context(cfg, weights.total_bytes, run, cal, usable_bytes, limit,
                                    extra_terms)
        safe_range = (max_ctx, max_ctx)
    else:
        # the largest safe context is the one whose UPPER peak bound fits; the band's other
        # end, the one whose lower bound does
        band_at = peak_band_at(cal.bands, machine_name, cfg, weights.total_bytes,
                               cfg.family_known, run.backend)
        safe_range = tuple(solve_max_context(
            cfg, weights.total_bytes, run, cal, usable_bytes, limit, extra_terms,
            factor=lambda n, i=i: 1 + band_at(n)[i]) for i in (1, 0))
        max_ctx = safe_range[0]

    tps = None
    speed_terms: tuple[Term, ...] = ()
    tps_short = None
    decode_terms: tuple[Any, ...] = ()
    if bandwidth_gbs is None:
        warn.append("memory bandwidth unknown for this machine: no decode speed (pass --machine)")
    elif not memory_fits:
        warn.append("over the usable memory: decode would swap (10-20x slower), no speed given")
    else:  # past the trained context too: the speed is shown beside its warning (issue 28)
        # seconds, byte terms and per-op terms of one computation (--explain shows the terms)
        mflops = decode_matmul_flops(compute)
        secs, st, decode_terms = predicted_decode(cfg, run, weights, bandwidth_gbs, cal,
                                                  machine_name, matmul_flops=mflops)
        tps = 1.0 / secs
        speed_terms = tuple(st)
        if run.ctx > SHORT_CONTEXT:
            short_s, _ = predicted_decode_seconds(cfg, run_at(run, SHORT_CONTEXT), weights,
                                                  bandwidth_gbs, cal, machine_name,
                                                  matmul_flops=mflops)
            tps_short = 1.0 / short_s
    prompt = dog = None
    if compute is not None and bandwidth_gbs is not None and memory_fits:
        prompt = predicted_ttft(cfg, run, weights, bandwidth_gbs, compute, cal, machine_name)
        if prompt is not None:
            dog = watchdog_warning(cfg, run, weights, bandwidth_gbs, compute, cal,
                                   machine_name, prompt)
            if dog:
                warn.append(dog)

    terms = (
        Term("weights", weights.total_bytes, "sum of tensor bytes from the safetensors headers"),
        kv_term(cfg, run),
        state_term(cfg, run),
        Term("transient", t.transient,
             f"peak phase '{t.phase.name}': its caches minus the final caches + the terms below",
             {"phase": t.phase.name}),
        *t.phase.terms,
        *t.extra,
    )
    bands = None
    if cal.bands is not None:
        bands = run_bands(cal.bands, machine_name, cfg, weights.total_bytes, run.ctx,
                          cfg.family_known, t.total, safe_range, tps,
                          prompt.prefill_tps if prompt else None,
                          prompt.ttft_s if prompt else None, run.backend)
    return FitResult(
        model=model,
        source_kind=source_kind,
        machine_name=machine_name,
        ram_bytes=ram_bytes,
        bandwidth_gbs=bandwidth_gbs,
        usable_bytes=usable_bytes,
        usable_source=usable_source,
        context_tokens=run.ctx,
        weights_bytes=weights.total_bytes,
        kv_bytes=t.kv,
        state_bytes=t.state,
        transient_bytes=t.transient,
        total_bytes=t.total,
        fits=fits,
        max_safe_context=max_ctx,
        context_limit=limit,
        predicted_decode_tps=tps,
        peak_phase=t.phase.name,
        terms=terms,
        speed_terms=speed_terms,
        run=run,
        warnings=tuple(warn),
        notes=tuple(notes),
        weights_detail=weights_detail,
        extra_terms=t.extra,
        family_known=cfg.family_known,
        plan_source=cfg.plan_source,
        beyond_context=beyond,
        predicted_prefill_tps=prompt.prefill_tps if prompt else None,
        predicted_ttft_s=prompt.ttft_s if prompt else None,
        predicted_decode_tps_short=tps_short,
        prefill_terms=prompt.terms if prompt else (),
        decode_terms=decode_terms,
        watchdog=dog,
        context_source=cfg.context_source,
        bands=bands,
    )
