"""The one escape for every value interpolated into Rich output and into error lines.

Model names, file names, config strings, repo ids and reasons come from files and servers
mlxfit did not write. In a Rich template they are markup (``"model_type": "zz[/]"`` raised
MarkupError, ``[blink]`` restyled the report) and on a terminal they are commands (ESC ]0;
sets the window title, ESC [2J clears the screen). So: each C0/C1 control character (and DEL)
is shown as ``\\xNN``, then Rich markup is escaped. Renderers pass every interpolated string
through ``esc``; plain-text lines (errors, JSON-free stdout) through ``controls``."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def controls(value: object) -> str:
    """``str(value)`` with every C0/C1 control character and DEL shown as ``\\xNN``."""
    s = str(value)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s) if _CONTROL.search(s) else s


def esc(value: object) -> str:
    """``value`` safe inside a Rich markup template: controls shown, markup escaped."""
    # rich is heavy: only a text report (which has imported it already) calls this
    from rich.markup import escape

    return escape(controls(value))


def runs(n: int, what: str = "run") -> str:
    """'1 run', '2 runs': a count with its noun, plural-correct."""
    return f"{n:,} {what}{'' if n == 1 else 's'}"
