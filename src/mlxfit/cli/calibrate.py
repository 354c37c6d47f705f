"""`mlxfit calibrate`: fit the calibration constants to saved measurements, show old vs new."""

from __future__ import annotations

from pathlib import Path

import typer

from mlxfit.cli.common import console, fail
from mlxfit.cli.options import CalibrateBackendOpt, CalibrateWriteOpt, JsonOpt
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps
from mlxfit.render.calibrate import render_calibration, result_to_json
from mlxfit.verbs.calibrate.twin import calibrate

app = typer.Typer(add_completion=False)  # the completion flags are the root command's

@app.command("calibrate")
def calibrate_cmd(
    from_file: Path | None = typer.Option(None, "--from", help="Measurements (JSON lines); default ~/.cache/mlxfit/measurements.jsonl."),  # noqa: B008
    write: CalibrateWriteOpt = False,
    backend: CalibrateBackendOpt = None,
    show_all: bool = typer.Option(False, "--all", help="Every run, not only the worst."),
    as_json: JsonOpt = False,
    show_toml: bool = typer.Option(False, "--show-toml", help="Print the calibration file --write would store."),
    param: list[str] | None = typer.Option(None, "--param", help="Fit only this constant (act_hidden, score_arrays, ...); repeatable."),  # noqa: B008
) -> None:
    """Fit the calibration constants to `mlxfit measure --save` records; old vs new error."""
    try:
        r = calibrate(from_file, write=write, backends=tuple(backend) if backend else None,
                      **({"params": tuple(param)} if param else {}))
    except MlxfitError as e:
        fail(e, as_json)
        return
    if as_json:
        print(dumps(result_to_json(r)))
    elif show_toml:
        print(r.toml, end="")
    else:
        render_calibration(r, console(), show_all=show_all)
