"""`mlxfit pick`: parse, call `mlxfit.pick.pick`, print. No arithmetic here."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail
from mlxfit.cli.sizes import gigabytes, tokens
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps
from mlxfit.render.pick import pick_to_json, render_pick
from mlxfit.verbs.pick import pick

app = typer.Typer()

@app.command("pick")
def pick_cmd(
    ctx: int = typer.Option(8192, "--ctx", parser=tokens, metavar="TOKENS", help="Tokens in context the model must hold."),
    catalog: bool = typer.Option(False, "--catalog", help="Also rank the built-in catalog (not downloaded)."),
    machine: str | None = typer.Option(None, "--machine", help='e.g. "M4 Pro 24GB"; default: this machine.'),
    memory_budget: float | None = typer.Option(None, "--memory-budget", parser=gigabytes, metavar="SIZE", help="Usable GB (10^9 B); replaces the machine's envelope."),
    macos: int | None = typer.Option(None, "--macos", help="macOS major version for the working-set limit."),
    default_model: str | None = typer.Option(None, "--default-model", help="Replaces [pick] default_model of ~/.config/mlxfit/config.toml."),
    coexist_fraction: float | None = typer.Option(None, "--coexist-fraction", help="Share of RAM an auto-pick may take (default 0.6)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """The downloaded model to auto-load here, and why each candidate was chosen or not."""
    try:
        p = pick(ctx, catalog=catalog, machine=machine, memory_budget_gb=memory_budget,
                 macos=macos, default_model=default_model,
                 coexist_fraction=coexist_fraction)
    except MlxfitError as e:
        fail(e, as_json)
    if as_json:
        print(dumps(pick_to_json(p)))
    else:
        render_pick(p, console())
    raise typer.Exit(0 if p.chosen else 1)
