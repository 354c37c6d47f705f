"""The shipped calibration.toml with the user's calibration file layered on top (the edge)."""

from __future__ import annotations

from pathlib import Path

from mlxfit.calibration.constants import Calibration, parse_calibration
from mlxfit.resources import data_path
from mlxfit.settings import deep_merge, read_toml


def load_calibration(user_file: Path | None = None) -> Calibration:
    """The shipped constants, with a user calibration file layered on top when present."""
    shipped = data_path("calibration.toml")
    doc = read_toml(shipped, "the calibration file")
    where = str(shipped.name)
    if isinstance(doc.get("bands"), str):  # the band table, a file of its own beside it
        doc["bands"] = read_toml(data_path(doc["bands"]), "the band table")
    if user_file is not None and user_file.is_file():
        doc = deep_merge(doc, read_toml(user_file, "the calibration file"))
        where = f"{where} + {user_file}"
    return parse_calibration(doc, where)


def check_user_calibration(user_doc: dict, where: str) -> Calibration:
    """The calibration a user file holding ``user_doc`` would give (the shipped constants under
    it); the loader's error if it would not load: ``calibrate --write`` checks a file before it
    replaces the old one."""
    shipped = read_toml(data_path("calibration.toml"), "the calibration file")
    return parse_calibration(deep_merge(shipped, user_doc), where)
