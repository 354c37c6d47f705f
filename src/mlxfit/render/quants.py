"""`matrix --quants` as text and JSON: one column set per conversion, a row per SKU."""

from __future__ import annotations

from typing import Any

from mlxfit._version import __version__
from mlxfit.render import conversion_to_json, tps_to_json
from mlxfit.render.tabular import csv_text, markdown
from mlxfit.render.text import controls, esc


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


def quant_skus(m: Any) -> list[Any]:
    """The SKU rows of a --quants table, in table order: every SKU, or with --only-fits every SKU
    some conversion runs on. One list for the terminal, markdown and CSV."""
    names = {r.name for q in m.quants for r in q.rows}
    first = m.quants[0].rows if m.only_fits is False else None
    skus = first if first is not None else [r for r in m.rows if r.name in names]
    if not skus:  # --only-fits: every SKU some quant runs on, in table order
        seen: dict[str, Any] = {}
        for q in m.quants:
            for r in q.rows:
                seen.setdefault(r.name, r)
        skus = list(seen.values())
    return list(skus)


def _cell(q: Any) -> tuple[str, str] | None:
    """A conversion on one SKU: (largest safe context, decode tok/s), or None where it does not
    run."""
    if q is None or not q.runs:
        return None
    tps = f"{q.predicted_decode_tps:,.0f}" if q.predicted_decode_tps else ""
    return _ctx(q.max_safe_context), tps


def render_quants(m: Any, out: Any) -> None:
    """SKU rows; per quant one cell: the largest safe context and tok/s, or "no"."""
    from rich.table import Table  # rich is heavy: only a text report needs a table

    out.print(f"[bold]{esc(m.model)}[/] at {m.context_tokens:,} tokens, as mlx_lm.convert would "
              f"write each quantization (macOS {m.macos_major} working set)")
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("SKU", no_wrap=True)
    for q in m.quants:
        t.add_column(f"{esc(q.label)}\n{q.weights_bytes / 1e9:,.1f} GB", justify="right", no_wrap=True)
    by_quant = [{r.name: r for r in q.rows} for q in m.quants]
    for r in quant_skus(m):
        cells = [f"{esc(r.chip)} {r.gpu_cores}c {r.ram_gb}GB"]
        for rows in by_quant:
            c = _cell(rows.get(r.name))
            cells.append("[red]no[/]" if c is None
                         else f"[green]{c[0]}[/]" + (f" {c[1]}" if c[1] else ""))
        t.add_row(*cells)
    out.print(t)
    out.print("[dim]cell: largest safe context (K = 1024 tokens) and decode tok/s where it runs at "
              f"{m.context_tokens:,} tokens; GB = 10^9 B of converted weights[/]")
    for q in m.quants:
        out.print(f"[dim]{esc(q.label)}: `{esc(q.plan.command)}` "
                  f"({q.plan.bits_per_weight:.3f} bits per weight)[/]", soft_wrap=True)


QUANT_CSV_HEADERS = ("quant", "weights_bytes", "name", "chip", "gpu_cores", "ram_bytes",
                     "total_bytes", "fits", "runs", "max_safe_context", "predicted_decode_tps")


def quants_text(m: Any, fmt: str) -> str:
    """`matrix --quants` as markdown (the terminal's table: a SKU per row, a column per
    conversion) or CSV (a row per SKU and conversion, the JSON's values)."""
    skus = quant_skus(m)
    by_quant = [{r.name: r for r in q.rows} for q in m.quants]
    if fmt == "csv":
        rows = []
        for q, rows_of in zip(m.quants, by_quant, strict=True):
            for s in skus:
                r = rows_of.get(s.name)
                if r is None:
                    continue
                rows.append([q.label, q.weights_bytes, controls(r.name), r.chip, r.gpu_cores,
                             r.ram_gb * 2**30, r.total_bytes, r.fits, r.runs, r.max_safe_context,
                             tps_to_json(r.predicted_decode_tps)])
        return csv_text(QUANT_CSV_HEADERS, rows)
    heads = ["Mac"] + [f"{controls(q.label)} ({q.weights_bytes / 1e9:,.1f} GB)" for q in m.quants]
    cells = []
    for s in skus:
        row = [controls(s.name)]
        for rows_of in by_quant:
            c = _cell(rows_of.get(s.name))
            row.append("no" if c is None else c[0] + (f", {c[1]} tok/s" if c[1] else ""))
        cells.append(row)
    head = (f"Which Macs run **{controls(m.model)}** at {m.context_tokens:,} tokens with mlx-lm, "
            f"as mlx_lm.convert would write each quantization (macOS {m.macos_major}; estimated "
            f"by mlxfit {__version__})\n\n")
    foot = ("\ncell: largest safe context (k = 1024 tokens) and predicted decode tok/s where it "
            "runs, else no; GB = 10^9 B of converted weights. Conversions: "
            + "; ".join(f"{controls(q.label)}: `{controls(q.plan.command)}`" for q in m.quants)
            + ".\n")
    return head + markdown(heads, cells, right=[False] + [True] * len(m.quants)) + foot
