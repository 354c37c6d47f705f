"""Locate the data files shipped inside the package (or beside it in a source checkout)."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent
_REPO = _PKG.parent.parent  # src/mlxfit -> repository root in a checkout / editable install

# Installed wheel: mlxfit/data/<name>. Source checkout: <repo>/data/<name> or <repo>/<name>.
_CANDIDATES = {
    "apple_skus.toml": [_PKG / "data" / "apple_skus.toml", _REPO / "data" / "apple_skus.toml"],
    "calibration.toml": [_PKG / "data" / "calibration.toml", _REPO / "calibration.toml"],
    "bands.toml": [_PKG / "data" / "bands.toml", _REPO / "data" / "bands.toml"],
    "links.toml": [_PKG / "data" / "links.toml", _REPO / "data" / "links.toml"],
    "families.json": [_PKG / "data" / "families.json", _REPO / "data" / "families.json"],
}


def data_path(name: str) -> Path:
    for p in _CANDIDATES[name]:
        if p.is_file():
            return p
    raise FileNotFoundError(f"mlxfit data file {name} is missing from the installation")


def catalog_dir() -> Path:
    return _PKG / "catalog_data"

