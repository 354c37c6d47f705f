"""`mlxfit measure`: run mlx-lm for real, print measured beside predicted. No arithmetic here
beyond formatting (the comparison is mlxfit.measure.measure's)."""

from __future__ import annotations

import json
from typing import Any

import typer

from mlxfit.cli_common import console, fail
from mlxfit.errors import MlxfitError

LABELS = {
    "weights": "weights",
    "kv_cache": "KV cache",
    "recurrent_state": "recurrent state",
    "transient": "transient",
    "peak": "peak",
    "prefill_tok_s": "prefill tok/s",
    "decode_tok_s": "decode tok/s",
}


def _unit(peak: float | None) -> tuple[float, str]:
    return (1e9, "GB") if peak and peak >= 1e9 else (1e6, "MB")


def _num(v: float | None, unit: str, scale: float, name: str) -> str:
    if v is None:
        return "-"
    if unit == "tok/s":
        return f"{v:,.1f}"
    return f"{v / scale:,.3f} {name}"


def _err(t: Any) -> str:
    if t.measured is None or t.predicted is None:
        return ""
    if t.exact:
        return "[green]exact[/]" if t.diff == 0 else f"[red]{t.diff:+,.0f} B[/]"
    if t.error is None:
        return ""
    colour = "green" if abs(t.error) <= 0.05 else "yellow" if abs(t.error) <= 0.15 else "red"
    return f"[{colour}]{100 * t.error:+.1f} %[/]"


def render_measurement(m: Any, out: Any) -> None:
    from rich.table import Table

    run = m.run
    kind = "random weights" if m.random_weights else "its weights"
    kv = (f", --kv-bits {run.kv_bits} from token {run.quantized_kv_start}"
          if run.kv_bits else "")
    mk = f", --max-kv-size {run.max_kv_size}" if run.max_kv_size else ""
    out.print(f"[bold]{m.model}[/] ({m.source_kind}, {kind}, {m.dtype}) on MLX's "
              f"[bold]{m.backend}[/] backend: {run.ctx:,} tokens ({run.ctx - run.gen:,} prompt "
              f"in chunks of {run.prefill_step_size:,}, {run.gen:,} generated{kv}{mk})",
              soft_wrap=True)
    scale, name = _unit(m.term("peak").measured)
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("term", no_wrap=True)
    t.add_column("measured", justify="right", no_wrap=True)
    t.add_column(f"predicted (--backend {m.backend})", justify="right", no_wrap=True)
    t.add_column("error", justify="right", no_wrap=True)
    for term in m.terms:
        t.add_row(LABELS.get(term.name, term.name), _num(term.measured, term.unit, scale, name),
                  _num(term.predicted, term.unit, scale, name), _err(term))
    out.print(t)
    steps = m.record.get("decode_steps")
    out.print("[dim]measured: weights = active memory the load added; KV cache = bytes of the "
              "caches' arrays at the end; peak = mx.get_peak_memory() over prefill and decode; "
              f"transient = peak - weights - final caches; decode tok/s over the last {steps} "
              "steps[/]", soft_wrap=True)
    out.print(f"peak at: measured {m.measured_peak_phase}; predicted {m.predicted_peak_phase}",
              soft_wrap=True)
    out.print(f"[dim]{name} = 10^{9 if name == 'GB' else 6} B; mlx {m.record.get('mlx_version')}, "
              f"mlx-lm {m.record.get('mlx_lm_version')}; calibration {m.calibration}[/]",
              soft_wrap=True)
    for n in m.notes:
        out.print(f"[dim]note: {n}[/]", soft_wrap=True)
    if m.saved_to:
        out.print(f"saved to {m.saved_to}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def measure(
        model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id; with "
                                    "--random-weights also a catalog/Hub id or a config.json."),
        ctx: int = typer.Option(..., "--ctx", help="Tokens in context at the end (prompt + generated)."),
        gen: int = typer.Option(16, "--gen", help="Tokens generated (>= 1); decode tok/s is over them."),
        prefill_step_size: int = typer.Option(2048, "--prefill-step-size", help="mlx-lm's prefill chunk."),
        kv_bits: int | None = typer.Option(None, "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits)."),
        kv_group_size: int = typer.Option(64, "--kv-group-size"),
        quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start"),
        max_kv_size: int | None = typer.Option(None, "--max-kv-size", help="Rotating cache size (as mlx-lm)."),
        random_weights: bool = typer.Option(False, "--random-weights", help="Build from the config with random weights (nothing downloaded; same memory)."),
        dtype: str | None = typer.Option(None, "--dtype", help="With --random-weights: float32, bfloat16 or float16 (default: the checkpoint's)."),
        revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit in the HF cache."),
        machine: str | None = typer.Option(None, "--machine", help="This Mac's name if it cannot be probed (for the predicted tok/s)."),
        seed: int = typer.Option(0, "--seed", help="Random weights and prompt tokens."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout (with the full record)."),
        save: bool = typer.Option(False, "--save", help="Append the record to ~/.cache/mlxfit/measurements.jsonl (what `mlxfit calibrate` fits)."),
    ) -> None:
        """Run mlx-lm for real and set its measured memory (and tok/s) beside the prediction."""
        from mlxfit import measure as ms

        try:
            m = ms.measure(model, ctx, gen=gen, prefill_step_size=prefill_step_size,
                           kv_bits=kv_bits, kv_group_size=kv_group_size,
                           quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                           random_weights=random_weights, dtype=dtype, revision=revision,
                           seed=seed, machine=machine, save=save)
        except MlxfitError as e:
            fail(e)
            return
        except (RuntimeError, ValueError, AttributeError, NotImplementedError, OSError,
                KeyError, TypeError) as e:  # mlx / mlx-lm refusing this model or run
            fail(MlxfitError(f"mlx-lm failed on this run: {type(e).__name__}: {e}"))
            return
        if as_json:
            print(json.dumps(ms.measurement_to_json(m), indent=2, default=str))
        else:
            render_measurement(m, console())
