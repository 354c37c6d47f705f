"""The language model's data as mlxfit sizes it: its dimensions and a per-layer cache plan
(``ModelConfig`` of ``Layer``s, each with its ``Attn``), and the typed field reads (``Fields``)
that build it from config.json.

Pure, frozen data. ``mlxfit.model.families`` builds the layer plan of each mlx-lm family and
``mlxfit.model.parse.parse_config`` puts the two together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.caches import CacheKind, StateKind


@dataclass(frozen=True)
class Attn:
    """One layer's attention and the cache mlx-lm gives it.

    cache: the mlx-lm cache kind (``mlxfit.model.caches``: Full, Rotating, Chunked, Shared,
    Window), which owns every rule of how many tokens it holds and how the flags act on it;
    ``compress`` adds deepseek_v41's compressed groups to a Window layer.
    """

    cache: CacheKind
    q_heads: int
    kv_heads: int
    k_dim: int  # per-head key width stored in the cache
    v_dim: int  # per-head value width stored in the cache
    head_dim: int  # the width the attention kernel sees (decides Metal's fused path)
    sinks: bool = False
    mla: Mla | None = None
    compress: Compress | None = None
    index: SparseIndex | None = None


@dataclass(frozen=True)
class SparseIndex:
    """deepseek_v41's indexer on a layer that runs it: ``heads`` query heads score every index
    key of the latest earlier (or this) layer that makes them, one key per ``source_ratio``
    tokens: a float32 (chunk, heads, keys) score matrix in prefill."""

    heads: int
    source_ratio: int


@dataclass(frozen=True)
class Compress:
    """deepseek_v41's compressed KV on a layer that makes it (LayerCache.compress_kv / index_k
    / pending_*): one entry per ``ratio`` tokens, each ``width`` elements in the activation
    dtype (head_dim, plus index_head_dim where the layer also makes index keys); the tokens of
    the still-open group (tokens % ratio) held as ``pending`` float32 elements each."""

    ratio: int
    width: int
    pending: int


@dataclass(frozen=True)
class Mla:
    """DeepSeek-style latent attention: the cache holds the latent, prefill rebuilds K/V."""

    heads: int
    qk_nope: int
    qk_rope: int
    v_head: int
    kv_lora_rank: int


@dataclass(frozen=True)
class Layer:
    attn: Attn | None
    # ArraysCache: SSM / linear-attention / conv state, constant in n; the n-gram ids: at
    # most this (StateKind.held gives the bytes after a number of tokens)
    state_bytes: int = 0
    state_kind: StateKind | None = None  # what the ArraysCache state is (model.caches)
    moe: bool = False


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    family: str
    hidden: int
    num_layers: int
    vocab: int
    intermediate: int  # dense MLP width (0 if none)
    moe_intermediate: int
    num_experts: int
    top_k: int
    shared_intermediate: int  # total width of always-active shared experts per MoE layer
    tie_embeddings: bool
    max_position: int | None
    layers: tuple[Layer, ...]
    own_cache: bool  # the model defines make_cache(): mlx-lm then ignores --max-kv-size
    scores_always: bool  # hand-written attention (Gemma 2): scores always materialized
    act_bytes: int  # activation / KV dtype width (bf16 = 2)
    warnings: tuple[str, ...] = field(default=())
    # Non-attention mixer widths (0 when absent): Mamba2 SSD heads / head dim, linear
    # attention value heads and key/value head dims, and which recurrence those layers run
    # ("gated_delta": gated_delta.py, Qwen3-Next / KDA; "wkv7": RWKV-7; "gla": Bailing's
    # recurrent_gla) with its state's element bytes; RG-LRU width (recurrent_gemma).
    ssm_heads: int = 0
    ssm_head_dim: int = 0
    linear_v_heads: int = 0
    linear_k_heads: int = 0  # key heads (Qwen3-Next / 3.5: fewer than the value heads)
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    linear_scan: str = ""
    linear_state_bytes: int = 4
    lru_width: int = 0
    gated_q: bool = False  # q_proj also produces an output gate (Qwen3-Next / Qwen3.5)
    never_quantized: bool = False  # no to_quantized (CacheList, LayerCache): --kv-bits no-op
    no_quantized_attention: bool = False  # the attention fails on a QuantizedKVCache
    # Whether the cache plan is known to match mlx-lm: a family row ("table"), a plan read from
    # mlx-lm's own classes ("mlx-lm <version>"), or neither: a plain transformer, unverified.
    family_known: bool = True
    plan_source: str = "table"
    # Why max_position is longer than max_position_embeddings ("" when it is not): a
    # rope_scaling mlx-lm applies (mlxfit.model.rope_context).
    context_source: str = ""
    # A context past which mlx-lm's own forward pass fails for this config (None: none), and
    # why: validate_run refuses such a run instead of sizing it.
    fails_past: int | None = None
    fails_why: str = ""

    def __hash__(self) -> int:
        # The generated hash walks every layer; the estimators key their caches on the config
        # once per machine and chunk (matrix: 89 SKUs), so it is computed once and kept. Equal
        # configs still hash alike: the value is the hash of the same fields.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.top_k > 0

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts (each pays the router's per-token cost in decode)."""
        return sum(1 for ly in self.layers if ly.moe)

    @property
    def attention_layers(self) -> list[Attn]:
        return [ly.attn for ly in self.layers if ly.attn is not None]

    @cached_property
    def totals_memo(self) -> dict:
        """Peak totals already computed for this model, by (weights, run): they do not depend
        on the machine, so matrix and pick reuse one model's solver probes for every Mac."""
        return {}

    @cached_property
    def attn_groups(self) -> tuple[tuple[Attn, int], ...]:
        """Distinct attention layouts with their layer counts: the byte terms loop over these
        (a handful) instead of every layer, which keeps the solver's probes cheap."""
        counts: dict[Attn, int] = {}
        for a in self.attention_layers:
            counts[a] = counts.get(a, 0) + 1
        return tuple(counts.items())

    @cached_property
    def _groups_upto(self) -> dict[int, tuple[tuple[Attn, int], ...]]:
        return {}

    def attn_groups_upto(self, k: int) -> tuple[tuple[Attn, int], ...]:
        """Distinct attention layouts among the first ``k`` layers, with their counts."""
        memo = self._groups_upto
        if k not in memo:
            counts: dict[Attn, int] = {}
            for ly in self.layers[:k]:
                if ly.attn is not None:
                    counts[ly.attn] = counts.get(ly.attn, 0) + 1
            memo[k] = tuple(counts.items())
        return memo[k]

    @cached_property
    def attn_groups_computed_in_prefill(self) -> tuple[tuple[Attn, int], ...]:
        """Attention layouts whose attention runs during a prefill chunk. mlx-lm evaluates only
        the caches after each chunk, and the last layer's output feeds nothing but the logits,
        so MLX never computes the last layer's attention (or MLP) there."""
        counts: dict[Attn, int] = {}
        for ly in self.layers[:-1]:
            if ly.attn is not None:
                counts[ly.attn] = counts.get(ly.attn, 0) + 1
        return tuple(counts.items())

    @cached_property
    def state_bytes(self) -> int:
        """The ArraysCache states at their full size (a long run's)."""
        return sum(ly.state_bytes for ly in self.layers)

    @cached_property
    def _filling_states(self) -> tuple[Layer, ...]:
        return tuple(ly for ly in self.layers
                     if ly.state_kind is not None and ly.state_kind.bytes_per_token)

    def state_bytes_at(self, tokens: int) -> int:
        """The ArraysCache states once ``tokens`` tokens went through the model: the n-gram
        ids fill one token at a time, every other state is full from the first call."""
        short = sum(ly.state_bytes - ly.state_kind.held(ly.state_bytes, tokens)
                    for ly in self._filling_states if ly.state_kind is not None)
        return self.state_bytes - short


