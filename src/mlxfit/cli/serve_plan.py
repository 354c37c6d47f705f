"""`mlxfit serve-plan`: parse, call the twin `mlxfit.serve_plan`, render. No arithmetic here."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail, wants_json
from mlxfit.cli.options import (
    FormatOpt,
    JsonOpt,
    MachineOpt,
    MacosOpt,
    MemoryBudgetOpt,
    PrefillStepSizeOpt,
    RevisionOpt,
    ServeCtxOpt,
)
from mlxfit.cli.positional import ModelFlagCommand, model_or_default, unexpected
from mlxfit.errors import MlxfitError
from mlxfit.mlx_lm_defaults import DEFAULT_PREFILL_STEP_SIZE
from mlxfit.render import dumps
from mlxfit.render.serve_plan import render_serve_plan, serve_plan_to_json
from mlxfit.settings import DEFAULT_MODEL
from mlxfit.verbs.serve_plan import serve_plan

app = typer.Typer(add_completion=False)  # the completion flags are the root command's


@app.command("serve-plan", cls=ModelFlagCommand, context_settings={"allow_extra_args": True})
def serve_plan_cmd(
    typer_ctx: typer.Context,
    model: str | None = typer.Argument(None, help=f"Folder, Hugging Face cache repo id, catalog id, or a Hub repo id (headers only); also --model. Default: {DEFAULT_MODEL}.", show_default=False),
    ctx: ServeCtxOpt = 32768,
    machine: MachineOpt = None,
    users: int | None = typer.Option(None, "--users", help="Plan for this many concurrent requests (default: as many as fit)."),
    memory_budget: MemoryBudgetOpt = None,
    macos: MacosOpt = None,
    revision: RevisionOpt = None,
    prefill_step_size: PrefillStepSizeOpt = DEFAULT_PREFILL_STEP_SIZE,
    as_json: JsonOpt = False,
    fmt: FormatOpt = "table",
) -> None:
    """How many concurrent requests mlx_lm.server holds at --ctx, how fast, with which flags."""
    try:
        as_json = wants_json(fmt, as_json, "serve-plan")
        if typer_ctx.args:
            raise unexpected(typer_ctx.args[0], "serve-plan takes one model")
        model = model_or_default(model, "serve-plan")
    except (typer.BadParameter, MlxfitError) as e:
        fail(e, as_json)
        return
    try:
        p = serve_plan(model, ctx, machine=machine, users=users, memory_budget_gb=memory_budget,
                       macos=macos, revision=revision, prefill_step_size=prefill_step_size,
                       progress=not as_json)
    except MlxfitError as e:
        fail(e, as_json)
        return
    if as_json:
        print(dumps(serve_plan_to_json(p)))
    else:
        render_serve_plan(p, console())
    raise typer.Exit(0 if p.fits else 1)
