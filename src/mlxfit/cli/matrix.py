"""`mlxfit matrix`: parse, call `mlxfit.matrix.matrix`, print. No arithmetic here."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail
from mlxfit.cli.sizes import tokens
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps
from mlxfit.render.matrix import matrix_to_json, render_matrix
from mlxfit.verbs.matrix import matrix

app = typer.Typer()

@app.command("matrix")
def matrix_cmd(
    model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id, or catalog id."),
    ctx: int = typer.Option(8192, "--ctx", parser=tokens, metavar="TOKENS", help="Tokens in context at the end (prompt + generated)."),
    only_fits: bool = typer.Option(False, "--only-fits", help="Show only the SKUs where it fits."),
    chips: str | None = typer.Option(None, "--chips", help='Shell patterns, comma-separated: "M4*", "M3 Max,M2 Ultra".'),
    macos: int | None = typer.Option(None, "--macos", help="macOS major version for the working-set limit (default 26)."),
    revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit in the HF cache."),
    gen: int = typer.Option(0, "--gen", parser=tokens, metavar="TOKENS", help="How many of the --ctx tokens are generated (the rest is prompt)."),
    prefill_step_size: int = typer.Option(2048, "--prefill-step-size", parser=tokens, metavar="TOKENS", help="mlx-lm's prefill chunk."),
    kv_bits: int | None = typer.Option(None, "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits)."),
    kv_group_size: int = typer.Option(64, "--kv-group-size"),
    quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start", parser=tokens, metavar="TOKENS"),
    max_kv_size: int | None = typer.Option(None, "--max-kv-size", parser=tokens, metavar="TOKENS", help="Rotating cache size."),
    backend: str = typer.Option("metal", "--backend", help="metal (Apple GPU) or cpu (MLX's CPU backend)."),
    with_vision: bool = typer.Option(False, "--with-vision", help="Count vision/audio towers."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    q_bits: int | None = typer.Option(None, "--q-bits", help="Size an unquantized model as `mlx_lm.convert -q --q-bits B` would write it."),
    q_group_size: int | None = typer.Option(None, "--q-group-size", help="mlx_lm.convert's group size (affine default 64)."),
    q_mode: str | None = typer.Option(None, "--q-mode", help="affine, mxfp4, nvfp4 or mxfp8."),
    quant_predicate: str | None = typer.Option(None, "--quant-predicate", help="mixed_2_6, mixed_3_4, mixed_3_6 or mixed_4_6."),
    dtype: str | None = typer.Option(None, "--dtype", help="float16, bfloat16 or float32 (mlx_lm.convert --dtype)."),
    quants: str | None = typer.Option(None, "--quants", help='One column set per conversion: "3,4,6,8,mixed_3_6,mxfp4".'),
) -> None:
    """MODEL on every Apple Silicon SKU: fits, max safe context, decode tok/s, headroom."""
    try:
        m = matrix(model, ctx, chips=chips, only_fits=only_fits, macos=macos,
                   revision=revision, gen=gen, prefill_step_size=prefill_step_size,
                   kv_bits=kv_bits, kv_group_size=kv_group_size,
                   quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                   backend=backend, with_vision=with_vision, q_bits=q_bits,
                   q_group_size=q_group_size, q_mode=q_mode, quant_predicate=quant_predicate,
                   dtype=dtype, quants=quants)
    except MlxfitError as e:
        fail(e, as_json)
    if as_json:
        print(dumps(matrix_to_json(m)))
    else:
        render_matrix(m, console())
    raise typer.Exit(0 if m.n_fit or any(q.n_fit for q in m.quants) else 1)
