"""data/apple_skus.toml: loaded, merged with the user's table, validated, cached by mtime."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mlxfit.errors import MachineError
from mlxfit.resources import data_path
from mlxfit.settings import Settings, deep_merge, from_environ, read_toml

SkuTable = dict[str, Any]


# Where a user adds or corrects chips without touching the package (merged over the shipped table).
USER_TABLE = Path("~/.config/mlxfit/apple_skus.toml")


# Per-chip compute figures (prefill): optional, positive when present.
COMPUTE_KEYS = ("gpu_clock_mhz", "gpu_flops_per_core_cycle", "neural_accel_flops_per_core_cycle")

_CACHE: dict[tuple[tuple[str, int], ...], SkuTable] = {}


def _validate(table: SkuTable, origin: str) -> None:
    """Fail once, at load, with the path: a typo in a user's table must not surface as a KeyError."""
    chips = table.get("chips")
    if not isinstance(chips, dict) or not chips:
        raise MachineError(f'SKU table {origin} has no [chips."..."] entries')
    for name, chip in chips.items():
        variants = chip.get("variants") if isinstance(chip, dict) else None
        if not isinstance(variants, list) or not variants:
            raise MachineError(f"SKU table {origin}: chip {name!r} has no [[variants]]")
        for v in variants:
            ok = (
                isinstance(v, dict)
                and isinstance(v.get("gpu_cores"), int)
                and v["gpu_cores"] > 0
                and isinstance(v.get("bandwidth_gbs"), (int, float))
                and v["bandwidth_gbs"] > 0
                and isinstance(v.get("ram_gb"), list)
                and v["ram_gb"]
                and all(isinstance(r, int) and r > 0 for r in v["ram_gb"])
            )
            if not ok:
                raise MachineError(
                    f"SKU table {origin}: a variant of {name!r} needs gpu_cores, bandwidth_gbs "
                    f"and a non-empty ram_gb list of whole GB"
                )
        arch = chip.get("gpu_arch")
        if arch is not None and not (isinstance(arch, str)
                                     and re.fullmatch(r"applegpu_g\d\d[a-z]", arch)):
            raise MachineError(f"SKU table {origin}: chip {name!r} gpu_arch must look like "
                               f"'applegpu_g16s', got {arch!r}")
        for key in COMPUTE_KEYS:
            v = chip.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or v <= 0):
                raise MachineError(f"SKU table {origin}: chip {name!r} {key} must be a "
                                   f"positive number, got {v!r}")
    for key in ("before_26", "from_26"):
        pts = table.get("working_set", {}).get(key)
        if not isinstance(pts, list) or not pts:
            raise MachineError(f"SKU table {origin}: [working_set] {key} is missing")
    if not isinstance(table.get("non_apple", {}).get("usable_fraction"), (int, float)):
        raise MachineError(f"SKU table {origin}: [non_apple] usable_fraction is missing")


def load_sku_table(extra_path: Path | None = None, user_path: Path | None = None, *,
                   settings: Settings | None = None) -> SkuTable:
    """The shipped table, merged with the user's (apple_skus.toml in the user config folder,
    ~/.config/mlxfit, when present) and then with `extra_path`. Cached per file set and
    modification time; treat it as read-only.

    `user_path` replaces the user's file (tests point it at a temporary file).
    """
    builtin = data_path("apple_skus.toml")
    user = (user_path.expanduser() if user_path is not None
            else (settings or from_environ()).sku_file)
    paths = [builtin]
    try:
        user_exists = user is not None and user.is_file()
    except OSError as e:  # e.g. ~/.config unreadable: Path.is_file raises on EACCES
        raise MachineError(f"cannot read the SKU table {user}: {e.strerror or e}") from None
    if user_exists:
        paths.append(user)
    if extra_path is not None:
        extra = Path(extra_path).expanduser()
        if not extra.is_file():
            raise MachineError(f"SKU table {extra} does not exist")
        paths.append(extra)
    key = tuple((str(p), p.stat().st_mtime_ns) for p in paths)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    table: SkuTable = {}
    for p in paths:
        table = deep_merge(table, read_toml(p, "the SKU table", MachineError))
    _validate(table, " + ".join(str(p) for p in paths))
    _CACHE[key] = table
    return table


def sku_table_or_default(table: SkuTable | None) -> SkuTable:
    return table if table is not None else load_sku_table()


def chip_compute_figures(chip: str | None, table: SkuTable | None = None) -> dict[str, float]:
    """The chip's compute figures (``COMPUTE_KEYS`` present in its table entry); empty for a
    chip the table does not know."""
    entry = sku_table_or_default(table)["chips"].get(chip) if chip else None
    if not isinstance(entry, dict):
        return {}
    return {k: float(entry[k]) for k in COMPUTE_KEYS if entry.get(k) is not None}
