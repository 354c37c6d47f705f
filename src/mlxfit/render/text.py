"""The one escape for every untrusted string mlxfit prints or writes into a script or a CSV
cell.

Model names, file names, config strings, repo ids and reasons come from files and servers
mlxfit did not write. In a Rich template they are markup (``"model_type": "zz[/]"`` raised
MarkupError, ``[blink]`` restyled the report); on a terminal they are commands (ESC ]0; sets
the window title, ESC [2J clears the screen) or, as Unicode bidi overrides (U+202A-202E,
U+2066-2069), reorder what is shown ("FITS" read as "DOES NOT FIT"); a lone surrogate (a
file name that is not UTF-8) cannot be written to a strict UTF-8 stdout at all. So
``controls`` shows each of those as ``\\xNN`` / ``\\uNNNN``, and the rest build on it:
``esc`` (Rich markup), ``shell_comment`` / ``shell_arg`` (``cluster --write``'s run.sh) and
``csv_cell`` (``--format csv``: a cell that a spreadsheet would run as a formula)."""

from __future__ import annotations

import re
import shlex

# C0, DEL, C1; the bidi embeddings, overrides and isolates and the implicit marks (LRM, RLM,
# ALM); the line and paragraph separators (a line break to some terminals); lone surrogates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
                      "\ud800-\udfff]")


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def controls(value: object) -> str:
    """``str(value)`` with every control character (C0, C1, DEL) shown as ``\\xNN`` and every
    bidi control, line separator and lone surrogate as ``\\uNNNN``: one line, shown as stored,
    encodable as UTF-8."""
    s = str(value)
    return _CONTROL.sub(_shown, s) if _CONTROL.search(s) else s


def shell_comment(value: object) -> str:
    """``value`` safe in a ``#`` comment line of a shell script: no newline can end the comment
    and start a command."""
    return controls(value)


def shell_arg(value: object) -> str:
    """``value`` as one shell word (``shlex.quote``), its controls shown: never more words, a
    command substitution or a line break."""
    return shlex.quote(controls(value))


# OWASP's list: a cell starting with one of these is a formula to Excel, LibreOffice, Sheets.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?%?")


def csv_cell(value: object) -> object:
    """A CSV cell: numbers as they are, a boolean as the JSON spells it (true/false, not
    Python's True/False), None empty; text with its controls shown and, when it starts like a
    formula and is not a plain number (``-3.5`` stays a number), prefixed with ``'``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return value
    s = str(value)
    if s.startswith(_FORMULA_START) and not _NUMBER.fullmatch(s):
        s = "'" + s
    return controls(s)


def esc(value: object) -> str:
    """``value`` safe inside a Rich markup template: controls shown, markup escaped."""
    # rich is heavy: only a text report (which has imported it already) calls this
    from rich.markup import escape

    return escape(controls(value))


def runs(n: int, what: str = "run") -> str:
    """'1 run', '2 runs': a count with its noun, plural-correct."""
    return f"{n:,} {what}{'' if n == 1 else 's'}"
