"""`mlxfit pick` as text and as JSON."""

from __future__ import annotations

from typing import Any

from mlxfit._version import __version__
from mlxfit.hardware.resolve import Machine, bare_machine
from mlxfit.model.names import base_name
from mlxfit.render import (
    SCHEMA_VERSION,
    bands_to_json,
    conversion_to_json,
    machine_to_json,
    run_to_json,
    seconds_to_json,
    tps_to_json,
)
from mlxfit.render.fit import WATCHDOG_KEY
from mlxfit.render.tabular import csv_text, markdown
from mlxfit.render.text import controls, esc
from mlxfit.verbs.pick import Candidate, PickResult


def candidate_to_json(c: Candidate) -> dict[str, Any]:
    return {
        "model": c.model,
        "base_model": base_name(c.model),
        "revision": c.revision,
        "source": c.source_kind,
        "location": c.location,
        "quant": c.quant,
        "weights_bytes": c.weights_bytes,
        "total_bytes": c.total_bytes,
        "fits": c.fits,
        "runs": c.runs,
        "fits_coexist": c.fits_coexist,
        "verdict": c.verdict,  # issue 27: the one rule of every verb
        "bands": bands_to_json(c.result.bands if c.result is not None else None),
        "max_safe_context": c.max_safe_context,
        "context_limit": c.context_limit,
        "predicted_decode_tps": tps_to_json(c.predicted_decode_tps),
        "predicted_prefill_tps": tps_to_json(c.predicted_prefill_tps),
        "predicted_ttft_s": seconds_to_json(c.predicted_ttft_s),
        "is_default": c.is_default,
        "chosen": c.chosen,
        "budget": c.budget,
        "budget_bytes": c.budget_bytes,
        "reason": c.reason,
        "warnings": list(c.warnings),
        "watchdog_warning": c.watchdog,
        "notes": list(c.notes),
        # The cache plan's origin, as fit's: "table", "mlx-lm <version>" or unverified.
        "family_known": c.result.family_known if c.result is not None else True,
        "plan_source": c.result.plan_source if c.result is not None else "table",
        # Additive: for a conversion pick sizes ("<model> as 4bit", --quants), the plan fit
        # gives it, mlx_lm.convert command and source repo included; null otherwise.
        "quantization_plan": conversion_to_json(c.conversion),
    }


def _machine(p: PickResult) -> Machine:
    if p.machine is not None:
        return p.machine
    return bare_machine(p.machine_name, p.ram_bytes, p.usable_bytes, p.usable_source)


def pick_to_json(p: PickResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "chosen": p.chosen,
        "rule": p.rule,
        "reason": p.reason,
        "context_tokens": p.context_tokens,
        "run": run_to_json(p.run) if p.run is not None else None,
        "only_fits": p.only_fits,
        "machine": machine_to_json(_machine(p)),
        "coexist_fraction": p.coexist_fraction,
        "coexist_fraction_from": p.coexist_fraction_from,
        "coexist_bytes": p.coexist_bytes,
        "default_model": p.default_model,
        "default_model_from": p.default_model_from,
        "cache_dir": p.cache_dir,
        "candidates": [candidate_to_json(c) for c in p.candidates],
        "skipped": [{"model": s.model, "revision": s.revision, "location": s.location,
                     "kind": s.kind, "reason": s.reason} for s in p.skipped],
        "catalog": ([candidate_to_json(c) for c in p.catalog]
                    if p.catalog is not None else None),
        "warnings": list(p.warnings),
        "notes": list(p.notes),
    }


def _gb(n: int) -> str:
    return f"{n / 1e9:,.2f}"


def _fits(c: Any) -> str:
    dog = "!" if c.watchdog else ""  # prefill may trip the GPU watchdog (FitResult.watchdog)
    if c.verdict == "tight":
        return f"[yellow]tight[/]{dog}"
    if c.fits_coexist:
        return f"[green]yes[/]{dog}"
    if c.runs:
        return f"[yellow]usable[/]{dog}"
    return "[yellow]buffer[/]" if c.fits else "[red]no[/]"


