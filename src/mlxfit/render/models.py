"""`mlxfit models` as text, Markdown, CSV and JSON."""

from __future__ import annotations

from typing import Any

from mlxfit.render import SCHEMA_VERSION
from mlxfit.render.tabular import csv_text, markdown
from mlxfit.render.text import controls, esc
from mlxfit.verbs.models import ModelRow, ModelsResult


def row_to_json(r: ModelRow) -> dict[str, Any]:
    return {"model": r.model, "source": r.source, "revision": r.revision, "family": r.family,
            "model_type": r.model_type, "quant": r.quant, "weights_bytes": r.weights_bytes,
            "param_count": r.param_count, "context_limit": r.context_limit,
            "downloaded": r.downloaded, "in_catalog": r.in_catalog,
            "convert_command": r.convert_command}


def models_to_json(m: ModelsResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "query": m.query,
        "total": m.total,
        "cache_dir": m.cache_dir,
        "models": [row_to_json(r) for r in m.rows],
        "skipped": [{"model": s.model, "revision": s.revision, "kind": s.kind,
                     "reason": s.reason} for s in m.skipped],
    }


HEADERS = ("model", "source", "family", "quant", "weights GB", "params", "context")


def _cells(r: ModelRow) -> list[str]:
    src = (("cache, in catalog" if r.in_catalog else "cache") if r.source == "hf-cache"
           else "predicted (convert)" if r.convert_command else "catalog")
    return [r.model, src, r.family, r.quant, f"{r.weights_bytes / 1e9:,.2f}",
            f"{r.param_count / 1e9:.2f}B" if r.param_count >= 1e8 else
            f"{r.param_count / 1e6:.1f}M", f"{r.context_limit:,}" if r.context_limit else "?"]


CSV_HEADERS = ("model", "source", "revision", "family", "model_type", "quant", "weights_bytes",
               "param_count", "context_limit", "downloaded", "in_catalog", "convert_command")


def models_text(m: ModelsResult, fmt: str) -> str:
    """--format markdown (the table's cells) or csv (the JSON's values, for a spreadsheet)."""
    if fmt == "csv":
        return csv_text(CSV_HEADERS, [[controls(v) if isinstance(v := row_to_json(r)[k], str) else v
                                       for k in CSV_HEADERS] for r in m.rows])
    return markdown(HEADERS, [[controls(c) for c in _cells(r)] for r in m.rows],
                    right=(False, False, False, False, True, True, True))


def render_models(m: ModelsResult, out: Any) -> None:
    from rich.table import Table  # rich is heavy: only a text report needs a table

    q = f" matching {esc(repr(m.query))}" if m.query else ""
    out.print(f"[bold]{len(m.rows)}[/] of {m.total} models{q} "
              f"(the built-in catalog and the Hugging Face cache at {esc(str(m.cache_dir))})",
              soft_wrap=True)
    if m.rows:
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for h in HEADERS:
            t.add_column(h, justify="right" if h in HEADERS[4:] else "left", no_wrap=True)
        for r in m.rows:
            t.add_row(*(esc(c) for c in _cells(r)))
        out.print(t)
        out.print("[dim]GB = 10^9 B, the loaded weights exact from the headers; context = "
                  "max_position_embeddings; `mlxfit fit MODEL` sizes one[/]", soft_wrap=True)
    elif m.query:
        out.print("nothing matches: every word of the query must be a word of the id, "
                  "family, model_type or quant (8B finds Qwen3-8B, not 8bit)")
