"""The one parser of the sizes users type, for the CLI's flags and the Python twins alike:
token counts (``32k``) and memory (``16GB``). A bad value is a UsageError naming the parameter,
so ``mlxfit.fit(model, "32k")`` and ``mlxfit fit MODEL --ctx 32k`` take the same values and
refuse the same ones.

- Tokens: an integer, or a number with k/K (x1024) or m/M (x1024^2): context lengths are powers
  of two in model cards ("32K" = 32,768, "128K" = 131,072, "1M" = 1,048,576).
- Memory: a number of GB (10^9 bytes, as every usable figure is printed), or a number with a
  unit: G/GB, M/MB, T/TB (powers of 10), GiB/MiB/TiB (powers of 2). Returned in GB.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from mlxfit.errors import UsageError

_TOKEN_UNITS = {"": 1, "k": 1024, "m": 1024**2}
_MEMORY_UNITS = {"": 1e9, "g": 1e9, "gb": 1e9, "m": 1e6, "mb": 1e6, "t": 1e12, "tb": 1e12,
                 "gib": 2**30, "mib": 2**20, "tib": 2**40}
_NUMBER = r"[+-]?(?:[0-9][0-9_]*(?:\.[0-9]*)?|\.[0-9]+)"
_TOKENS_RE = re.compile(rf"\s*({_NUMBER})\s*([kKmM]?)\s*")
_MEMORY_RE = re.compile(rf"\s*({_NUMBER})\s*([a-zA-Z]*)\s*")
# Longer than any size a user means (10^30 tokens or GB): refused before float() or int() of a
# 5,000-digit string (a ValueError from int() or an inf from float() otherwise).
_MAX_CHARS = 32


def _shown(value: str) -> str:
    return repr(value if len(value) <= _MAX_CHARS else value[:_MAX_CHARS] + "...")


def tokens(value: str | int, param: str = "ctx") -> int:
    """'32768', '32k', '128K', '1M', '1.5k' (or an int) -> tokens. A range check is the caller's
    (``estimate.memory.check_run``)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f"{param} must be a number of tokens (e.g. 32768 or '32k'), got "
                         f"{type(value).__name__}", param=param)
    if isinstance(value, int):
        return value
    m = _TOKENS_RE.fullmatch(value) if len(value) <= _MAX_CHARS else None
    if m is None:
        raise UsageError(f"{param}: {_shown(value)} is not a number of tokens (e.g. 32768, 32k, "
                         "128K, 1M)", param=param)
    number, unit = m.group(1).replace("_", ""), m.group(2).lower()
    if not unit:
        try:
            return int(number)
        except ValueError:
            raise UsageError(f"{param}: {value!r} is not a whole number of tokens",
                             param=param) from None
    n = Fraction(number) * _TOKEN_UNITS[unit]  # exact, never a float
    if n.denominator != 1:
        raise UsageError(f"{param}: {value!r} is not a whole number of tokens "
                         f"({float(n):g} = {number} x {_TOKEN_UNITS[unit]})", param=param)
    return int(n)


def gigabytes(value: str | float, param: str = "memory_budget_gb") -> float:
    """'16', '16GB', '16G', '24GiB', '512MB' (or a number) -> GB (10^9 B). A range check is
    the caller's (``verbs.edges.check_machine_params``)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError(f"{param} must be a memory size (e.g. 16 or '24GiB'), got "
                         f"{type(value).__name__}", param=param)
    if not isinstance(value, str):
        return float(value)
    if len(value) <= _MAX_CHARS:
        try:  # a bare number is GB; nan and inf go on to the caller's range check, which names them
            return float(value)
        except ValueError:
            pass
    m = _MEMORY_RE.fullmatch(value) if len(value) <= _MAX_CHARS else None
    unit = m.group(2).lower() if m is not None else None
    if m is None or unit not in _MEMORY_UNITS:
        raise UsageError(f"{param}: {_shown(value)} is not a memory size (e.g. 16, 16GB, 16G, "
                         "24GiB; a bare number is GB = 10^9 B)", param=param)
    gb = float(m.group(1).replace("_", "")) * _MEMORY_UNITS[unit] / 1e9
    return gb if math.isfinite(gb) else math.inf
