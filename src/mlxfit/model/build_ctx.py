"""What a family builder reads: the config's fields and the dimensions every family shares
(``Ctx``), and typed reads of nested config objects and of ``layer_types``.

The builders (``mlxfit.model.build_*``) are how mlx-lm's ``make_cache()`` builds each family's
caches, one function per cache layout (mlx_lm/models/*.py, mlx-lm 0.32), grouped by the shape
of the cache: ``build_dense`` (a KVCache per layer), ``build_sliding`` (windowed caches),
``build_mla`` (latent attention), ``build_hybrid`` (recurrent / SSM / conv state beside
attention); ``build_renames`` maps families' own field names. Pure: every builder takes the
config's fields (``Ctx``) and returns the per-layer plan; tests/test_oracle_families.py checks
each against mlx-lm's own caches (the family table naming them: ``mlxfit.model.families``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.caches import CacheKind
from mlxfit.model.config import Attn, Fields


@dataclass
class Ctx:
    """What a family builder reads: the config's fields and the dimensions every family shares."""

    f: Fields
    n: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    act_bytes: int
    warnings: list[str]
    # Widths of non-attention mixers, for the prefill transient: filled by the builders.
    mixer: dict[str, Any] = field(default_factory=dict)

    def attn(self, cache: CacheKind, **kw: Any) -> Attn:
        """An attention layer with the cache ``cache``; the widths default to the config's."""
        kv = kw.pop("kv_heads", self.kv_heads)
        hd = kw.pop("head_dim", self.head_dim)
        return Attn(
            cache=cache,
            q_heads=kw.pop("q_heads", self.heads),
            kv_heads=kv,
            k_dim=kw.pop("k_dim", hd),
            v_dim=kw.pop("v_dim", hd),
            head_dim=hd,
            **kw,
        )


def sub_fields(c: Ctx, key: str, required: bool = True) -> Fields:
    """Typed reads of a nested object of the config (linear_attn_config, ...)."""
    d = c.f.d.get(key)
    if d is None and not required:
        return Fields({}, f"{c.f.where}: {key}")
    if not isinstance(d, dict):
        raise ConfigError(f"{c.f.where}: '{key}' must be an object")
    return Fields(d, f"{c.f.where}: {key}")


def layer_types(c: Ctx, default: list[str] | None = None) -> list[str] | None:
    return c.f.str_list("layer_types", c.n) or default
