"""`mlxfit matrix`: one model on every Apple Silicon SKU (chip, GPU bin, RAM size).

The model's inputs are built once (config.json + headers, `model.inputs.model_inputs`) and each SKU row
is `verbs.fit.fit_served` on that SKU: the same function `fit --machine <SKU>` ends in, so a row and
`fit` agree to the byte and to the last digit of tok/s.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
import sys
from dataclasses import dataclass, field
from typing import ClassVar

from mlxfit.errors import MachineError, MlxfitError, UsageError
from mlxfit.estimate.memory import Run, run_from
from mlxfit.estimate.solve import FitResult
from mlxfit.hardware.probe import probe_machine
from mlxfit.hardware.resolve import GIB, Machine, all_skus
from mlxfit.hardware.skus import SkuTable, load_sku_table
from mlxfit.json_result import JsonResult
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model.inputs import model_arrays
from mlxfit.model.quantize import ConversionPlan
from mlxfit.settings import DEFAULT_MACOS
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.convert_plan import quant_recipe, quant_recipes
from mlxfit.verbs.edges import (
    calibration_for_user,
    calibration_note,
    check_machine_params,
    vision_note,
)
from mlxfit.verbs.fit import fit_served, sized_source
from mlxfit.verbs.plan import check_plan, with_plan


@dataclass(frozen=True)
class MatrixRow:
    family: str  # "M4": the generation, from the table's `family` key
    chip: str  # "M4 Pro"
    gpu_cores: int
    ram_gb: int  # Apple's (binary) GB
    name: str  # the SKU as `--machine` accepts it: "M4 Pro 16-core 24GB"
    bandwidth_gbs: float
    usable_bytes: int
    total_bytes: int  # peak at the context
    headroom_bytes: int  # usable - total (negative when it does not fit)
    fits: bool  # the peak fits the usable memory (FitResult.fits)
    runs: bool  # it fits and no single array exceeds the GPU's largest buffer (FitResult.runs)
    max_safe_context: int
    predicted_decode_tps: float | None  # None when it does not fit
    unverified: bool  # some figure of this SKU rests on a weak source
    this_machine: bool  # the probed machine is this SKU
    result: FitResult = field(repr=False, compare=False)
    predicted_prefill_tps: float | None = None  # FitResult's (estimate/compute.py)
    predicted_ttft_s: float | None = None
    watchdog: str | None = None  # FitResult.watchdog: prefill may trip macOS's GPU watchdog


@dataclass(frozen=True)
class QuantRows:
    """One --quants entry: the model as mlx_lm.convert would write it, on every SKU shown."""

    label: str  # "4bit", "mixed_3_6", "mxfp4"
    plan: ConversionPlan
    weights_bytes: int
    rows: tuple[MatrixRow, ...]

    @property
    def n_fit(self) -> int:
        return sum(r.runs for r in self.rows)


@dataclass(frozen=True)
class MatrixResult(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.matrix:matrix_to_json"
    model: str
    source_kind: str
    context_tokens: int
    run: Run
    weights_bytes: int
    context_limit: int
    macos_major: int
    chips_filter: str | None
    only_fits: bool
    skus_considered: int  # rows before --only-fits
    rows: tuple[MatrixRow, ...]
    this_machine: str | None  # the probed machine's name, when the probe ran
    warnings: tuple[str, ...] = ()  # common to every row (model-level)
    notes: tuple[str, ...] = ()
    family_known: bool = True  # the cache plan's origin, as fit's (mlxfit.verbs.plan)
    plan_source: str = "table"
    # --quants: the same SKUs for each conversion (verbs.convert_plan), in the order asked
    quants: tuple[QuantRows, ...] = ()
    quantization_plan: ConversionPlan | None = None  # the conversion the rows size (--q-bits ...)

    @property
    def n_fit(self) -> int:
        """Rows where the model runs (fits, and no array over maxBufferLength)."""
        return sum(r.runs for r in self.rows)


def _family(table: SkuTable, chip: str) -> str:
    fam = table["chips"][chip].get("family")
    return fam if isinstance(fam, str) and fam else chip.split()[0]


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


def filter_skus(skus: list[Machine], chips: str | None) -> list[Machine]:
    """Keep the SKUs whose chip ("M4 Pro") or full name ("M4 Pro 16-core 24GB") matches one of
    the comma-separated shell patterns, case-insensitively ("M4*", "m3 max", "*Ultra*").
    A pattern that matches nothing is an error listing the nearest chip names."""
    if chips is None or not chips.strip():
        return skus
    patterns = [_norm(p) for p in chips.split(",") if p.strip()]
    keep: list[Machine] = []
    for pat in patterns:
        hit = [m for m in skus
               if fnmatch.fnmatchcase(_norm(m.chip or ""), pat)
               or fnmatch.fnmatchcase(_norm(m.name), pat)]
        if not hit:
            names = list(dict.fromkeys(m.chip for m in skus if m.chip))
            bare = pat.replace("*", "").replace("?", "").strip()
            near = difflib.get_close_matches(bare, [n.lower() for n in names], n=3, cutoff=0.3)
            by_lower = {n.lower(): n for n in names}
            hint = (f"nearest: {', '.join(by_lower[n] for n in near)}" if near
                    else f"known: {', '.join(names)}")
            raise MachineError(f"chips {pat!r} matches no chip; {hint}", param="chips")
        keep.extend(m for m in hit if m not in keep)
    return keep


def _sort_key(table: SkuTable):
    chip_order = {c: i for i, c in enumerate(table["chips"])}
    fam_order: dict[str, int] = {}
    for c in table["chips"]:
        fam_order.setdefault(_family(table, c), len(fam_order))

    # Generation, then tier in table order (base, Pro, Max, Ultra), then RAM, then GPU bin.
    def key(m: Machine) -> tuple[int, int, int, int]:
        return (fam_order[_family(table, m.chip or "")], chip_order[m.chip or ""],
                m.ram_bytes, m.gpu_cores or 0)

    return key


def _is_here(here: Machine | None, m: Machine) -> bool:
    if here is None or not here.is_apple_silicon or here.chip is None:
        return False
    if (here.chip, here.ram_bytes) != (m.chip, m.ram_bytes):
        return False
    return here.gpu_cores is None or here.gpu_cores == m.gpu_cores


def matrix(
    model: str,
    ctx: int = 8192,
    *,
    chips: str | None = None,
    only_fits: bool = False,
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
    calibration=None,
    this_machine: Machine | None = None,
    probe: bool = True,
    table: SkuTable | None = None,
    q_bits: int | None = None,
    q_group_size: int | None = None,
    q_mode: str | None = None,
    quant_predicate: str | None = None,
    dtype: str | None = None,
    quants: str | None = None,
    plan: str = "auto",
) -> MatrixResult:
    """``model`` at ``ctx`` tokens on every SKU of the table (or those ``chips`` matches).

    Each row is what ``fit(model, ctx, machine=row.name, macos=macos, ...)`` returns. The row of
    ``this_machine`` (default: the probed machine, unless ``probe`` is False) is marked.
    ``q_bits``...``dtype``: the rows size the model as mlx_lm.convert would write it;
    ``quants`` ("4,8,mixed_3_6,mxfp4"): the same rows once per conversion, in ``quants``.
    ``plan``: where the cache plan comes from, as ``fit``'s (mlxfit.verbs.plan)."""
    # Every parameter is checked before the model is resolved or this machine probed.
    run = run_from(ctx=ctx, gen=gen, prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                   kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
                   max_kv_size=max_kv_size, backend=backend)
    check_machine_params(macos=macos)
    check_plan(plan)
    recipe = quant_recipe(q_bits, q_group_size, q_mode, quant_predicate, dtype)
    if quants is not None and recipe is not None and recipe.quantize:
        raise UsageError("quants and q_bits/q_mode/quant_predicate both choose the "
                         "quantization: give one", param="quants")
    recipes = quant_recipes(quants, q_group_size, dtype) if quants is not None else ()
    cal = calibration_for_user(calibration)
    cal.backend(backend)  # a backend the calibration has
    macos_major = macos or DEFAULT_MACOS  # as `fit --machine`
    t = table if table is not None else load_sku_table()
    skus = filter_skus(all_skus(macos_major=macos_major, table=t), chips)
    src = resolve_model(model, revision=revision)
    given = src
    src, inputs = sized_source(src, recipe if not recipes else None, model, with_vision)
    inputs, plan_warnings, plan_notes = with_plan(inputs, src.config, plan, run)
    arrays = model_arrays(src, with_vision)

    notes: list[str] = list(plan_notes)
    here = this_machine
    if here is None and probe and sys.platform != "darwin":
        # Only a Mac can be a row: no need to probe (psutil) to say so.
        notes.append(f"this machine ({sys.platform}) is not a row: not Apple Silicon")
    elif here is None and probe:
        try:
            here = probe_machine(macos_major=macos, table=t)
        except MlxfitError as e:  # the matrix does not need this machine: say so and go on
            notes.append(f"this machine could not be probed ({e})")

    ordered = sorted(skus, key=_sort_key(t))
    rows = _rows(inputs, arrays, run, ordered, cal, t, here, model)
    quant_rows = []
    for rc in recipes:
        q_src, q_inputs = sized_source(given, rc, model, with_vision)
        q_inputs = with_plan(q_inputs, given.config, plan, run)[0]
        q_rows = _rows(q_inputs, model_arrays(q_src, with_vision), run, ordered, cal, t, here,
                       model)
        quant_rows.append(QuantRows(
            label=rc.label, plan=q_inputs.weights_detail.conversion,
            weights_bytes=q_inputs.weights.total_bytes,
            rows=tuple(r for r in q_rows if r.runs) if only_fits else tuple(q_rows)))

    if here is not None:
        mine = [r for r in rows if r.this_machine]
        if mine and any(r.usable_bytes != here.usable_bytes for r in mine):
            notes.append(f"this machine ({here.name}) has its own limit, {here.usable_source}: "
                         f"`mlxfit fit {inputs.name}` sizes it for this machine as it is")
        elif not mine:
            why = ("not Apple Silicon" if not here.is_apple_silicon
                   else "not a SKU of the table" if here.chip is None else "filtered out")
            notes.append(f"this machine ({here.name}) is not a row: {why}")

    # Model-level warnings repeat on every row; keep those once, drop the per-SKU ones (the
    # fits / unverified columns say them).
    common = [w for w in rows[0].result.warnings
              if all(w in r.result.warnings for r in rows)] if rows else []
    common = [w for w in common if not w.startswith("over the usable memory")
              and "maxBufferLength" not in w and "largest safe context" not in w]
    notes = [*inputs.source_notes, *notes, *vision_note(inputs), *calibration_note(cal)]

    shown = [r for r in rows if r.runs] if only_fits else rows
    return MatrixResult(
        model=inputs.name, source_kind=inputs.source_kind, context_tokens=run.ctx, run=run,
        weights_bytes=inputs.weights.total_bytes,
        context_limit=rows[0].result.context_limit if rows else 0,
        macos_major=macos_major, chips_filter=chips, only_fits=only_fits,
        skus_considered=len(rows), rows=tuple(shown),
        this_machine=here.name if here is not None else None,
        warnings=plan_warnings + tuple(common), notes=tuple(notes), quants=tuple(quant_rows),
        quantization_plan=inputs.weights_detail.conversion,
        family_known=inputs.cfg.family_known, plan_source=inputs.cfg.plan_source,
    )