def _table(rows: Any, title: str, catalog: bool) -> Any:
    from rich.table import Table  # rich is heavy: only a text report needs a table

    t = Table(title=title, title_justify="left", title_style="bold", show_header=True,
              header_style="bold", box=None, pad_edge=False)
    t.add_column("" if catalog else "#", justify="right", no_wrap=True)
    t.add_column("model", overflow="fold", ratio=1)
    t.add_column("quant", no_wrap=True)
    t.add_column("weights", justify="right", no_wrap=True)
    t.add_column("total", justify="right", no_wrap=True)
    t.add_column("fits", no_wrap=True)
    t.add_column("max ctx", justify="right", no_wrap=True)
    t.add_column("tok/s", justify="right", no_wrap=True)
    t.add_column("TTFT s", justify="right", no_wrap=True)
    for i, c in enumerate(rows, 1):
        name = esc(c.model) + (" (default)" if c.is_default else "")
        t.add_row(
            ("" if catalog else f"[bold green]> {i}[/]") if c.chosen else
            ("" if catalog else str(i)),
            f"[bold green]{name}[/]" if c.chosen else name,
            esc(c.quant), _gb(c.weights_bytes), _gb(c.total_bytes), _fits(c),
            f"{c.max_safe_context:,}",
            f"{c.predicted_decode_tps:,.1f}"
            if c.runs and c.predicted_decode_tps is not None else "",
            f"{c.predicted_ttft_s:,.1f}" if c.runs and c.predicted_ttft_s is not None else "",
        )
    return t


def _stacked(rows: Any, title: str, catalog: bool) -> Any:
    """The table for a terminal too narrow for it (80 columns): each model id whole on its own
    line, its figures on the next, so no id is cut into fragments."""
    from rich.console import Group  # rich is heavy: only a text report needs it

    lines = [f"[bold]{title}[/]"]
    for i, c in enumerate(rows, 1):
        mark = "" if catalog else (f"[bold green]> {i}[/]" if c.chosen else f"{i:>3}")
        name = esc(c.model) + (" (default)" if c.is_default else "")
        lines.append(f"{mark} {f'[bold green]{name}[/]' if c.chosen else name}".rstrip()
                     if mark else name)
        figures = [esc(c.quant), f"weights {_gb(c.weights_bytes)}", f"total {_gb(c.total_bytes)}",
                   f"fits {_fits(c)}", f"max ctx {c.max_safe_context:,}"]
        if c.runs and c.predicted_decode_tps is not None:
            figures.append(f"{c.predicted_decode_tps:,.1f} tok/s")
        if c.runs and c.predicted_ttft_s is not None:
            figures.append(f"TTFT {c.predicted_ttft_s:,.1f} s")
        lines.append("      " + "  ".join(figures))
    return Group(*lines)


def _rows_view(out: Any, rows: Any, title: str, catalog: bool) -> Any:
    """The table, or its stacked form where the table would cut model ids (a narrow terminal)."""
    from rich.measure import Measurement  # rich is heavy: only a text report needs it

    t = _table(rows, title, catalog)
    natural = Measurement.get(out, out.options.update_width(10_000), t).maximum
    if not out.is_terminal or natural <= out.width:
        return t
    return _stacked(rows, title, catalog)


