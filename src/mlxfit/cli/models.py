"""`mlxfit models`: parse, call the twin `mlxfit.models`, render."""

from __future__ import annotations

import typer

from mlxfit.cli.common import check_format, console, fail
from mlxfit.cli.options import FormatOpt, JsonOpt, QuantsOpt
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps
from mlxfit.render.models import models_text, models_to_json, render_models
from mlxfit.verbs.models import models

app = typer.Typer(add_completion=False)  # the completion flags are the root command's


@app.command("models")
def models_cmd(
    query: list[str] | None = typer.Argument(  # noqa: B008 (Typer's idiom for a list argument)
        None, help="Words that must all appear in the id, family, model_type or quant "
                   "(e.g. qwen3 4-bit)."),
    fmt: FormatOpt = "table",
    quants: QuantsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The built-in catalog and the models in the local Hugging Face cache, searchable."""
    as_json = as_json or fmt == "json"
    try:
        check_format(fmt)
        m = models(" ".join(query) if query else None, quants=quants)
    except MlxfitError as e:
        fail(e, as_json)
        return
    if as_json:
        print(dumps(models_to_json(m)))
    elif fmt in ("markdown", "csv"):
        print(models_text(m, fmt), end="")
    else:
        render_models(m, console())
