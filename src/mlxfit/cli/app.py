"""The command line: the `mlxfit` group and the console script. Each verb lives in
mlxfit/cli/<verb>.py (Typer only: parse, call the twin, render) and is imported only when it
runs, so `mlxfit fit` never pays for `cluster` or `measure`."""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import typer
from typer.core import TyperGroup
from typer.main import get_command

from mlxfit.cli.common import error_text, print_error
from mlxfit.errors import MlxfitError

try:  # typer 0.28 vendors click; older releases use click itself
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError as ClickUsageError

# In the order `mlxfit --help` lists them.
VERBS = ("fit", "machine", "matrix", "pick", "measure", "calibrate", "cluster", "families")


class _Verbs(TyperGroup):
    """Click's lazily loaded subcommands: a verb's module is imported when it is asked for."""

    def list_commands(self, ctx) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx, name: str):
        if name not in VERBS:
            return None
        return get_command(importlib.import_module(f"mlxfit.cli.{name}").app)


app = typer.Typer(
    cls=_Verbs,
    add_completion=False,
    no_args_is_help=True,
    help="Will this model run on this Mac with MLX, at what context, how fast?",
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Will this model run on this Mac with MLX, at what context, how fast?"""


def main() -> None:
    """The console script: click's usage errors (unknown flag, non-numeric value) become the
    same single line and exit code 2 as every other bad input, not a framed usage box."""
    def one_line(msg: str) -> NoReturn:  # outside the app: exit directly, not typer.Exit
        print_error(msg)
        sys.exit(2)

    try:
        rc = app(standalone_mode=False)
    except ClickUsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:
            print(e.ctx.get_help())  # a bare `mlxfit` asks for help
            sys.exit(0)
        verb = e.ctx.command_path.partition(" ")[2] if e.ctx is not None else ""
        one_line(f"{e.format_message()} (see mlxfit {verb + ' ' if verb else ''}--help)")
    except KeyboardInterrupt:
        sys.exit(130)
    except MlxfitError as e:  # commands catch their own; this is the last net
        one_line(error_text(e))
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