def _rows(inputs, arrays, run: Run, skus: list[Machine], cal, t: SkuTable,
          here: Machine | None, model: str) -> list[MatrixRow]:
    rows: list[MatrixRow] = []
    for m in skus:
        # The function `fit` ends in: the same terms, the same buffer check, per SKU.
        r = fit_served(inputs, run, m, cal, None, arrays, model_ref=model)
        rows.append(MatrixRow(
            family=_family(t, m.chip or ""), chip=m.chip or "", gpu_cores=m.gpu_cores or 0,
            ram_gb=round(m.ram_bytes / GIB), name=m.name,
            bandwidth_gbs=float(m.bandwidth_gbs or 0.0), usable_bytes=r.usable_bytes,
            total_bytes=r.total_bytes, headroom_bytes=r.usable_bytes - r.total_bytes,
            fits=r.fits, runs=r.runs, max_safe_context=r.max_safe_context,
            # a row that does not fit (past the trained context too) carries no speed
            predicted_decode_tps=r.predicted_decode_tps if r.fits else None,
            unverified=m.unverified,
            this_machine=_is_here(here, m), result=r,
            predicted_prefill_tps=r.predicted_prefill_tps, predicted_ttft_s=r.predicted_ttft_s,
            watchdog=r.watchdog if r.runs else None,
        ))
    return rows






