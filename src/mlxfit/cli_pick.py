"""`mlxfit pick`: parse, call `mlxfit.pick.pick`, print. No arithmetic here."""

from __future__ import annotations

import json
from typing import Any

import typer

from mlxfit.cli_common import console, fail
from mlxfit.errors import MlxfitError


def _gb(n: int) -> str:
    return f"{n / 1e9:,.2f}"


def _fits(c: Any) -> str:
    if c.fits_coexist:
        return "[green]yes[/]"
    if c.runs:
        return "[yellow]usable[/]"
    return "[yellow]buffer[/]" if c.fits else "[red]no[/]"


def _table(rows: Any, title: str, catalog: bool) -> Any:
    from rich.table import Table

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
    for i, c in enumerate(rows, 1):
        name = c.model + (" (default)" if c.is_default else "")
        t.add_row(
            "[bold green]>[/]" if c.chosen else ("" if catalog else str(i)),
            f"[bold green]{name}[/]" if c.chosen else name,
            c.quant, _gb(c.weights_bytes), _gb(c.total_bytes), _fits(c),
            f"{c.max_safe_context:,}",
            f"{c.predicted_decode_tps:,.1f}"
            if c.runs and c.predicted_decode_tps is not None else "",
        )
    return t


def render_pick(p: Any, out: Any) -> None:
    head = f"[bold green]{p.chosen}[/]" if p.chosen else "[bold red]nothing[/]"
    out.print(f"pick for [bold]{p.machine_name}[/] at {p.context_tokens:,} tokens: {head}")
    out.print(f"  {p.reason}", soft_wrap=True)
    out.print(f"  usable {_gb(p.usable_bytes)} GB ({p.usable_source}); coexist budget "
              f"{_gb(p.coexist_bytes)} GB ({p.coexist_fraction:g} of RAM, "
              f"{p.coexist_fraction_from})")
    out.print(f"  default model {p.default_model} ({p.default_model_from}); "
              f"cache {p.cache_dir}")
    if p.candidates:
        out.print(_table(p.candidates, "downloaded", catalog=False))
        for i, c in enumerate(p.candidates, 1):
            verdict = "[green]chosen[/]" if c.chosen else "passed over"
            out.print(f"  {i}. {verdict} [dim](budget: {c.budget} {_gb(c.budget_bytes)} GB)[/]: "
                      f"{c.reason}", soft_wrap=True)
            for w in c.warnings:
                out.print(f"     [yellow]warning:[/] {w}", soft_wrap=True)
    else:
        out.print("no downloaded candidate")
    if p.skipped:
        out.print("[bold]skipped[/]")
        for s in p.skipped:
            rev = f"@{s.revision[:12]}" if s.revision else ""
            out.print(f"  {s.model}{rev} [dim]({s.kind})[/]: {s.reason}", soft_wrap=True)
    if p.catalog is not None:
        if p.catalog:
            out.print(_table(p.catalog, "built-in catalog, not downloaded: what could run "
                             "here", catalog=True))
        else:
            out.print("built-in catalog: every entry is downloaded")
    if p.candidates or p.catalog:
        out.print("[dim]GB = 10^9 B; total = peak at the context; fits: yes = within the coexist "
                  "budget, usable = only within the usable memory, buffer = the total fits but "
                  "one array exceeds the GPU's largest buffer[/]")
    for w in p.warnings:
        out.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
    for n in p.notes:
        out.print(f"[dim]note: {n}[/]")


def register(app: typer.Typer) -> None:
    @app.command("pick")
    def pick_cmd(
        ctx: int = typer.Option(8192, "--ctx", help="Tokens in context the model must hold."),
        catalog: bool = typer.Option(False, "--catalog", help="Also rank the built-in catalog (not downloaded)."),
        machine: str | None = typer.Option(None, "--machine", help='e.g. "M4 Pro 24GB"; default: this machine.'),
        memory_budget: float | None = typer.Option(None, "--memory-budget", help="Usable GB (10^9 B); replaces the machine's envelope."),
        macos: int | None = typer.Option(None, "--macos", help="macOS major version for the working-set limit."),
        default_model: str | None = typer.Option(None, "--default-model", help="Replaces [pick] default_model of ~/.config/mlxfit/config.toml."),
        coexist_fraction: float | None = typer.Option(None, "--coexist-fraction", help="Share of RAM an auto-pick may take (default 0.6)."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    ) -> None:
        """The downloaded model to auto-load here, and why each candidate was chosen or not."""
        from mlxfit.pick import pick, pick_to_json

        try:
            p = pick(ctx, catalog=catalog, machine=machine, memory_budget_gb=memory_budget,
                     macos=macos, default_model=default_model,
                     coexist_fraction=coexist_fraction)
        except MlxfitError as e:
            fail(e)
        if as_json:
            print(json.dumps(pick_to_json(p), indent=2))
        else:
            render_pick(p, console())
        raise typer.Exit(0 if p.chosen else 1)
