"""`mlxfit matrix`: parse, call `mlxfit.matrix.matrix`, print. No arithmetic here."""

from __future__ import annotations

import typer

from mlxfit.cli.common import check_format, console, fail
from mlxfit.cli.options import (
    BackendOpt,
    CtxOpt,
    DtypeOpt,
    FormatOpt,
    GenOpt,
    JsonOpt,
    KvBitsOpt,
    KvGroupSizeOpt,
    MacosOpt,
    MaxKvSizeOpt,
    OnlyFitsOpt,
    PlanOpt,
    PrefillStepSizeOpt,
    QBitsOpt,
    QGroupSizeOpt,
    QModeOpt,
    QuantizedKvStartOpt,
    QuantPredicateOpt,
    QuantsOpt,
    RevisionOpt,
    WithVisionOpt,
)
from mlxfit.cli.positional import ModelFlagCommand
from mlxfit.errors import MlxfitError
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.render import dumps
from mlxfit.render.matrix import matrix_text, matrix_to_json, render_matrix
from mlxfit.verbs.matrix import matrix

app = typer.Typer(add_completion=False)  # the completion flags are the root command's

@app.command("matrix", cls=ModelFlagCommand)  # --model X: mlx-lm's spelling
def matrix_cmd(
    model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id, catalog id, or a Hub repo id (headers only)."),
    ctx: CtxOpt = 8192,
    only_fits: OnlyFitsOpt = False,
    chips: str | None = typer.Option(None, "--chips", help='Shell patterns, comma-separated: "M4*", "M3 Max,M2 Ultra".'),
    macos: MacosOpt = None,
    revision: RevisionOpt = None,
    gen: GenOpt = 0,
    prefill_step_size: PrefillStepSizeOpt = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: KvBitsOpt = None,
    kv_group_size: KvGroupSizeOpt = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: QuantizedKvStartOpt = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: MaxKvSizeOpt = None,
    backend: BackendOpt = "metal",
    with_vision: WithVisionOpt = False,
    fmt: FormatOpt = "table",
    as_json: JsonOpt = False,
    plan: PlanOpt = "auto",
    q_bits: QBitsOpt = None,
    q_group_size: QGroupSizeOpt = None,
    q_mode: QModeOpt = None,
    quant_predicate: QuantPredicateOpt = None,
    dtype: DtypeOpt = None,
    quants: QuantsOpt = None,
) -> None:
    """MODEL on every Apple Silicon SKU: fits, max safe context, decode tok/s, headroom."""
    as_json = as_json or fmt == "json"
    try:
        check_format(fmt)
        m = matrix(model, ctx, chips=chips, only_fits=only_fits, macos=macos,
                   revision=revision, gen=gen, prefill_step_size=prefill_step_size,
                   kv_bits=kv_bits, kv_group_size=kv_group_size,
                   quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                   backend=backend, with_vision=with_vision, q_bits=q_bits,
                   q_group_size=q_group_size, q_mode=q_mode, quant_predicate=quant_predicate,
                   dtype=dtype, quants=quants, plan=plan)
    except MlxfitError as e:
        fail(e, as_json)
    if as_json:
        print(dumps(matrix_to_json(m)))
    elif fmt in ("markdown", "csv"):
        print(matrix_text(m, fmt), end="")
    else:
        render_matrix(m, console())
    raise typer.Exit(0 if m.n_fit or any(q.n_fit for q in m.quants) else 1)
