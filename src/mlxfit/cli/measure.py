"""`mlxfit measure`: run mlx-lm for real, print measured beside predicted. No arithmetic here
beyond formatting (the comparison is mlxfit.measure's)."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail
from mlxfit.cli.options import (
    CtxOpt,
    JsonOpt,
    KvBitsOpt,
    KvGroupSizeOpt,
    MaxKvSizeOpt,
    MeasureDtypeOpt,
    MeasureForceOpt,
    MeasureGenOpt,
    MeasureMachineOpt,
    PrefillStepSizeOpt,
    QuantizedKvStartOpt,
    RevisionOpt,
)
from mlxfit.cli.progress import ProgressLine
from mlxfit.errors import MlxfitError
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.render import dumps
from mlxfit.render.measure import measurement_to_json, render_measurement
from mlxfit.verbs.measure.twin import measure

app = typer.Typer(add_completion=False)  # the completion flags are the root command's

@app.command("measure")
def measure_cmd(
    model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id; with "
                                "--random-weights also a catalog/Hub id or a config.json."),
    ctx: CtxOpt = ...,
    gen: MeasureGenOpt = 16,
    prefill_step_size: PrefillStepSizeOpt = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: KvBitsOpt = None,
    kv_group_size: KvGroupSizeOpt = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: QuantizedKvStartOpt = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: MaxKvSizeOpt = None,
    random_weights: bool = typer.Option(False, "--random-weights", help="Build from the config with random weights (nothing downloaded; same memory)."),
    dtype: MeasureDtypeOpt = None,
    revision: RevisionOpt = None,
    machine: MeasureMachineOpt = None,
    seed: int = typer.Option(0, "--seed", help="Random weights and prompt tokens."),
    as_json: JsonOpt = False,
    save: bool = typer.Option(False, "--save", help="Append the record to ~/.cache/mlxfit/measurements.jsonl (what `mlxfit calibrate` fits)."),
    force: MeasureForceOpt = False,
) -> None:
    """Run mlx-lm for real and set its measured memory (and tok/s) beside the prediction."""
    display = ProgressLine(console(stderr=True), prefill_step_size)
    try:
        with display:
            m = measure(model, ctx, gen=gen, prefill_step_size=prefill_step_size,
                        kv_bits=kv_bits, kv_group_size=kv_group_size,
                        quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                        random_weights=random_weights, dtype=dtype, revision=revision,
                        seed=seed, machine=machine, save=save, force=force,
                        on_progress=display.update, on_warning=display.warn)
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
