"""`matrix --quants` as text and JSON: one column set per conversion, a row per SKU."""

from __future__ import annotations

from typing import Any

from mlxfit.render import conversion_to_json, tps_to_json
from mlxfit.render.text import esc


def quants_to_json(quants: tuple) -> list[dict[str, Any]]:
    return [{
        "label": q.label,
        "quantization_plan": conversion_to_json(q.plan),
        "weights_bytes": q.weights_bytes,
        "fits_count": q.n_fit,
        "rows": [{"name": r.name, "total_bytes": r.total_bytes, "fits": r.fits, "runs": r.runs,
                  "max_safe_context": r.max_safe_context,
                  "predicted_decode_tps": tps_to_json(r.predicted_decode_tps)} for r in q.rows],
    } for q in quants]


def _ctx(n: int) -> str:
    """Tokens in whole K (1024), rounded down: never more than is safe."""
    return f"{n // 1024}k" if n >= 1024 else str(n)


def render_quants(m: Any, out: Any) -> None:
    """SKU rows; per quant one cell: the largest safe context and tok/s, or "no"."""
    from rich.table import Table  # rich is heavy: only a text report needs a table

    out.print(f"[bold]{esc(m.model)}[/] at {m.context_tokens:,} tokens, as mlx_lm.convert would "
              f"write each quantization (macOS {m.macos_major} working set)")
    names = {r.name for q in m.quants for r in q.rows}
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("SKU", no_wrap=True)
    for q in m.quants:
        t.add_column(f"{esc(q.label)}\n{q.weights_bytes / 1e9:,.1f} GB", justify="right", no_wrap=True)
    by_quant = [{r.name: r for r in q.rows} for q in m.quants]
    first = m.quants[0].rows if m.only_fits is False else None
    skus = first if first is not None else [r for r in m.rows if r.name in names]
    if not skus:  # --only-fits: every SKU some quant runs on, in table order
        seen: dict[str, Any] = {}
        for q in m.quants:
            for r in q.rows:
                seen.setdefault(r.name, r)
        skus = list(seen.values())
    for r in skus:
        cells = [f"{esc(r.chip)} {r.gpu_cores}c {r.ram_gb}GB"]
        for rows in by_quant:
            q = rows.get(r.name)
            if q is None or not q.runs:
                cells.append("[red]no[/]")
            else:
                tps = f" {q.predicted_decode_tps:,.0f}" if q.predicted_decode_tps else ""
                cells.append(f"[green]{_ctx(q.max_safe_context)}[/]{tps}")
        t.add_row(*cells)
    out.print(t)
    out.print("[dim]cell: largest safe context (K = 1024 tokens) and decode tok/s where it runs at "
              f"{m.context_tokens:,} tokens; GB = 10^9 B of converted weights[/]")
    for q in m.quants:
        out.print(f"[dim]{esc(q.label)}: `{esc(q.plan.command)}` "
                  f"({q.plan.bits_per_weight:.3f} bits per weight)[/]", soft_wrap=True)
