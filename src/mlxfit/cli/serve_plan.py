"""`mlxfit serve-plan`: parse, call the twin `mlxfit.serve_plan`, render. No arithmetic here."""

from __future__ import annotations

import json

import typer

from mlxfit.cli.common import console, fail
from mlxfit.errors import MlxfitError
from mlxfit.render.serve_plan import render_serve_plan, serve_plan_to_json
from mlxfit.settings import DEFAULT_MODEL
from mlxfit.verbs.serve_plan import serve_plan

app = typer.Typer()


@app.command("serve-plan")
def serve_plan_cmd(
    model: str = typer.Argument(DEFAULT_MODEL, help="Folder, Hugging Face cache repo id, catalog id, or a Hub repo id (headers only)."),
    ctx: int = typer.Option(32768, "--ctx", help="Tokens each request may reach (prompt + generated)."),
    machine: str | None = typer.Option(None, "--machine", help='e.g. "M4 Pro 48GB"; default: this machine.'),
    users: int | None = typer.Option(None, "--users", help="Plan for this many concurrent requests (default: as many as fit)."),
    memory_budget: float | None = typer.Option(None, "--memory-budget", help="Usable GB (10^9 B); replaces the machine's envelope."),
    macos: int | None = typer.Option(None, "--macos", help="macOS major version for the working-set limit (default 26)."),
    revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit (HF cache or the Hub)."),
    prefill_step_size: int = typer.Option(2048, "--prefill-step-size", help="mlx_lm.server's --prefill-step-size."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
) -> None:
    """How many concurrent requests mlx_lm.server holds at --ctx, how fast, with which flags."""
    try:
        p = serve_plan(model, ctx, machine=machine, users=users, memory_budget_gb=memory_budget,
                       macos=macos, revision=revision, prefill_step_size=prefill_step_size,
                       progress=not as_json)
    except MlxfitError as e:
        fail(e)
        return
    if as_json:
        print(json.dumps(serve_plan_to_json(p), indent=2))
    else:
        render_serve_plan(p, console())
    raise typer.Exit(0 if p.concurrency else 1)
