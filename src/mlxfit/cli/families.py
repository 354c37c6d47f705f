"""`mlxfit families`: parse, call the twin `mlxfit.families`, render."""

from __future__ import annotations

import json

import typer

from mlxfit.cli.common import console
from mlxfit.cli.options import JsonOpt
from mlxfit.render.families import families_to_json, render_families
from mlxfit.verbs.families import families

app = typer.Typer(add_completion=False)  # the completion flags are the root command's


@app.command("families")
def families_cmd(
    as_json: JsonOpt = False,
) -> None:
    """Every mlx-lm model family mlxfit sizes: cache kinds, fixture, checked in CI."""
    r = families()
    if as_json:
        print(json.dumps(families_to_json(r), indent=2))
        return
    render_families(r, console())
