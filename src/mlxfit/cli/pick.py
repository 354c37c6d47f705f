"""`mlxfit pick`: parse, call `mlxfit.pick.pick`, print. No arithmetic here."""

from __future__ import annotations

import typer

from mlxfit.cli.common import check_format, console, fail
from mlxfit.cli.options import (
    CtxOpt,
    DtypeOpt,
    FormatOpt,
    JsonOpt,
    KvBitsOpt,
    KvGroupSizeOpt,
    MachineOpt,
    MacosOpt,
    MaxKvSizeOpt,
    MemoryBudgetOpt,
    OnlyFitsOpt,
    PlanOpt,
    PrefillStepSizeOpt,
    QBitsOpt,
    QGroupSizeOpt,
    QModeOpt,
    QuantizedKvStartOpt,
    QuantPredicateOpt,
    QuantsOpt,
)
from mlxfit.errors import MlxfitError
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.render import dumps
from mlxfit.render.pick import pick_text, pick_to_json, render_pick
from mlxfit.verbs.pick import pick

app = typer.Typer(add_completion=False)  # the completion flags are the root command's

@app.command("pick")
def pick_cmd(
    ctx: CtxOpt = 8192,
    catalog: bool = typer.Option(False, "--catalog", help="Also rank the built-in catalog (not downloaded)."),
    machine: MachineOpt = None,
    memory_budget: MemoryBudgetOpt = None,
    macos: MacosOpt = None,
    default_model: str | None = typer.Option(None, "--default-model", help="The model to load first when it is downloaded and fits (replaces [pick] default_model of ~/.config/mlxfit/config.toml; none by default)."),
    no_default_model: bool = typer.Option(False, "--no-default-model", help="Ignore [pick] default_model: go by size alone."),
    coexist_fraction: float | None = typer.Option(None, "--coexist-fraction", help="Share of RAM an auto-pick may take (default 0.6)."),
    prefill_step_size: PrefillStepSizeOpt = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: KvBitsOpt = None,
    kv_group_size: KvGroupSizeOpt = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: QuantizedKvStartOpt = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: MaxKvSizeOpt = None,
    only_fits: OnlyFitsOpt = False,
    fmt: FormatOpt = "table",
    as_json: JsonOpt = False,
    quants: QuantsOpt = None,
    q_bits: QBitsOpt = None,
    q_group_size: QGroupSizeOpt = None,
    q_mode: QModeOpt = None,
    quant_predicate: QuantPredicateOpt = None,
    dtype: DtypeOpt = None,
    plan: PlanOpt = "auto",
) -> None:
    """The downloaded model to auto-load here, and why each candidate was chosen or not."""
    as_json = as_json or fmt == "json"
    try:
        check_format(fmt)
        p = pick(ctx, catalog=catalog, machine=machine, memory_budget_gb=memory_budget,
                 macos=macos, default_model=default_model, no_default_model=no_default_model,
                 coexist_fraction=coexist_fraction, prefill_step_size=prefill_step_size,
                 kv_bits=kv_bits, kv_group_size=kv_group_size,
                 quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                 only_fits=only_fits, quants=quants, q_bits=q_bits,
                 q_group_size=q_group_size, q_mode=q_mode, quant_predicate=quant_predicate,
                 dtype=dtype, plan=plan)
    except MlxfitError as e:
        fail(e, as_json)
    if as_json:
        print(dumps(pick_to_json(p)))
    elif fmt in ("markdown", "csv"):
        print(pick_text(p, fmt), end="")
    else:
        render_pick(p, console())
    raise typer.Exit(0 if p.answered else 1)
