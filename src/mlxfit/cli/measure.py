"""`mlxfit measure`: run mlx-lm for real, print measured beside predicted. No arithmetic here
beyond formatting (the comparison is mlxfit.measure's)."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail
from mlxfit.cli.sizes import tokens
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps
from mlxfit.render.measure import measurement_to_json, render_measurement
from mlxfit.verbs.measure.twin import measure

app = typer.Typer()

@app.command("measure")
def measure_cmd(
    model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id; with "
                                "--random-weights also a catalog/Hub id or a config.json."),
    ctx: int = typer.Option(..., "--ctx", parser=tokens, metavar="TOKENS", help="Tokens in context at the end (prompt + generated)."),
    gen: int = typer.Option(16, "--gen", parser=tokens, metavar="TOKENS", help="Tokens generated (>= 1); decode tok/s is over them."),
    prefill_step_size: int = typer.Option(2048, "--prefill-step-size", parser=tokens, metavar="TOKENS", help="mlx-lm's prefill chunk."),
    kv_bits: int | None = typer.Option(None, "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits)."),
    kv_group_size: int = typer.Option(64, "--kv-group-size"),
    quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start", parser=tokens, metavar="TOKENS"),
    max_kv_size: int | None = typer.Option(None, "--max-kv-size", parser=tokens, metavar="TOKENS", help="Rotating cache size (as mlx-lm)."),
    random_weights: bool = typer.Option(False, "--random-weights", help="Build from the config with random weights (nothing downloaded; same memory)."),
    dtype: str | None = typer.Option(None, "--dtype", help="With --random-weights: float32, bfloat16 or float16 (default: the checkpoint's)."),
    revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit in the HF cache."),
    machine: str | None = typer.Option(None, "--machine", help="This Mac's name if it cannot be probed (for the predicted tok/s)."),
    seed: int = typer.Option(0, "--seed", help="Random weights and prompt tokens."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout (with the full record)."),
    save: bool = typer.Option(False, "--save", help="Append the record to ~/.cache/mlxfit/measurements.jsonl (what `mlxfit calibrate` fits)."),
) -> None:
    """Run mlx-lm for real and set its measured memory (and tok/s) beside the prediction."""
    try:
        m = measure(model, ctx, gen=gen, prefill_step_size=prefill_step_size,
                    kv_bits=kv_bits, kv_group_size=kv_group_size,
                    quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                    random_weights=random_weights, dtype=dtype, revision=revision,
                    seed=seed, machine=machine, save=save)
    except MlxfitError as e:
        fail(e, as_json)
        return
    except (RuntimeError, ValueError, AttributeError, NotImplementedError, OSError,
            KeyError, TypeError) as e:  # mlx / mlx-lm refusing this model or run
        fail(MlxfitError(f"mlx-lm failed on this run: {type(e).__name__}: {e}"), as_json)
        return
    if as_json:
        print(dumps(measurement_to_json(m)))
    else:
        render_measurement(m, console())
