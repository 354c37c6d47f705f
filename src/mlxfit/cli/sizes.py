"""The one parser of the sizes users type: token counts (`--ctx 32k`) and memory (`--memory-budget
16GB`). Every verb's flag of either kind goes through these two functions (Typer `parser=`).

- Tokens: an integer, or a number with k/K (x1024) or m/M (x1024^2) — context lengths are
  powers of two in model cards ("32K" = 32,768, "128K" = 131,072, "1M" = 1,048,576).
- Memory: a number of GB (10^9 bytes, as every usable figure is printed), or a number with a
  unit: G/GB, M/MB, T/TB (powers of 10), GiB/MiB/TiB (powers of 2). Returned in GB.
"""

from __future__ import annotations

import re
from fractions import Fraction

import typer

# A number typed as a flag has at most this many characters: Python's int() refuses 4,300
# digits, and anything past 10^18 is refused by the twins' range checks anyway.
MAX_DIGITS = 1000
_TOKEN_UNITS = {"": 1, "k": 1024, "m": 1024**2}
_MEMORY_UNITS = {"": 1e9, "g": 1e9, "gb": 1e9, "m": 1e6, "mb": 1e6, "t": 1e12, "tb": 1e12,
                 "gib": 2**30, "mib": 2**20, "tib": 2**40}
_NUMBER = r"[+-]?(?:[0-9][0-9_]*(?:\.[0-9]*)?|\.[0-9]+)"
_TOKENS_RE = re.compile(rf"\s*({_NUMBER})\s*([kKmM]?)\s*")
_MEMORY_RE = re.compile(rf"\s*({_NUMBER})\s*([a-zA-Z]*)\s*")


def tokens(value: str | int) -> int:
    """'32768', '32k', '128K', '1M', '1.5k' -> tokens. A range check is the twin's."""
    if isinstance(value, int):
        return value
    m = _TOKENS_RE.fullmatch(value)
    if m is None:
        raise typer.BadParameter(f"{value!r} is not a number of tokens (e.g. 32768, 32k, "
                                 "128K, 1M)")
    number, unit = m.group(1).replace("_", ""), m.group(2).lower()
    if len(number) > MAX_DIGITS:  # int() of 4,300 digits raises; nothing sized is near it
        raise typer.BadParameter(f"{value[:40]!r}... has more digits than any number of "
                                 f"tokens ({MAX_DIGITS:,} at most)")
    # Exact, never a float: "9" x 309 + "k" overflowed to inf; the twin then says how far
    # past any context a huge count is.
    n = Fraction(number) * _TOKEN_UNITS[unit]
    if n.denominator != 1:
        raise typer.BadParameter(f"{value!r} is not a whole number of tokens "
                                 f"({float(n):g} = {number} x {_TOKEN_UNITS[unit]})")
    return int(n)


def gigabytes(value: str | float) -> float:
    """'16', '16GB', '16G', '24GiB', '512MB' -> GB (10^9 B). A range check is the twin's."""
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)  # a bare number is GB; float() also passes nan/inf to the twin
    except ValueError:
        pass
    m = _MEMORY_RE.fullmatch(value)
    if m is not None and len(m.group(1).replace("_", "").lstrip("+-0")) > MAX_DIGITS:
        raise typer.BadParameter(f"{value[:40]!r}... has more digits than any memory size")
    unit = m.group(2).lower() if m is not None else None
    if m is None or unit not in _MEMORY_UNITS:
        raise typer.BadParameter(f"{value!r} is not a memory size (e.g. 16, 16GB, 16G, 24GiB; "
                                 "a bare number is GB = 10^9 B)")
    return float(m.group(1).replace("_", "")) * _MEMORY_UNITS[unit] / 1e9
