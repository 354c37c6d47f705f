"""`mlxfit families`: every mlx-lm model module and what mlxfit knows of it.

A row per family of the table (``mlxfit.model.families.FAMILIES``): the model_types that load
it, the cache kinds its layers get, the fixture config CI checks it with against mlx-lm's own
caches, and whether that check runs; then the modules that are not a text LM and the families
not sized exactly, each with its reason. The cache kinds and fixtures come from
``data/families.json``, which ``scripts/write_families.py`` writes from the fixtures and a test
(tests/test_families_verb.py) keeps equal to them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

from mlxfit.json_result import JsonResult
from mlxfit.model.config import ModelConfig
from mlxfit.model.families import (
    FAMILIES,
    FAMILY_ALIASES,
    MLX_LM_ARCH_REMAPPING,
    MLX_LM_REMAPPING,
    NOT_SUPPORTED,
    NOT_TEXT_LM,
)
from mlxfit.model.parse import parse_config
from mlxfit.resources import data_path


@dataclass(frozen=True)
class FamilyRow:
    family: str
    model_types: tuple[str, ...]  # every model_type (alias, remapping) sized by this row
    caches: tuple[str, ...]  # the cache kinds its layers get, as mlx-lm names them
    own_cache: bool  # the module defines make_cache() (--max-kv-size then has no effect)
    fixture: str | None  # tests/fixtures/<path>
    fixture_synthetic: bool
    verified_in_ci: bool


@dataclass(frozen=True)
class FamiliesResult(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.families:families_to_json"
    JSON_ROUNDED: ClassVar[bool] = False
    rows: tuple[FamilyRow, ...]
    not_text_lm: dict[str, str]
    not_supported: dict[str, str]


def cache_kinds(cfg: ModelConfig) -> tuple[str, ...]:
    """The cache kinds of a parsed config's layers, in mlx-lm's class names."""
    kinds = set()
    for ly in cfg.layers:
        if ly.attn is not None:
            kind = ly.attn.cache.label
            kinds.add(f"{kind} (MLA latent)" if ly.attn.mla else kind)
            if ly.attn.compress is not None:
                kinds.add("LayerCache (compressed KV"
                          + (" + index keys)" if ly.attn.compress.width > ly.attn.k_dim else ")"))
        if ly.state_bytes:
            kinds.add(f"ArraysCache ({ly.state_kind.name})")
    return tuple(sorted(kinds))


def _model_types(family: str) -> tuple[str, ...]:
    types = {family} | {a for a, f in FAMILY_ALIASES.items() if f == family}
    types |= {t for t, mod in MLX_LM_REMAPPING.items() if mod == family}
    types |= {f"{t} ({arch})" for (t, arch), mod in MLX_LM_ARCH_REMAPPING.items()
              if mod == family}
    return tuple(sorted(types))


def families() -> FamiliesResult:
    """Every family mlxfit sizes, with its cache kinds and fixture, and every module it does
    not, with the reason."""
    data = json.loads(data_path("families.json").read_text())
    rows = []
    for name in sorted(FAMILIES):
        d = data.get(name, {})
        rows.append(FamilyRow(name, _model_types(name), tuple(d.get("caches", ())),
                              FAMILIES[name].own_cache, d.get("fixture"),
                              bool(d.get("synthetic", False)), d.get("fixture") is not None))
    return FamiliesResult(tuple(rows), dict(NOT_TEXT_LM), dict(NOT_SUPPORTED))


def build_table(fixtures: dict[str, tuple[dict, bool]]) -> dict[str, dict]:
    """data/families.json from fixture configs ({path: (config, synthetic)}): per family the
    union of its fixtures' cache kinds and the fixture CI checks it with (a real config first)."""
    out: dict[str, dict] = {}
    for path in sorted(fixtures, key=lambda p: (fixtures[p][1], p)):  # real configs first
        config, synthetic = fixtures[path]
        cfg = parse_config(config, where=path)
        if cfg.family not in FAMILIES:
            continue
        row = out.setdefault(cfg.family, {"caches": [], "fixture": path, "synthetic": synthetic})
        row["caches"] = sorted(set(row["caches"]) | set(cache_kinds(cfg)))
    return dict(sorted(out.items()))