def render_pick(p: Any, out: Any) -> None:
    runs_here = [c for c in p.catalog or () if c.runs]
    if p.chosen:
        head = f"[bold green]{esc(p.chosen)}[/]"
    elif runs_here:  # --catalog answers the question even with nothing downloaded
        n = len(runs_here)
        head = (f"[bold yellow]nothing downloaded[/]; {n} catalog model{'s' if n > 1 else ''} "
                f"run{'' if n > 1 else 's'} here (below)")
    else:
        head = "[bold red]nothing[/]"
    out.print(f"pick for [bold]{esc(p.machine_name)}[/] at {p.context_tokens:,} tokens: {head}")
    out.print(f"  {esc(p.reason)}", soft_wrap=True)
    out.print(f"  usable {_gb(p.usable_bytes)} GB ({esc(p.usable_source)}); coexist budget "
              f"{_gb(p.coexist_bytes)} GB ({p.coexist_fraction:g} of RAM, "
              f"{esc(p.coexist_fraction_from)})")
    dm = (f"default model {esc(p.default_model)} ({esc(p.default_model_from)})"
          if p.default_model is not None else
          "no default model (--default-model or [pick] default_model sets one)")
    out.print(f"  {dm}; cache {esc(p.cache_dir)}")
    if p.candidates:
        out.print(_rows_view(out, p.candidates, "downloaded", catalog=False))
        for i, c in enumerate(p.candidates, 1):
            verdict = "[green]chosen[/]" if c.chosen else "passed over"
            out.print(f"  {i}. {verdict} [dim](budget: {esc(c.budget)} "
                      f"{_gb(c.budget_bytes)} GB)[/]: {esc(c.reason)}", soft_wrap=True)
            for w in c.warnings:
                out.print(f"     [yellow]warning:[/] {esc(w)}", soft_wrap=True)
    else:
        out.print("no downloaded candidate")
    if p.skipped:
        out.print("[bold]skipped[/]")
        for s in p.skipped:
            rev = f"@{esc(s.revision[:12])}" if s.revision else ""
            out.print(f"  {esc(s.model)}{rev} [dim]({esc(s.kind)})[/]: {esc(s.reason)}",
                      soft_wrap=True)
    if p.catalog is not None:
        if p.catalog:
            out.print(_rows_view(out, p.catalog, "built-in catalog, not downloaded: what could run "
                             "here", catalog=True))
        elif p.only_fits:
            out.print("built-in catalog: nothing (not downloaded) runs here")
        else:
            out.print("built-in catalog: every entry is downloaded")
    if p.candidates or p.catalog:
        out.print("[dim]GB = 10^9 B; total = peak at the context; fits: yes = within the coexist "
                  "budget, usable = only within the usable memory, tight = fits at the estimate, "
                  "not at the upper bound of its peak band, buffer = the total fits but "
                  "one array exceeds the GPU's largest buffer; tok/s = decode with the whole "
                  "context in the cache (faster near empty)[/]")
    if any(c.watchdog for c in (*p.candidates, *(p.catalog or ()))):
        out.print(f"[dim]! {WATCHDOG_KEY}[/]")
    for w in p.warnings:
        if p.skipped and w.startswith("skipped "):
            continue  # listed under "skipped" already
        out.print(f"[yellow]warning:[/] {esc(w)}", soft_wrap=True)
    for n in p.notes:
        out.print(f"[dim]note: {esc(n)}[/]")


TEXT_HEADERS = ("model", "source", "quant", "weights GB", "peak GB", "runs", "max context",
                "tok/s")
CSV_HEADERS = ("model", "source", "revision", "quant", "weights_bytes", "total_bytes", "fits",
               "runs", "fits_coexist", "max_safe_context", "context_limit",
               "predicted_decode_tps", "chosen")


def pick_text(p: PickResult, fmt: str) -> str:
    """--format markdown or csv: the downloaded candidates, then the catalog's rows."""
    rows = list(p.candidates) + list(p.catalog or ())
    if fmt == "csv":
        return csv_text(CSV_HEADERS, [[candidate_to_json(c)[k] for k in CSV_HEADERS]
                                      for c in rows])
    cells = [[controls(c.model) + (" (chosen)" if c.chosen else ""),
              "downloaded" if c.source_kind != "catalog" else "catalog", c.quant,
              _gb(c.weights_bytes), _gb(c.total_bytes),
              ("tight" if c.verdict == "tight" else "yes") if c.runs else "no",
              f"{c.max_safe_context:,}",
              f"{c.predicted_decode_tps:,.1f}" if c.runs and c.predicted_decode_tps else ""]
             for c in rows]
    head = (f"Models for **{controls(p.machine_name)}** at {p.context_tokens:,} tokens "
            f"(usable {_gb(p.usable_bytes)} GB; estimated by mlxfit {__version__} for mlx-lm)"
            "\n\n")
    return head + markdown(TEXT_HEADERS, cells,
                           right=(False, False, False, True, True, False, True, True))
