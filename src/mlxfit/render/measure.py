"""`mlxfit measure` as text and as JSON."""

from __future__ import annotations

from typing import Any

from mlxfit.render import SCHEMA_VERSION, machine_to_json, run_to_json
from mlxfit.render.text import esc
from mlxfit.verbs.measure.twin import Measurement


def measurement_to_json(m: Measurement) -> dict:
    """The ``--json`` object: measured beside predicted, term by term, then the full record."""
    return {
        "schema_version": SCHEMA_VERSION,
        "model": m.model,
        "source": m.source_kind,
        "machine": machine_to_json(m.machine) if m.machine is not None else None,
        "random_weights": m.random_weights,
        "dtype": m.dtype,
        "backend": m.backend,
        "calibration": m.calibration,
        "run": run_to_json(m.run),
        "peak_phase": {"measured": m.measured_peak_phase, "predicted": m.predicted_peak_phase},
        "comparison": [
            {"name": t.name, "unit": t.unit, "measured": t.measured,
             "predicted": t.predicted, "error": t.error, "exact": t.exact}
            for t in m.terms
        ],
        "warnings": list(m.warnings),
        "notes": list(m.notes),
        "saved_to": m.saved_to,
        "record": m.record,
    }


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
    from rich.table import Table  # rich is heavy: only a text report needs a table

    run = m.run
    kind = "random weights" if m.random_weights else "its weights"
    kv = (f", --kv-bits {run.kv_bits} from token {run.quantized_kv_start}"
          if run.kv_bits else "")
    mk = f", --max-kv-size {run.max_kv_size}" if run.max_kv_size else ""
    out.print(f"[bold]{esc(m.model)}[/] ({esc(m.source_kind)}, {kind}, {esc(m.dtype)}) on MLX's "
              f"[bold]{esc(m.backend)}[/] backend: {run.ctx:,} tokens ({run.ctx - run.gen:,} prompt "
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
    out.print(f"peak at: measured {esc(m.measured_peak_phase)}; "
              f"predicted {esc(m.predicted_peak_phase)}",
              soft_wrap=True)
    out.print(f"[dim]{name} = 10^{9 if name == 'GB' else 6} B; mlx {esc(m.record.get('mlx_version'))}, "
              f"mlx-lm {esc(m.record.get('mlx_lm_version'))}; calibration {esc(m.calibration)}[/]",
              soft_wrap=True)
    for w in m.warnings:
        out.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
    for n in m.notes:
        out.print(f"[dim]note: {esc(n)}[/]", soft_wrap=True)
    if m.saved_to:
        out.print(f"saved to {esc(m.saved_to)}", soft_wrap=True)
