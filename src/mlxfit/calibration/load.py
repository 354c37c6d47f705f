"""The shipped calibration.toml with the user's calibration file layered on top (the edge)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mlxfit.errors import MlxfitError
from mlxfit.resources import data_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from mlxfit.calibration.constants import Calibration, parse_calibration


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_calibration(user_file: Path | None = None) -> Calibration:
    """The shipped constants, with a user calibration file layered on top when present."""
    shipped = data_path("calibration.toml")
    doc = tomllib.loads(shipped.read_text())
    where = str(shipped.name)
    if user_file is not None and user_file.is_file():
        try:
            doc = _merge(doc, tomllib.loads(user_file.read_bytes().decode("utf-8")))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
            msg = str(e).replace("\n", " ")
            raise MlxfitError(f"{user_file}: cannot read calibration file ({msg})") from None
        where = f"{where} + {user_file}"
    return parse_calibration(doc, where)
