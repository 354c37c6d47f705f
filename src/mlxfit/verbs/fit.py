"""The Python twins of the CLI verbs. Each gathers its inputs at the edges (model source,
machine, calibration) and calls the pure core."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from mlxfit.calibration.constants import Calibration
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.estimate.batched import batched_step, seq_cache_bytes
from mlxfit.estimate.command_buffers import parse_mlx_env
from mlxfit.estimate.compute import decode_matmul_flops, predicted_ttft
from mlxfit.estimate.kernels import kernel_note
from mlxfit.estimate.memory import Run, run_from
from mlxfit.estimate.serving import (
    SERVER_PROMPT_CACHE_SIZE,
    DraftModel,
    Serving,
    all_buffers,
    check_serving,
    command_line,
    extra_terms_fn,
    max_context_within_buffer,
    summary,
    validate_serving,
)
from mlxfit.estimate.solve import DEFAULT_MAX_CONTEXT, FitResult, fit_core, run_at, totals_at
from mlxfit.estimate.speed import predicted_decode_seconds
from mlxfit.hardware.resolve import Machine
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model.inputs import ModelInputs, held_tensors, model_arrays, model_inputs
from mlxfit.model.names import quant_family
from mlxfit.model.quantize import QuantRecipe
from mlxfit.model.weights import summarize_weights
from mlxfit.settings import mlx_scheduler_env
from mlxfit.sources.catalog import catalog_ids, load_entry
from mlxfit.sources.hf_cache import hf_cache_ids
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.convert_plan import (
    CONVERTED_PATH,
    conversion_plan,
    converted_source,
    quant_recipe,
)
from mlxfit.verbs.edges import (
    calibration_for_user,
    calibration_note,
    check_machine_params,
    compute_for,
    load_draft,
    machine_for,
    machine_with_wired_limit,
    run_on,
    this_machine_warnings,
    vision_note,
)
from mlxfit.verbs.plan import check_plan, with_plan

if TYPE_CHECKING:
    from mlxfit.verbs.chart import ChartData


def fit(
    model: str,
    ctx: int = 8192,
    *,
    machine: str | None = None,
    memory_budget_gb: float | None = None,
    macos: int | None = None,
    revision: str | None = None,
    gen: int = 0,
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: int | None = None,
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: int | None = None,
    backend: str = "metal",
    with_vision: bool = False,
    calibration: Calibration | None = None,
    progress: bool = False,
    verbose: bool = False,
    parallel: int | None = None,
    prompt_cache: int | None = None,
    draft_model: str | None = None,
    wired_limit_mb: int | None = None,
    advise: bool | str = False,
    chart: bool = False,
    q_bits: int | None = None,
    q_group_size: int | None = None,
    q_mode: str | None = None,
    quant_predicate: str | None = None,
    dtype: str | None = None,
    plan: str = "auto",
    mlx_env: list[str] | dict[str, int] | None = None,
) -> FitResult:
    """Will ``model`` run a ``ctx``-token generation with mlx-lm on this (or the named) Mac?

    ``progress``: a transient progress display on stderr while a Hub model's headers are read;
    ``verbose``: a note saying what reading it from the Hub cost (requests, bytes).

    Serving budgets (mlxfit.estimate.serving): ``parallel`` sequences in mlx_lm.server's batch,
    ``prompt_cache`` cached prompts (mlx_lm.server's default 10 when serving), a speculative
    ``draft_model``. ``wired_limit_mb``: size as if ``sudo sysctl iogpu.wired_limit_mb=N`` were
    set. ``advise``: True, or "auto" (only when the run does not fit): attach an
    ``mlxfit.verbs.advise.Advice``. ``chart``: attach the memory/tok-s series (mlxfit.verbs.chart).

    ``q_bits``, ``q_group_size``, ``q_mode``, ``quant_predicate``, ``dtype``: mlx_lm.convert's
    flags; an unquantized model is then sized as convert would write it
    (mlxfit.verbs.convert_plan), the plan in ``weights_detail.conversion``.
    ``plan``: "auto", "table" or "mlx-lm": where the per-layer cache plan comes from
    (mlxfit.verbs.plan).

    ``mlx_env``: MLX's scheduler variables (``MLX_MAX_MB_PER_BUFFER=100``,
    ``MLX_MAX_OPS_PER_BUFFER``) as set for the run; sizing this Mac without it reads them from
    the environment."""
    # Every parameter is checked before the model is resolved (Hub requests) or the machine
    # probed: a bad one is named as itself, not hidden behind a missing folder.
    if advise not in (False, None, "auto", True):
        raise UsageError(f"advise must be True, False or 'auto', got {advise!r}", param="advise")
    run = run_from(ctx=ctx, gen=gen, prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                   kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
                   max_kv_size=max_kv_size, backend=backend)
    env_pairs = parse_mlx_env(mlx_env if mlx_env is not None or machine is not None
                              else mlx_scheduler_env())
    run = replace(run, mlx_env=env_pairs)
    check_machine_params(memory_budget_gb, macos, wired_limit_mb)
    check_serving(parallel, prompt_cache)
    check_plan(plan)
    recipe = quant_recipe(q_bits, q_group_size, q_mode, quant_predicate, dtype)
    cal = calibration_for_user(calibration)
    cal.backend(backend)  # a backend the calibration has
    src = resolve_model(model, revision=revision, progress=progress)
    if verbose and src.transfer is not None:
        src = replace(src, notes=src.notes + (src.transfer.describe(),))
    src, inputs = sized_source(src, recipe, model, with_vision)
    inputs, plan_warnings, plan_notes = with_plan(inputs, src.config, plan, run)
    m = machine_for(machine, memory_budget_gb, macos)
    if wired_limit_mb is not None:
        m = machine_with_wired_limit(m, wired_limit_mb)
    arrays = model_arrays(src, with_vision)
    draft = load_draft(draft_model, revision=None, with_vision=False) if draft_model else None
    if parallel is not None and prompt_cache is None:
        # No --prompt-cache: the cached prompts serve-plan plans (planned_serving), not the
        # server's 10 whatever they cost.
        serving = planned_serving(inputs, run, m, cal, parallel, arrays,
                                  CONVERTED_PATH if recipe is not None else model, draft)
    else:
        per = seq_cache_bytes(inputs.cfg, run)
        serving = Serving(parallel=parallel, prompt_cache=prompt_cache, draft=draft,
                          prompt_cache_bytes=(prompt_cache + (parallel or 1)) * per
                          if prompt_cache is not None else None)
    # A conversion runs from the folder convert writes (its default --mlx-path).
    ref = CONVERTED_PATH if recipe is not None else model
    r = fit_served(inputs, run, m, cal, serving, arrays, model_ref=ref)
    planned = ((f"cached prompts: {serving.cached_prompts}, as many of mlx_lm.server's "
                f"{SERVER_PROMPT_CACHE_SIZE} as fit beside {parallel} sequence(s), as "
                "serve-plan plans them (--prompt-cache N sizes N)"),) \
        if parallel is not None and prompt_cache is None else ()
    r = replace(r, warnings=this_machine_warnings(machine) + plan_warnings + r.warnings,
                notes=r.notes + plan_notes + planned)
    if advise is True or (advise == "auto" and not r.runs):
        # On demand: a run that fits pays for the advisor only when advice is asked for. The
        # name `advise` is this function's parameter.
        from mlxfit.verbs.advise import advise as advice_for

        ev = _Evaluator(ref, inputs, arrays, m, cal, with_vision=with_vision,
                        budget=memory_budget_gb is not None)
        r = replace(r, advice=advice_for(r, ev, serving))
    if chart:
        r = replace(r, chart=chart_data(inputs, r.run, m, cal, serving))
    return r


def sized_source(src, recipe: QuantRecipe | None, model_ref: str,
                 with_vision: bool = False):
    """(source, ModelInputs) of the model as given, or as mlx_lm.convert would write it with
    ``recipe``: the one path fit, matrix, pick and cluster size a conversion by."""
    if recipe is None:
        return src, model_inputs(src, with_vision=with_vision)
    src, plan = converted_source(src, recipe, model_ref)
    inputs = model_inputs(src, with_vision=with_vision)
    detail = replace(inputs.weights_detail, conversion=conversion_plan(plan, model_ref))
    return src, replace(inputs, weights_detail=detail)


def fit_inputs(inputs: ModelInputs, run: Run, m: Machine, cal: Calibration,
               extra_terms=None, extra_warnings: tuple[str, ...] = ()) -> FitResult:
    """One model on one machine: the notes and warnings of ``fit``, then the pure core.
    ``extra_terms`` (solve.ExtraTerms): serving terms added to the total (mlxfit.estimate.serving)."""
    run = run_on(run, m)
    warnings: list[str] = list(extra_warnings)
    notes = [*inputs.source_notes, *m.notes, *vision_note(inputs), *calibration_note(cal)]
    if run.backend == "metal" and m.gpu_arch:
        k = kernel_note(inputs.cfg, min(run.prefill_step_size, run.ctx), m.gpu_arch, m.name,
                        m.macos_major or 0, cal.backend("metal").fused_decode_head_dims)
        notes += [k] if k else []
    if m.unverified and m.is_apple_silicon:
        warnings.append(f"{m.name}: some figures in the SKU table are unverified")
    chip = compute_for(m)
    if chip is None:
        notes.append("no time to first token: " + (
            "not an Apple GPU (the prefill model is fitted on Metal runs)"
            if not m.is_apple_silicon else "the SKU table has no compute figure for this chip"))
    r = fit_core(
        model=inputs.name, source_kind=inputs.source_kind, cfg=inputs.cfg,
        weights=inputs.weights, run=run, cal=cal,
        machine_name=m.name, ram_bytes=m.ram_bytes, bandwidth_gbs=m.bandwidth_gbs,
        usable_bytes=m.usable_bytes, usable_source=m.usable_source,
        warnings=tuple(warnings), notes=tuple(notes), weights_detail=inputs.weights_detail,
        extra_terms=extra_terms, compute=chip,
    )
    return replace(r, machine=m)


# --------------------------------------------------------------------------- serving, advice,
# chart: one generation's fit plus the serving terms and the single-buffer check (serving.py),
# the advisor's evaluator (advise.py) and the chart series (chart.py).


def fit_served(inputs: ModelInputs, run: Run, m: Machine, cal: Calibration,
               serving: Serving | None = None,
               arrays: tuple = (), model_ref: str | None = None) -> FitResult:
    """``fit_inputs`` plus the serving terms (``serving.Serving``), the mlx-lm command line,
    a batched-decode estimate and the arrays checked against the GPU's maxBufferLength."""
    serving = serving or Serving()
    run2, warns = validate_serving(inputs.cfg, run, serving)
    if serving.prompt_cache_bytes is not None:  # the cap follows the count and the run
        serving = replace(serving, prompt_cache_bytes=(
            serving.cached_prompts + serving.sequences) * seq_cache_bytes(inputs.cfg, run2))
    r = fit_inputs(inputs, run2, m, cal, extra_terms=extra_terms_fn(inputs.cfg, cal, serving),
                   extra_warnings=tuple(warns))
    bd = None
    if serving.sequences > 1 and m.bandwidth_gbs and r.fits:
        bd = batched_step(inputs.cfg, run2, inputs.weights, m.bandwidth_gbs, cal, m.name,
                          serving.sequences, compute=compute_for(m))
    command = command_line(model_ref or inputs.name, run2, serving)
    info = summary(serving, run2, inputs.cfg, command, bd)
    extra_warn: list[str] = []
    if serving.draft is not None:
        extra_warn.append("decode speed is the main model's alone: the speculative speed-up "
                          "depends on how many draft tokens are accepted")
    buffers: tuple = ()
    limit = m.max_buffer_bytes
    safe = r.max_safe_context
    if run2.backend == "metal" and limit:
        buffers = all_buffers(inputs.cfg, run2, cal, serving, arrays)
        safe = max_context_within_buffer(inputs.cfg, run2, cal, serving, arrays, limit, safe)
        if r.bands is not None:  # the band's high end is held to the buffer too
            hi = max_context_within_buffer(inputs.cfg, run2, cal, serving, arrays, limit,
                                           r.bands.max_safe_context[1])
            r = replace(r, bands=replace(r.bands, max_safe_context=(safe, max(safe, hi))))
        if safe < r.max_safe_context:
            extra_warn.append(f"largest safe context {safe:,} (not {r.max_safe_context:,}): "
                              "beyond it one array would exceed the GPU's largest buffer")
        for b in buffers:
            if b.bytes > limit:
                extra_warn.append(
                    f"{b.name}: {b.bytes / 1e9:,.2f} GB in one array, over this GPU's largest "
                    f"buffer ({limit / 1e9:,.2f} GB, maxBufferLength): Metal cannot allocate it "
                    "even though the total fits" if r.fits else
                    f"{b.name}: {b.bytes / 1e9:,.2f} GB in one array, over this GPU's largest "
                    f"buffer ({limit / 1e9:,.2f} GB, maxBufferLength)")
    return replace(r, serving=info, buffers=buffers, max_buffer_bytes=limit,
                   max_safe_context=safe, warnings=r.warnings + tuple(extra_warn))


