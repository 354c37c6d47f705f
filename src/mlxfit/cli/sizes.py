"""The CLI's side of the one parser of the sizes users type (mlxfit.units): token counts
(`--ctx 32k`) and memory (`--memory-budget 16GB`). Every verb's flag of either kind goes through
these two functions (Typer `parser=`); the Python twins call mlxfit.units directly."""

from __future__ import annotations

import typer

from mlxfit import units
from mlxfit.errors import UsageError


def tokens(value: str | int) -> int:
    """Typer's parser for a token flag (``--ctx 32k``): mlxfit.units.tokens."""
    try:
        return units.tokens(value)
    except UsageError as e:
        raise typer.BadParameter(str(e).removeprefix("ctx: ")) from None


def gigabytes(value: str | float) -> float:
    """Typer's parser for a memory flag (``--memory-budget 16GB``): mlxfit.units.gigabytes."""
    try:
        return units.gigabytes(value)
    except UsageError as e:
        raise typer.BadParameter(str(e).removeprefix("memory_budget_gb: ")) from None
