"""Helpers every CLI verb shares: the console and the one-line error exit."""

from __future__ import annotations

import os
import re
import sys
from typing import NoReturn

import typer

from mlxfit.errors import MachineError, MlxfitError
from mlxfit.render import SCHEMA_VERSION, dumps
from mlxfit.render.tabular import FORMATS
from mlxfit.render.text import controls
from mlxfit.shown import clip
from mlxfit.sources.redact import redact_text

# A twin's parameter -> the flag that sets it, where it is not "--" + the name with "-" for "_".
FLAGS = {
    "memory_budget_gb": "--memory-budget",
    "backends": "--backend",  # calibrate
    "hosts": "--host",  # cluster
    "from_file": "--from",  # calibrate
    "params": "--param",  # calibrate
}


def flag(param: str) -> str:
    """The CLI flag of a twin's parameter: ctx -> --ctx, memory_budget_gb -> --memory-budget."""
    return FLAGS.get(param, "--" + param.replace("_", "-"))


# The exit code when stdout is a pipe its reader closed (`mlxfit fit M | head -1`): 128 +
# SIGPIPE, what a shell reports for a command killed by it. Never 1, which says "does not fit",
# nor 0, which says "fits" about a report nobody read in full.
EXIT_BROKEN_PIPE = 141


def stdout_gone() -> NoReturn:
    """Stdout's reader went away: exit quietly. Stdout is pointed at /dev/null first, so the
    interpreter's own flush at exit cannot raise again (and print "Exception ignored")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise SystemExit(EXIT_BROKEN_PIPE)


# Width of a report sent to a pipe or a file: no line is wrapped (a verdict, a note, a warning
# stays one line for grep); only a terminal's own width wraps.
UNWRAPPED_WIDTH = 10_000
# A terminal said to be narrower than this (COLUMNS=0, 5) is given this width: the terminal
# then wraps the lines itself, and the report is all there.
MIN_TERMINAL_WIDTH = 40


# A line holding a command to copy: the terminal soft-wraps it (one logical line pastes whole);
# every other line is word-wrapped to the terminal's width.
_COMMAND_STARTS = ("$ ", "mlx-lm: ", "mlx_lm.", "mlx.launch", "sudo ")


class _StripTrailing:
    """A text stream that drops the spaces a table pads its last column with, line by line."""

    def __init__(self, stream):
        self._stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._stream.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False


def console(stderr: bool = False):
    from rich.console import Console  # rich is heavy: imported when a report is printed
    from rich.text import Text

    class _Terminal(Console):
        """Prose a renderer prints unwrapped (soft_wrap=True) is word-wrapped on a terminal,
        never cut mid-word; a command line stays one logical line."""

        def print(self, *objects, soft_wrap=None, **kw):
            if soft_wrap and len(objects) == 1 and isinstance(objects[0], str) \
                    and not Text.from_markup(objects[0]).plain.lstrip().startswith(
                        _COMMAND_STARTS):
                soft_wrap = False
            super().print(*objects, soft_wrap=soft_wrap, **kw)

    # No emoji codes either: a model named "x:fire:" is printed as written.
    c = _Terminal(stderr=stderr, highlight=False, emoji=False)
    if not c.is_terminal:
        # Piped: unwrapped, and without the spaces a table pads its last column with.
        stream = _StripTrailing(sys.stderr if stderr else sys.stdout)
        c = Console(file=stream, highlight=False, emoji=False, width=UNWRAPPED_WIDTH,
                    soft_wrap=True)
    elif not MIN_TERMINAL_WIDTH <= c.width <= UNWRAPPED_WIDTH:
        # COLUMNS=0 printed an empty report (exit 0); COLUMNS=10^9 would pad lines to it.
        c = _Terminal(stderr=stderr, highlight=False, emoji=False,
                      width=min(max(c.width, MIN_TERMINAL_WIDTH), UNWRAPPED_WIDTH))
    c.on_broken_pipe = stdout_gone  # Rich's own exits 1, which says "does not fit"
    return c


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
    print("mlxfit: error: " + controls(clip(redact_text(msg))), file=sys.stderr)


def error_kind(e: Exception) -> str:
    """The error's kind in `--json`: its class in snake case without "Error" (ConfigError ->
    "config", HubUnreachable -> "hub_unreachable"); click's usage errors are "usage"."""
    if not isinstance(e, MlxfitError):
        return "usage" if isinstance(e, typer.BadParameter) else "error"
    name = type(e).__name__.removesuffix("Error") or "mlxfit"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def error_doc(e: Exception, kind: str | None = None) -> dict:
    """`--json`'s error object: kind, the message as on stderr, the file and the field (the flag
    for a parameter, else the config key) at fault where known."""
    if isinstance(e, MlxfitError):
        file, field = e.file, (flag(e.param) if e.param else e.field)
        if field is None and isinstance(e, MachineError):
            field = "--machine"
    else:  # click's: its parameter object names the flag
        opts = getattr(getattr(e, "param", None), "opts", None) or [None]
        file, field = None, opts[0]
    return {"schema_version": SCHEMA_VERSION,
            "error": {"kind": kind or error_kind(e), "message": redact_text(error_text(e)),
                      "file": file, "field": field}}


def check_format(fmt: str) -> None:
    """--format's value: one of render.tabular.FORMATS."""
    if fmt not in FORMATS:
        raise MlxfitError(f"--format must be {', '.join(FORMATS[:-1])} or {FORMATS[-1]}, got "
                          f"{fmt!r}", field="--format")


def wants_json(fmt: str, as_json: bool, verb: str) -> bool:
    """--format of a verb that prints one result (fit, serve-plan, cluster): table or json,
    the same words as matrix's and pick's; json is --json."""
    if fmt not in ("table", "json"):
        raise MlxfitError(f"--format must be table or json for {verb} (markdown and csv are "
                          f"matrix's and pick's), got {fmt!r}", field="--format")
    return as_json or fmt == "json"


def fail(e: Exception, as_json: bool = False) -> NoReturn:
    """One line on stderr, exit 2: what the user gave us cannot be sized as asked. Under
    --json the error is also a JSON object on stdout, so a script reads one object either way."""
    if as_json:
        print(dumps(error_doc(e)))
    print_error(error_text(e))
    raise typer.Exit(2)
