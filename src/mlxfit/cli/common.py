"""Helpers every CLI verb shares: the console and the one-line error exit."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def print_error(msg: str) -> None:
    """The one error line on stderr. A name with a newline in it (a folder, a model_type)
    must not split the line."""
    print("mlxfit: error: " + msg.replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr)


def fail(e: Exception) -> NoReturn:
    """One line on stderr, exit 2: what the user gave us cannot be sized as asked."""
    print_error(str(e) or type(e).__name__)
    raise typer.Exit(2)
