"""`mlxfit matrix` as text and as JSON."""

from __future__ import annotations

from typing import Any

from mlxfit._version import __version__
from mlxfit.render import (
    SCHEMA_VERSION,
    bands_to_json,
    conversion_to_json,
    machine_to_json,
    run_to_json,
    seconds_to_json,
    tps_to_json,
)
from mlxfit.render.fit import WATCHDOG_KEY, fit_machine, render_conversion
from mlxfit.render.quants import quants_text, quants_to_json, render_quants
from mlxfit.render.tabular import csv_text, markdown
from mlxfit.render.text import controls, esc
from mlxfit.verbs.matrix import MatrixResult, MatrixRow


def _fits_cell(r: MatrixRow) -> str:
    if r.runs:
        return "[yellow]tight[/]" if r.result.verdict == "tight" else "[green]yes[/]"
    return "[yellow]buffer[/]" if r.fits else "[red]no[/]"


def row_to_json(r: MatrixRow) -> dict[str, Any]:
    """One SKU: its machine object (what `fit --machine <name> --json` gives), then the fit."""
    return {
        "family": r.family,
        "name": r.name,
        "machine": machine_to_json(fit_machine(r.result)),
        "usable_bytes": r.usable_bytes,
        "total_bytes": r.total_bytes,
        "headroom_bytes": r.headroom_bytes,
        "fits": r.fits,
        "runs": r.runs,
        "verdict": r.result.verdict,  # issue 27: FitResult's, the one rule of every verb
        "bands": bands_to_json(r.result.bands),
        "max_safe_context": r.max_safe_context,
        "predicted_decode_tps": tps_to_json(r.predicted_decode_tps),
        "predicted_prefill_tps": tps_to_json(r.predicted_prefill_tps),
        "predicted_ttft_s": seconds_to_json(r.predicted_ttft_s),
        "watchdog_warning": r.watchdog,
        "unverified": r.unverified,
        "this_machine": r.this_machine,
    }


def matrix_to_json(m: MatrixResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "model": m.model,
        "source": m.source_kind,
        "context_tokens": m.context_tokens,
        "run": run_to_json(m.run),
        "weights_bytes": m.weights_bytes,
        "context_limit": m.context_limit,
        "macos_major": m.macos_major,
        "chips_filter": m.chips_filter,
        "only_fits": m.only_fits,
        "skus_considered": m.skus_considered,
        "fits_count": m.n_fit,
        "this_machine": m.this_machine,
        "rows": [row_to_json(r) for r in m.rows],
        "warnings": list(m.warnings),
        "notes": list(m.notes),
        "family_known": m.family_known,
        "plan_source": m.plan_source,
        # Additive (issue 17): the conversion the rows size; --quants, one set per quant.
        "quantization_plan": conversion_to_json(m.quantization_plan),
        "quants": quants_to_json(m.quants),
    }


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f}"


