"""`mlxfit machine`: parse, call the twin `mlxfit.machine`, render."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail
from mlxfit.cli.options import JsonOpt, MacosOpt
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps
from mlxfit.render.machine import machine_doc, render_machine
from mlxfit.verbs.machine import machine

app = typer.Typer(add_completion=False)  # the completion flags are the root command's


@app.command("machine")
def machine_cmd(
    spec: str | None = typer.Argument(None, help='Resolve a named SKU, e.g. "M4 Max 128GB".'),
    macos: MacosOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What mlxfit knows about this machine (or a named one), and where each figure came from."""
    try:
        m = machine(spec, macos=macos)
    except MlxfitError as e:
        fail(e, as_json)
    if as_json:
        print(dumps(machine_doc(m)))
        return
    render_machine(m, console())