def planned_serving(inputs: ModelInputs, run: Run, m: Machine, cal: Calibration, n: int,
                    arrays: tuple = (), model_ref: str | None = None,
                    draft: DraftModel | None = None) -> Serving:
    """mlx_lm.server for ``n`` concurrent sequences as mlxfit plans it: as many cached prompts
    (up to the server's default 10) as the memory left beside the ``n`` sequences holds, and the
    --prompt-cache-bytes the server trims to. The one rule of `fit --parallel` and serve-plan."""
    per = seq_cache_bytes(inputs.cfg, run)
    bare = fit_served(inputs, run, m, cal, Serving(parallel=n, prompt_cache=0, draft=draft),
                      arrays, model_ref=model_ref)
    head = max(m.usable_bytes - bare.total_bytes, 0)
    k = int(min(SERVER_PROMPT_CACHE_SIZE, head // per)) if per else SERVER_PROMPT_CACHE_SIZE
    # All ten fit: the server's own default, said as such (ServingSummary.prompt_cache_default).
    return Serving(parallel=n, prompt_cache=None if k == SERVER_PROMPT_CACHE_SIZE else k,
                   draft=draft, prompt_cache_bytes=(k + n) * per)


# "The same size" for a longer-context alternative: weights within 10% (one quantization and
# parameter count; a different bit width is 25% or more away).
SAME_SIZE = 0.10


class _Evaluator:
    """advise.Evaluator: re-runs the same fit for a changed run, serving set-up, a sibling
    quantization or a wired limit."""

    def __init__(self, model_ref: str, inputs: ModelInputs, arrays: tuple, m: Machine, cal: Calibration,
                 *, with_vision: bool, budget: bool):
        self.model_ref = model_ref
        self.cfg = inputs.cfg
        self.ram_bytes = m.ram_bytes
        self._inputs = inputs
        self._arrays = arrays
        self._m = m
        self._cal = cal
        self._with_vision = with_vision
        self._models: dict[str, tuple[ModelInputs, tuple]] = {}
        if budget:
            self.wired_refusal = "raising the wired limit: --memory-budget sets the usable memory"
        elif not m.is_apple_silicon:
            self.wired_refusal = "raising the wired limit: not an Apple Silicon Mac"
        else:
            self.wired_refusal = None
        self._siblings: list[str] | None = None

    @property
    def siblings(self) -> list[str]:
        """Smaller quantizations of the same model (catalog, HF cache), largest first."""
        if self._siblings is None:

            sibs = []
            for rid in sibling_candidates(self._inputs.name):
                try:
                    loaded = self._load(rid)
                except MlxfitError:  # an unreadable sibling is simply not offered
                    continue
                if loaded[0].weights.total_bytes < self._inputs.weights.total_bytes:
                    sibs.append((loaded[0].weights.total_bytes, rid))
            self._siblings = [rid for _, rid in sorted(sibs, reverse=True)]
        return self._siblings

    def longer_context(self, run: Run, serving) -> list[tuple[str, FitResult]]:
        """Catalog models of this one's size (weights within SAME_SIZE) trained to run.ctx or
        more, with their fit here; closest in size first, at most two."""
        own = self._inputs.weights.total_bytes
        found = []
        for rid in catalog_ids():
            e = load_entry(rid)
            if rid.lower() == self._inputs.name.lower() or e is None \
                    or abs(e.total_bytes - own) > SAME_SIZE * own:
                continue
            try:
                r = self(run, serving, model=rid)
            except MlxfitError:  # an unreadable entry is simply not offered
                continue
            if not r.beyond_context:
                found.append((abs(e.total_bytes - own), rid, r))
        return [(rid, r) for _, rid, r in sorted(found, key=lambda x: (x[0], x[1]))[:2]]

    def _load(self, rid: str) -> tuple[ModelInputs, tuple]:
        if rid not in self._models:
            src = resolve_model(rid)
            self._models[rid] = (model_inputs(src, with_vision=self._with_vision),
                                 model_arrays(src, self._with_vision))
        return self._models[rid]

    def __call__(self, run: Run, serving, *, model: str | None = None,
                 wired_limit_mb: int | None = None) -> FitResult:
        inputs, arrays = (self._inputs, self._arrays) if model is None else self._load(model)
        m = self._m
        if wired_limit_mb is not None:
            m = machine_with_wired_limit(m, wired_limit_mb)
        return fit_served(inputs, run, m, self._cal, serving, arrays,
                          model_ref=model or self.model_ref)

    def ttft(self, run: Run, *, model: str | None = None) -> float | None:
        inputs = self._inputs if model is None else self._load(model)[0]
        return ttft_of(inputs, run, self._m, self._cal)


def chart_data(inputs: ModelInputs, run: Run, m: Machine, cal: Calibration,
               serving: Serving | None = None) -> ChartData:
    """Total memory and decode tok/s against the context (mlxfit.verbs.chart), from the same core."""
    from mlxfit.verbs.chart import build_chart, kinks_for  # on demand: only with chart=True

    serving = serving or Serving()
    run, _ = validate_serving(inputs.cfg, run, serving)
    extra = extra_terms_fn(inputs.cfg, cal, serving)
    cfg, w = inputs.cfg, inputs.weights

    def total_at(n: int) -> int:
        return totals_at(cfg, w.total_bytes, run_at(run, n), cal, extra).total

    mflops = decode_matmul_flops(compute_for(m))

    def tps_at(n: int) -> float | None:
        if not m.bandwidth_gbs:
            return None
        return 1.0 / predicted_decode_seconds(cfg, run_at(run, n), w, m.bandwidth_gbs, cal,
                                              m.name, matmul_flops=mflops)[0]

    limit = cfg.max_position or DEFAULT_MAX_CONTEXT
    safe = fit_inputs(inputs, run, m, cal, extra_terms=extra).max_safe_context
    return build_chart(
        title=f"{inputs.name} on {m.name}", limit=limit, requested_ctx=run.ctx,
        max_safe_context=safe, usable_bytes=m.usable_bytes, total_at=total_at, tps_at=tps_at,
        kinks=kinks_for(cfg, run), ttft_at=lambda n: ttft_of(inputs, run_at(run, n), m, cal))


def ttft_of(inputs: ModelInputs, run: Run, m: Machine, cal: Calibration) -> float | None:
    """Predicted time to first token of ``run``'s prompt on ``m`` whether or not it fits
    (estimate/compute.predicted_ttft; None without a compute figure or bandwidth): the chart
    and the advice's TTFT costs."""
    chip = compute_for(m)
    if chip is None or not m.bandwidth_gbs:
        return None
    p = predicted_ttft(inputs.cfg, run, inputs.weights, m.bandwidth_gbs, chip, cal, m.name)
    return None if p is None else p.ttft_s


def weights_summary(model: str, revision: str | None = None, with_vision: bool = False):
    """The exact weights breakdown of a model (no machine, no context)."""
    src = resolve_model(model, revision=revision)
    return src, summarize_weights(held_tensors(src, with_vision), src.config,
                                  with_vision=with_vision)


# --------------------------------------------------------------------------- the other verbs
# Thin twins: each verb's module holds its logic; these give one import for every verb.


def sibling_candidates(name: str) -> list[str]:
    """Repo ids in the catalog or the local HF cache that name the same model in another
    quantization (the caller keeps those with fewer weight bytes)."""
    fam = quant_family(name)
    seen: set[str] = set()
    out = []
    for rid in catalog_ids() + hf_cache_ids():
        if rid.lower() == name.lower() or rid.lower() in seen:
            continue
        if quant_family(rid) == fam:
            seen.add(rid.lower())
            out.append(rid)
    return out
