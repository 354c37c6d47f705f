"""Per-user settings in one place: files under ~/.config/mlxfit, the defaults every verb shares
(model, macOS version), and pick's [pick] settings."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mlxfit.errors import UsageError
from mlxfit.resources import user_file

USER_CALIBRATION = Path("~/.config/mlxfit/calibration.toml")


def user_calibration() -> Path | None:
    """The user's calibration file (written by `mlxfit calibrate --write`), or None when there
    is no home directory to expand it in."""
    try:
        return USER_CALIBRATION.expanduser()
    except RuntimeError:
        return None


USER_CONFIG = Path("~/.config/mlxfit/config.toml")


# In the catalog, 4.6 GB of weights: fits every Mac from 16 GB at 8K tokens and the most
# downloaded 8B MLX conversion; the same default as `mlxfit fit`.
# The model `mlxfit fit` sizes when none is named, and pick's default (README quick start).
DEFAULT_MODEL = "mlx-community/Qwen3-8B-4bit"
# macOS major version assumed for the GPU working-set limit when --macos is not given.
DEFAULT_MACOS = 26


COEXIST_FRACTION = 0.6  # from the original tool (fit.ts COEXIST_FRACTION)


@dataclass(frozen=True)
class PickSettings:
    default_model: str
    default_model_from: str  # "built-in", the config file, or "argument"
    coexist_fraction: float
    coexist_fraction_from: str


_KEYS = ("default_model", "coexist_fraction")


def load_settings(path: Path | None = None) -> PickSettings:
    """The [pick] table of config.toml (`path`, default ~/.config/mlxfit/config.toml):
    ``default_model = "org/name"`` and ``coexist_fraction = 0.6``. Other tables are other
    verbs' business and are ignored; a missing file means the built-in values."""
    p = path.expanduser() if path is not None else user_file(str(USER_CONFIG)[2:])
    s = PickSettings(DEFAULT_MODEL, "built-in", COEXIST_FRACTION, "built-in")
    try:
        if p is None or not p.is_file():
            return s
    except OSError as e:  # e.g. ~/.config unreadable: say which file, do not guess
        raise UsageError(f"cannot read {p}: {e.strerror or e}") from None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        doc = tomllib.loads(p.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read {p}: {e}".replace("\n", " ")) from None
    table = doc.get("pick", {})
    if not isinstance(table, dict):
        raise UsageError(f"{p}: [pick] must be a table")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise UsageError(f"{p}: unknown key {unknown[0]!r} in [pick] (known: {', '.join(_KEYS)})")
    if "default_model" in table:
        dm = table["default_model"]
        if not isinstance(dm, str) or not dm.strip():
            raise UsageError(f"{p}: [pick] default_model must be a repo id string")
        s = replace(s, default_model=dm.strip(), default_model_from=str(p))
    if "coexist_fraction" in table:
        s = replace(s, coexist_fraction=check_fraction(table["coexist_fraction"], str(p)),
                    coexist_fraction_from=str(p))
    return s


def check_fraction(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise UsageError(f"{where}: coexist_fraction must be a number in (0, 1], got {v!r}")
    return float(v)
