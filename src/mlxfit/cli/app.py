"""The command line: the `mlxfit` group and the console script. Each verb lives in
mlxfit/cli/<verb>.py (Typer only: parse, call the twin, render) and is imported only when it
runs, so `mlxfit fit` never pays for `cluster` or `measure`."""

from __future__ import annotations

import difflib
import importlib
import sys
from itertools import pairwise
from typing import NoReturn

import typer
from typer.core import TyperGroup
from typer.main import get_command

from mlxfit._version import __version__
from mlxfit.cli.common import error_doc, error_text, print_error, stdout_gone
from mlxfit.errors import MlxfitError
from mlxfit.render import dumps

try:  # typer 0.28 vendors click; older releases use click itself
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError as ClickUsageError

# In the order `mlxfit --help` lists them.
VERBS = ("fit", "serve-plan", "machine", "matrix", "pick", "models", "measure", "calibrate",
         "cluster", "families")
# Other spellings of a verb: the Python twin's name, and the words other tools use.
VERB_ALIASES = {"serve_plan": "serve-plan", "serve": "serve-plan", "list": "models",
                "machines": "machine"}


class _Verbs(TyperGroup):
    """Click's lazily loaded subcommands: a verb's module is imported when it is asked for."""

    def list_commands(self, ctx) -> list[str]:
        return list(VERBS)

    def invoke(self, ctx):
        # Click turns a closed pipe into exit 1 ("does not fit"): caught before it can.
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            stdout_gone()

    def get_command(self, ctx, name: str):
        name = VERB_ALIASES.get(name, name)
        if name not in VERBS:
            return None
        return get_command(importlib.import_module(f"mlxfit.cli.{name.replace('-', '_')}").app)

    def resolve_command(self, ctx, args):
        """An unknown verb's error keeps a "did you mean" (click's own message drops Typer's)."""
        name = args[0] if args else ""
        if args and self.get_command(ctx, name) is None and not ctx.resilient_parsing:
            near = near_verbs(name)
            hint = f" Did you mean {' or '.join(repr(v) for v in near)}?" if near else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)


def near_verbs(name: str) -> list[str]:
    """The verbs a mistyped one is closest to (`fti` -> fit, `matirx` -> matrix)."""
    word = name.lower().replace("_", "-")
    return difflib.get_close_matches(word, VERBS + tuple(VERB_ALIASES), n=2, cutoff=0.5)


app = typer.Typer(
    cls=_Verbs,
    add_completion=True,  # Typer's own --install-completion / --show-completion
    no_args_is_help=True,
    help="Will this model run on this Mac with MLX, at what context, how fast?",
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"mlxfit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print mlxfit's version and exit."),
) -> None:
    """Will this model run on this Mac with MLX, at what context, how fast?"""


def main() -> None:
    """The console script: click's usage errors (unknown flag, non-numeric value) become the
    same single line and exit code 2 as every other bad input, not a framed usage box.

    One rule for output that cannot be written: a closed pipe on stdout exits quietly with
    ``EXIT_BROKEN_PIPE``; any other failure to write stdout (a full disk, an I/O error) is one
    line on stderr and exit 2, like every error."""
    argv = sys.argv[1:]
    as_json = "--json" in argv or "--format=json" in argv or any(
        a == "--format" and b == "json" for a, b in pairwise(argv))

    def one_line(msg: str, e: Exception) -> NoReturn:  # outside the app: exit, not typer.Exit
        if as_json:  # a script asked for JSON: the error is a JSON object too
            doc = error_doc(e, "usage" if isinstance(e, ClickUsageError) else None)
            doc["error"]["message"] = msg
            try:
                print(dumps(doc), flush=True)
            except BrokenPipeError:
                stdout_gone()
            except OSError:
                pass  # stdout is what failed: the line on stderr says so
        print_error(msg)
        sys.exit(2)

    try:
        rc = app(standalone_mode=False, prog_name="mlxfit")
        sys.stdout.flush()  # here, where a failure can still be reported, not at exit
    except BrokenPipeError:
        stdout_gone()
    except OSError as e:  # ENOSPC, EIO: the report did not reach stdout
        if e.filename is not None:
            raise
        as_json = False
        one_line(f"cannot write the output: {e.strerror or e}", MlxfitError(str(e)))
    except ClickUsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:
            print(e.ctx.get_help())  # a bare `mlxfit` asks for help
            sys.exit(0)
        verb = e.ctx.command_path.partition(" ")[2] if e.ctx is not None else ""
        one_line(f"{e.format_message()} (see mlxfit {verb + ' ' if verb else ''}--help)", e)
    except KeyboardInterrupt:
        sys.exit(130)
    except MlxfitError as e:  # commands catch their own; this is the last net
        one_line(error_text(e), e)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