# --------------------------------------------------------------------------- field access


class Fields:
    """Typed reads from a config dict; every failure names the field."""

    def __init__(self, d: dict[str, Any], where: str):
        self.d = d
        self.where = where

    def has(self, key: str) -> bool:
        return self.d.get(key) is not None

    def int(self, key: str, default: int | None = None, *, minimum: int = 0) -> int:
        v = self.d.get(key)
        if v is None:
            if default is None:
                raise ConfigError(f"{self.where}: missing required field '{key}'",
                                  file=self.where, field=key)
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{self.where}: field '{key}' must be an integer, got {v!r}",
                              file=self.where, field=key)
        if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
            raise ConfigError(f"{self.where}: field '{key}' must be an integer, got {v!r}",
                              file=self.where, field=key)
        v = int(v)
        if v < minimum:
            raise ConfigError(f"{self.where}: field '{key}' must be >= {minimum}, got {v}",
                              file=self.where, field=key)
        if v > 10**9:
            raise ConfigError(f"{self.where}: field '{key}' is implausibly large ({v})",
                              file=self.where, field=key)
        return v

    def first_int(self, keys: tuple[str, ...], default: int) -> int:
        for k in keys:
            if self.has(k):
                return self.int(k)
        return default

    def bool(self, key: str, default: bool) -> bool:
        v = self.d.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise ConfigError(f"{self.where}: field '{key}' must be true/false, got {v!r}",
                              file=self.where, field=key)
        return v

    def str_list(self, key: str, n: int | None) -> list[str] | None:
        """The list's first ``n`` entries (it must have them), or all of it for None."""
        v = self.d.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{self.where}: field '{key}' must be a list of strings",
                              file=self.where, field=key)
        if n is None:
            return v
        if len(v) < n:
            raise ConfigError(f"{self.where}: '{key}' has {len(v)} entries for {n} layers",
                              file=self.where, field=key)
        return v[:n]

    def int_list(self, key: str) -> list[int] | None:
        v = self.d.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in v
        ):
            raise ConfigError(f"{self.where}: field '{key}' must be a list of integers",
                              file=self.where, field=key)
        return v