def render_matrix(m: Any, out: Any) -> None:
    from rich.table import Table  # rich is heavy: only a text report needs a table

    if m.quants:
        render_quants(m, out)
        return
    flt = f", chips {esc(repr(m.chips_filter))}" if m.chips_filter else ""
    out.print(f"[bold]{esc(m.model)}[/] at {m.context_tokens:,} tokens on Apple Silicon "
              f"(macOS {m.macos_major} working set{flt}): "
              f"[bold]{m.n_fit} of {m.skus_considered}[/] SKUs run it"
              + ("" if m.family_known else " [bold yellow](UNVERIFIED: unknown family)[/]"))
    render_conversion(m.quantization_plan, out)
    if not m.rows:
        out.print("no SKU fits at this context" if m.only_fits else "no SKU to show")
    else:
        mark = any(r.this_machine for r in m.rows)
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        t.add_column("SKU", no_wrap=True)
        t.add_column("RAM", justify="right", no_wrap=True)
        t.add_column("GB/s", justify="right", no_wrap=True)
        t.add_column("usable", justify="right", no_wrap=True)
        t.add_column("fits", no_wrap=True)
        t.add_column("max ctx", justify="right", no_wrap=True)
        t.add_column("tok/s", justify="right", no_wrap=True)
        t.add_column("TTFT s", justify="right", no_wrap=True)
        t.add_column("headroom", justify="right", no_wrap=True)
        if mark:
            t.add_column("", no_wrap=True)
        for i, r in enumerate(m.rows):
            if i == 0 or m.rows[i - 1].family != r.family:
                t.add_row(f"[bold cyan]{esc(r.family)}[/]")
            cores = f"  {esc(r.chip)} {r.gpu_cores}-core"
            cells = [
                f"[bold]{cores}[/]" if r.this_machine else cores,
                f"{r.ram_gb}GB",
                f"{r.bandwidth_gbs:g}" + ("*" if r.unverified else ""),
                _gb(r.usable_bytes),
                _fits_cell(r) + ("!" if r.runs and r.watchdog else ""),
                f"{r.max_safe_context:,}",
                # the JSON's figure (two decimals) at one: the table never rounds it differently
                f"{tps_to_json(r.predicted_decode_tps):,.1f}"
                if r.runs and r.predicted_decode_tps is not None else "",
                f"{r.predicted_ttft_s:,.1f}" if r.runs and r.predicted_ttft_s is not None else "",
                _gb(r.headroom_bytes),
            ]
            if mark:
                cells.append("[bold]<- this Mac[/]" if r.this_machine else "")
            t.add_row(*cells)
        out.print(t)
    if m.rows:
        lo, hi = min(r.total_bytes for r in m.rows), max(r.total_bytes for r in m.rows)
        # Base chips commit MLX's command buffers sooner (40 ops / 40 MB): a smaller transient.
        peak = (f"peak {_gb(lo)} GB" if _gb(lo) == _gb(hi)
                else f"peak {_gb(lo)}-{_gb(hi)} GB (base chips hold fewer pending ops)")
        out.print(f"[dim]GB = 10^9 B; {peak} at "
                  f"{m.context_tokens:,} tokens (weights {_gb(m.weights_bytes)} GB) on every SKU; "
                  f"model limit {m.context_limit:,} tokens; tok/s = decode with all "
                  f"{m.context_tokens:,} tokens in context (faster near empty); TTFT = time to "
                  f"first token of the whole prompt; tok/s and TTFT blank where it does not fit[/]")
    if any(r.unverified for r in m.rows):
        out.print("[dim]* rests on a weak source in apple_skus.toml[/]")
    if any(r.watchdog for r in m.rows):
        out.print(f"[dim]! {WATCHDOG_KEY}[/]")
    if any(r.result.verdict == "tight" for r in m.rows):
        out.print("[dim]tight: fits at the estimate, not at the upper bound of its peak band "
                  "(9 in 10 real peaks lie inside the band)[/]")
    if any(r.fits and not r.runs for r in m.rows):
        out.print("[dim]buffer: the total fits, but one array exceeds the GPU's largest buffer "
                  "(maxBufferLength): Metal cannot allocate it[/]")
    for w in m.warnings:
        out.print(f"[yellow]warning:[/] {esc(w)}")
    for n in m.notes:
        out.print(f"[dim]note: {esc(n)}[/]")


CSV_HEADERS = ("family", "name", "chip", "gpu_cores", "ram_bytes", "bandwidth_gbs",
               "usable_bytes", "total_bytes", "headroom_bytes", "fits", "runs",
               "max_safe_context", "predicted_decode_tps", "predicted_prefill_tps",
               "predicted_ttft_s", "unverified", "watchdog_warning")


def matrix_text(m: MatrixResult, fmt: str) -> str:
    """--format csv (the JSON's values, one row per SKU) or markdown: a table to paste into a
    model card, "which Macs run this model, at what context, how fast". With --quants: the
    converted columns, as the terminal shows them."""
    if m.quants:
        return quants_text(m, fmt)
    if fmt == "csv":
        rows = []
        for r in m.rows:
            d = row_to_json(r)
            flat = {**d["machine"], **{k: v for k, v in d.items() if k != "machine"}}
            flat["name"] = r.name
            rows.append([flat[k] for k in CSV_HEADERS])
        return csv_text(CSV_HEADERS, rows)
    cells = [[controls(r.name), f"{r.bandwidth_gbs:g}" + ("*" if r.unverified else ""),
              (("tight" if r.result.verdict == "tight" else "yes") + ("!" if r.watchdog else ""))
              if r.runs else "buffer" if r.fits else "no",
              f"{r.max_safe_context:,}",
              f"{tps_to_json(r.predicted_decode_tps):,.1f}"
              if r.runs and r.predicted_decode_tps is not None else "",
              f"{r.predicted_ttft_s:,.1f}" if r.runs and r.predicted_ttft_s is not None else ""]
             for r in m.rows]
    head = (f"Which Macs run **{controls(m.model)}** at {m.context_tokens:,} tokens with mlx-lm "
            f"(macOS {m.macos_major}; weights {_gb(m.weights_bytes)} GB, peak "
            f"{_gb(m.rows[0].total_bytes) if m.rows else '?'} GB; estimated by mlxfit "
            f"{__version__}): {m.n_fit} of {m.skus_considered} SKUs\n\n")
    foot = ("\n*runs*: the peak fits the GPU's usable memory (*tight*: at the estimate, not "
            "at the upper bound of its peak band); *max context*: the largest context whose "
            f"upper peak bound fits; decode tok/s: predicted with all {m.context_tokens:,} "
            "tokens in context (faster near empty), blank where it does not run; TTFT: time to "
            "first token of the whole prompt, in seconds; GB = "
            "10^9 B" + ("; * a weakly sourced bandwidth" if any(r.unverified for r in m.rows)
                        else "")
            + (f"; ! {WATCHDOG_KEY}" if any(r.watchdog for r in m.rows) else "") + ".\n")
    return head + markdown(("Mac", "GB/s", "runs", "max context", "decode tok/s", "TTFT s"),
                           cells, right=(False, True, False, True, True, True)) + foot
