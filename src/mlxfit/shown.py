"""Bounded lists and lines for messages and notes: a folder of 3,000 stray files made one note
660,069 characters long. Names are listed up to a count and a width, then "... and N more"."""

from __future__ import annotations

from collections.abc import Iterable

# A message or note longer than this is cut, saying how much was left out: a line a reader can
# take in, and still ~20 long file names.
MAX_LINE_CHARS = 2000


def clip(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def name_list(names: Iterable[str], limit: int = 12, width: int = 120) -> str:
    """At most ``limit`` of ``names`` (sorted), each cut to ``width`` characters, comma
    separated, then "... and N more"; "nothing" when there are none."""
    all_names = sorted(names)
    shown = [n if len(n) <= width else n[:width] + "..." for n in all_names[:limit]]
    more = len(all_names) - len(shown)
    return (", ".join(shown) + (f", ... and {more:,} more" if more else "")) if shown else "nothing"
