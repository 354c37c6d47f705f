"""Helpers every CLI verb shares: the console and the one-line error exit."""

from __future__ import annotations

import re
import sys
from typing import NoReturn

import typer

from mlxfit.errors import MlxfitError
from mlxfit.render.text import controls
from mlxfit.sources.redact import redact_text

# A twin's parameter -> the flag that sets it, where it is not "--" + the name with "-" for "_".
FLAGS = {
    "memory_budget_gb": "--memory-budget",
    "backends": "--backend",  # calibrate
    "hosts": "--host",  # cluster
    "from_file": "--from",  # calibrate
}


def flag(param: str) -> str:
    """The CLI flag of a twin's parameter: ctx -> --ctx, memory_budget_gb -> --memory-budget."""
    return FLAGS.get(param, "--" + param.replace("_", "-"))


def console(stderr: bool = False):
    from rich.console import Console  # rich is heavy: imported when a report is printed

    # No emoji codes either: a model named "x:fire:" is printed as written.
    return Console(stderr=stderr, highlight=False, emoji=False)


def error_text(e: Exception) -> str:
    """The error as the CLI says it: a UsageError's parameters worded as their flags
    ("ctx must be at least 1 token" -> "--ctx must be at least 1 token")."""
    msg = str(e) or type(e).__name__
    if not isinstance(e, MlxfitError) or not e.params:
        return msg
    # Quoted text is the user's own value ('backend'): only the words around it are renamed.
    parts = re.split(r"('[^']*')", msg)
    for i in range(0, len(parts), 2):
        for p in e.params:
            parts[i] = re.sub(rf"(?<![\w.-]){re.escape(p)}(?![\w-])", flag(p), parts[i])
    return "".join(parts)


def print_error(msg: str) -> None:
    """The one error line on stderr. A name with a newline or an ESC in it (a folder, a
    model_type, a Hub file name) must neither split the line nor command the terminal, and no
    URL in it may carry a user:password (HF_ENDPOINT's)."""
    print("mlxfit: error: " + controls(redact_text(msg)), file=sys.stderr)


def fail(e: Exception) -> NoReturn:
    """One line on stderr, exit 2: what the user gave us cannot be sized as asked."""
    print_error(error_text(e))
    raise typer.Exit(2)
