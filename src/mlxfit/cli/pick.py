"""`mlxfit pick`: parse, call `mlxfit.pick.pick`, print. No arithmetic here."""

from __future__ import annotations

import typer

from mlxfit.cli.common import check_format, console, fail
from mlxfit.cli.sizes import gigabytes, tokens
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps
from mlxfit.render.pick import pick_text, pick_to_json, render_pick
from mlxfit.verbs.pick import pick

app = typer.Typer()

@app.command("pick")
def pick_cmd(
    ctx: int = typer.Option(8192, "--ctx", parser=tokens, metavar="TOKENS", help="Tokens in context the model must hold."),
    catalog: bool = typer.Option(False, "--catalog", help="Also rank the built-in catalog (not downloaded)."),
    machine: str | None = typer.Option(None, "--machine", help='e.g. "M4 Pro 24GB"; default: this machine.'),
    memory_budget: float | None = typer.Option(None, "--memory-budget", parser=gigabytes, metavar="SIZE", help="Usable GB (10^9 B); replaces the machine's envelope."),
    macos: int | None = typer.Option(None, "--macos", help="macOS major version for the working-set limit."),
    default_model: str | None = typer.Option(None, "--default-model", help="Replaces [pick] default_model of ~/.config/mlxfit/config.toml."),
    coexist_fraction: float | None = typer.Option(None, "--coexist-fraction", help="Share of RAM an auto-pick may take (default 0.6)."),
    prefill_step_size: int = typer.Option(2048, "--prefill-step-size", parser=tokens, metavar="TOKENS", help="mlx-lm's prefill chunk (mlx_lm.generate --prefill-step-size)."),
    kv_bits: int | None = typer.Option(None, "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits)."),
    kv_group_size: int = typer.Option(64, "--kv-group-size", help="Group size of the quantized KV cache (mlx-lm --kv-group-size: 32, 64 or 128)."),
    quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start", parser=tokens, metavar="TOKENS", help="Tokens before the KV cache is quantized (mlx-lm --quantized-kv-start)."),
    max_kv_size: int | None = typer.Option(None, "--max-kv-size", parser=tokens, metavar="TOKENS", help="Rotating cache size (mlx-lm --max-kv-size; ignored by models with their own cache)."),
    only_fits: bool = typer.Option(False, "--only-fits", help="With --catalog: list only the catalog models that run here."),
    fmt: str = typer.Option("table", "--format", help="table, markdown (for a model card), csv or json."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout (= --format json)."),
    quants: str | None = typer.Option(None, "--quants", help='With --catalog: each unquantized entry also as mlx_lm.convert would write it, e.g. "4,mixed_3_6,mxfp4".'),
    q_bits: int | None = typer.Option(None, "--q-bits", help="With --catalog: unquantized entries also as `mlx_lm.convert -q --q-bits B` would write them."),
    q_group_size: int | None = typer.Option(None, "--q-group-size", help="mlx_lm.convert's group size (affine default 64)."),
    q_mode: str | None = typer.Option(None, "--q-mode", help="affine, mxfp4, nvfp4 or mxfp8."),
    quant_predicate: str | None = typer.Option(None, "--quant-predicate", help="mixed_2_6, mixed_3_4, mixed_3_6 or mixed_4_6."),
    dtype: str | None = typer.Option(None, "--dtype", help="float16, bfloat16 or float32 (mlx_lm.convert --dtype)."),
    plan: str = typer.Option("auto", "--plan", help="Cache plan of each downloaded model: auto, table or mlx-lm (as fit's)."),
) -> None:
    """The downloaded model to auto-load here, and why each candidate was chosen or not."""
    as_json = as_json or fmt == "json"
    try:
        check_format(fmt)
        p = pick(ctx, catalog=catalog, machine=machine, memory_budget_gb=memory_budget,
                 macos=macos, default_model=default_model,
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
