"""`mlxfit measure`: run mlx-lm for real, print measured beside predicted. No arithmetic here
beyond formatting (the comparison is mlxfit.measure's)."""

from __future__ import annotations

import multiprocessing
import signal

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
from mlxfit.cli.positional import ModelFlagCommand
from mlxfit.cli.progress import ProgressLine
from mlxfit.errors import MlxfitError
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model.mlx_extra import require_mlx
from mlxfit.render import dumps
from mlxfit.render.measure import measurement_to_json, render_measurement
from mlxfit.verbs.measure.twin import measure

app = typer.Typer(add_completion=False)  # the completion flags are the root command's

# MLX's evaluation does not return to Python until it is done (minutes for one chunk on the CPU
# backend), so a Ctrl-C there never reaches a handler: the run goes in a child process, and
# this one, free to take the signal, stops it at once.
MLX_FAILURES = (RuntimeError, ValueError, AttributeError, NotImplementedError, OSError,
                KeyError, TypeError)  # mlx / mlx-lm refusing this model or run


def _child(conn, kwargs: dict) -> None:
    """The measurement in the child: progress, warnings, then the result or the error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent takes Ctrl-C and ends this one
    try:
        m = measure(**kwargs, on_progress=lambda *a: conn.send(("progress", *a)),
                    on_warning=lambda w: conn.send(("warning", w)))
        conn.send(("done", m))
    except MlxfitError as e:
        conn.send(("error", type(e), e.args, dict(e.__dict__)))
    except MLX_FAILURES as e:
        why = f"mlx-lm failed on this run: {type(e).__name__}: {e}"
        conn.send(("error", MlxfitError, (why,), {}))


def run_in_child(kwargs: dict, display: ProgressLine):
    """``measure(**kwargs)`` in a spawned process; KeyboardInterrupt here kills it."""
    require_mlx()  # here, where the install hint is one line before a process is spawned
    mp = multiprocessing.get_context("spawn")
    recv, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=_child, args=(send, kwargs), daemon=True)
    proc.start()
    send.close()
    try:
        while True:
            try:
                msg = recv.recv()
            except EOFError:  # the child is gone without a word: killed (memory, a signal)
                proc.join()
                raise MlxfitError(f"mlx-lm's process ended without a result (exit code "
                                  f"{proc.exitcode}: killed, or out of memory?)") from None
            if msg[0] == "progress":
                display.update(*msg[1:])
            elif msg[0] == "warning":
                display.warn(msg[1])
            elif msg[0] == "done":
                return msg[1]
            else:
                cls, args, state = msg[1:]
                err = cls.__new__(cls)
                Exception.__init__(err, *args)
                err.__dict__.update(state)
                raise err
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        recv.close()

@app.command("measure", cls=ModelFlagCommand)  # --model X: mlx-lm's spelling
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
    unquantized: bool = typer.Option(False, "--unquantized", help="With --random-weights: build the model without its config's quantization (MLX's CPU backend runs quantized matmuls very slowly)."),
) -> None:
    """Run mlx-lm for real and set its measured memory (and tok/s) beside the prediction."""
    display = ProgressLine(console(stderr=True), prefill_step_size)
    kwargs = {"model": model, "ctx": ctx, "gen": gen, "prefill_step_size": prefill_step_size,
              "kv_bits": kv_bits, "kv_group_size": kv_group_size,
              "quantized_kv_start": quantized_kv_start, "max_kv_size": max_kv_size,
              "random_weights": random_weights, "dtype": dtype, "revision": revision,
              "seed": seed, "machine": machine, "save": save, "force": force,
              "unquantized": unquantized}
    try:
        with display:
            m = run_in_child(kwargs, display)
    except MlxfitError as e:
        fail(e, as_json)
        return
    if as_json:
        print(dumps(measurement_to_json(m)))
    else:
        render_measurement(m, console())
