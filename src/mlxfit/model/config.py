"""config.json -> ModelConfig: the language model's dimensions and a per-layer cache plan.

Pure: takes the parsed dict, returns frozen data. Family quirks live in ``FAMILIES`` (one entry
per mlx-lm model module), each stating how mlx-lm's own ``make_cache()`` builds that family's
caches (mlx_lm/models/*.py, mlx-lm 0.32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from mlxfit.errors import ConfigError

# mlx_lm/utils.py MODEL_REMAPPING: these model_types load another family's module.
REMAP = {
    "mistral": "llama",
    "kimi_k2": "deepseek_v3",
    "joyai_llm_flash": "deepseek_v3",
    "iquestcoder": "llama",
    "xverse": "llama",
    "falcon_mamba": "mamba",
    "gemma4_unified": "gemma4",
    "gemma3_text": "gemma3",
    "gemma4_text": "gemma4",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "qwen3_5_moe": "qwen3_5",
    "llama4_text": "llama4",
    "lfm2_moe": "lfm2",
}


@dataclass(frozen=True)
class Attn:
    """One layer's attention and the cache mlx-lm gives it.

    cache: "full" (KVCache), "rotating" (RotatingKVCache, window tokens), "chunked"
    (ChunkedKVCache, window = attention_chunk_size), "shared" (reads another layer's cache,
    owns none).
    """

    cache: str
    q_heads: int
    kv_heads: int
    k_dim: int  # per-head key width stored in the cache
    v_dim: int  # per-head value width stored in the cache
    head_dim: int  # the width the attention kernel sees (decides Metal's fused path)
    window: int | None = None
    sinks: bool = False
    mla: Mla | None = None


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
    state_bytes: int = 0  # ArraysCache: SSM / linear-attention / conv state, constant in n
    state_kind: str | None = None  # "linear" | "mamba" | "conv"
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
    # Non-attention mixer widths (0 when absent): Mamba2 SSD heads / head dim, gated-delta
    # linear attention value heads and key/value head dims.
    ssm_heads: int = 0
    ssm_head_dim: int = 0
    linear_v_heads: int = 0
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    gated_q: bool = False  # q_proj also produces an output gate (Qwen3-Next / Qwen3.5)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.top_k > 0

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
        return sum(ly.state_bytes for ly in self.layers)


# --------------------------------------------------------------------------- field access


class _Fields:
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
                raise ConfigError(f"{self.where}: missing required field '{key}'")
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{self.where}: field '{key}' must be an integer, got {v!r}")
        if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
            raise ConfigError(f"{self.where}: field '{key}' must be an integer, got {v!r}")
        v = int(v)
        if v < minimum:
            raise ConfigError(f"{self.where}: field '{key}' must be >= {minimum}, got {v}")
        if v > 10**9:
            raise ConfigError(f"{self.where}: field '{key}' is implausibly large ({v})")
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
            raise ConfigError(f"{self.where}: field '{key}' must be true/false, got {v!r}")
        return v

    def str_list(self, key: str, n: int) -> list[str] | None:
        v = self.d.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{self.where}: field '{key}' must be a list of strings")
        if len(v) < n:
            raise ConfigError(f"{self.where}: '{key}' has {len(v)} entries for {n} layers")
        return v[:n]

    def int_list(self, key: str) -> list[int] | None:
        v = self.d.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in v
        ):
            raise ConfigError(f"{self.where}: field '{key}' must be a list of integers")
        return v


def text_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields: ``text_config`` (VLM wrappers) over the top level."""
    if not isinstance(config, dict):
        raise ConfigError("config.json: the top level must be a JSON object")
    tc = config.get("text_config")
    if tc is None:
        return config
    if not isinstance(tc, dict):
        raise ConfigError("config.json: 'text_config' must be an object")
    merged = {k: v for k, v in config.items() if k != "text_config"}
    merged.update(tc)
    # The wrapper's model_type names the mlx-lm module (gemma3, qwen3_5, llama4, ...).
    if "model_type" in config:
        merged["model_type"] = config["model_type"]
    return merged


# --------------------------------------------------------------------------- builders


@dataclass
class _Ctx:
    f: _Fields
    n: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    act_bytes: int
    warnings: list[str]
    # Widths of non-attention mixers, for the prefill transient: filled by the builders.
    mixer: dict[str, int] = field(default_factory=dict)

    def attn(self, cache: str = "full", **kw: Any) -> Attn:
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


def _moe_layer_flags(c: _Ctx, n_experts: int) -> list[bool]:
    """Which layers are MoE, from every naming of dense prefixes and strides."""
    f = c.f
    if n_experts <= 0:
        return [False] * c.n
    first_dense = f.int("first_k_dense_replace", 0)
    step = f.first_int(("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step"), 1)
    step = max(step, 1)
    mlp_only = set(f.int_list("mlp_only_layers") or [])
    flags = []
    for i in range(c.n):
        moe = i >= first_dense and (i + 1) % step == 0 and i not in mlp_only
        flags.append(moe)
    return flags


def _sliding_by_types(c: _Ctx, types: list[str] | None, window: int | None) -> list[Layer]:
    layers = []
    for i in range(c.n):
        sliding = types is not None and types[i] == "sliding_attention"
        if sliding and window:
            layers.append(Layer(c.attn("rotating", window=window)))
        else:
            layers.append(Layer(c.attn("full")))
    return layers


def _standard(c: _Ctx) -> list[Layer]:
    return [Layer(c.attn("full")) for _ in range(c.n)]


def _llama(c: _Ctx) -> list[Layer]:
    # llama.py / ministral3.py honour layer_types; a bare sliding_window (Mistral 7B) is ignored.
    types = c.f.str_list("layer_types", c.n)
    window = c.f.int("sliding_window", 0) if c.f.has("sliding_window") else None
    if c.f.has("sliding_window") and types is None:
        c.warnings.append(
            "sliding_window without layer_types: mlx-lm's llama.py keeps a full cache on every layer"
        )
    return _sliding_by_types(c, types, window)


def _qwen2(c: _Ctx) -> list[Layer]:
    if c.f.has("sliding_window") and c.f.bool("use_sliding_window", False):
        c.warnings.append("use_sliding_window is set but mlx-lm's qwen2.py always caches in full")
    return _standard(c)


def _pattern(c: _Ctx, default_pattern: int) -> list[Layer]:
    # gemma3 / cohere2: layer i is global when i % pattern == pattern - 1 (mlx-lm make_cache).
    p = c.f.int("sliding_window_pattern", default_pattern, minimum=1)
    window = c.f.int("sliding_window", 4096, minimum=1)
    return [
        Layer(c.attn("full")) if i % p == p - 1 else Layer(c.attn("rotating", window=window))
        for i in range(c.n)
    ]


def _gemma3(c: _Ctx) -> list[Layer]:
    # mlx-lm's gemma3_text reads only sliding_window_pattern (default 6), never layer_types.
    layers = _pattern(c, 6)
    types = c.f.str_list("layer_types", c.n)
    if types is not None:
        ours = ["full_attention" if ly.attn and ly.attn.cache == "full" else "sliding_attention"
                for ly in layers]
        if ours != types:
            c.warnings.append("gemma3: config layer_types disagree with sliding_window_pattern; "
                              "sized as mlx-lm runs it (by the pattern)")
    return layers


def _gemma4(c: _Ctx) -> list[Layer]:
    f = c.f
    types = f.str_list("layer_types", c.n)
    if types is None:
        raise ConfigError(f"{f.where}: gemma4 needs 'layer_types'")
    window = f.int("sliding_window", 512, minimum=1)
    shared = f.int("num_kv_shared_layers", 0)
    global_hd = f.int("global_head_dim", 0) or c.head_dim
    k_eq_v = f.bool("attention_k_eq_v", False)
    global_kv = f.int("num_global_key_value_heads", 0)
    first_shared = c.n - shared
    layers = []
    for i, t in enumerate(types):
        sliding = t == "sliding_attention"
        hd = c.head_dim if sliding else global_hd
        kv = global_kv if (not sliding and k_eq_v and global_kv) else c.kv_heads
        kind = "rotating" if sliding else "full"
        if i >= first_shared:
            kind = "shared"  # reads the last earlier cache of its type; owns no memory
        layers.append(Layer(c.attn(kind, head_dim=hd, kv_heads=kv,
                                   window=window if sliding else None)))
    return layers


def _gemma3n(c: _Ctx) -> list[Layer]:
    f = c.f
    types = f.str_list("layer_types", c.n)
    if types is None:
        raise ConfigError(f"{f.where}: gemma3n needs 'layer_types'")
    window = f.int("sliding_window", 512, minimum=1)
    first_shared = c.n - f.int("num_kv_shared_layers", 0)
    layers = []
    for i, t in enumerate(types):
        sliding = t == "sliding_attention"
        kind = "rotating" if sliding else "full"
        if i >= first_shared:
            kind = "shared"
        layers.append(Layer(c.attn(kind, window=window if sliding else None)))
    return layers


def _gpt_oss(c: _Ctx) -> list[Layer]:
    types = c.f.str_list("layer_types", c.n)
    window = c.f.int("sliding_window", 128, minimum=1)
    if types is None:  # gpt-oss alternates sliding / full, sliding first
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(c.n)]
    return [
        Layer(c.attn("rotating", window=window, sinks=True))
        if t == "sliding_attention"
        else Layer(c.attn("full", sinks=True))
        for t in types
    ]


def _mla(c: _Ctx) -> list[Layer]:
    # deepseek_v3.py caches the normalized latent (kv_lora_rank) as "keys" and the shared rope
    # key (qk_rope_head_dim) as "values": one head, no per-head K/V.
    f = c.f
    m = Mla(
        heads=c.heads,
        qk_nope=f.int("qk_nope_head_dim", 128),
        qk_rope=f.int("qk_rope_head_dim", 64),
        v_head=f.int("v_head_dim", 128),
        kv_lora_rank=f.int("kv_lora_rank", 512),
    )
    a = Attn("full", q_heads=c.heads, kv_heads=1, k_dim=m.kv_lora_rank, v_dim=m.qk_rope,
             head_dim=m.qk_nope, mla=m)
    return [Layer(a) for _ in range(c.n)]


def _mla_with_indexer(c: _Ctx) -> list[Layer]:
    # deepseek_v32.py: CacheList(KVCache(), KVCache()) per layer: the MLA latent + rope key,
    # and the sparse-attention indexer's key stored as both keys and values
    # (update_and_fetch(k, k)). Both grow in the same 256-token steps, so one cache with the
    # summed widths has the same bytes at every step.
    index = c.f.int("index_head_dim", 128)
    return [Layer(replace(ly.attn, k_dim=ly.attn.k_dim + index, v_dim=ly.attn.v_dim + index))
            for ly in _mla(c) if ly.attn is not None]


def _deepseek_v2(c: _Ctx) -> list[Layer]:
    # deepseek_v2.py decompresses before caching: full per-head K (nope+rope) and V.
    f = c.f
    k = f.int("qk_nope_head_dim", 128) + f.int("qk_rope_head_dim", 64)
    v = f.int("v_head_dim", 128)
    return [Layer(c.attn("full", kv_heads=c.heads, k_dim=k, v_dim=v, head_dim=k))
            for _ in range(c.n)]


def _linear_state_bytes(c: _Ctx) -> int:
    f = c.f
    kh = f.int("linear_num_key_heads", 16)
    kd = f.int("linear_key_head_dim", 128)
    vh = f.int("linear_num_value_heads", 32)
    vd = f.int("linear_value_head_dim", 128)
    kernel = f.int("linear_conv_kernel_dim", 4, minimum=1)
    conv = (kernel - 1) * (2 * kh * kd + vh * vd) * c.act_bytes
    recurrent = vh * vd * kd * 4  # gated_delta.py: float32 state (B, Hv, Dv, Dk)
    c.mixer.update(linear_v_heads=vh, linear_k_dim=kd, linear_v_dim=vd)
    return conv + recurrent


def _qwen_linear(c: _Ctx) -> list[Layer]:
    types = c.f.str_list("layer_types", c.n)
    interval = c.f.int("full_attention_interval", 4, minimum=1)
    state = _linear_state_bytes(c)
    layers = []
    for i in range(c.n):
        linear = (types[i] == "linear_attention") if types else (i + 1) % interval != 0
        if linear:
            layers.append(Layer(None, state_bytes=state, state_kind="linear"))
        else:
            layers.append(Layer(c.attn("full")))
    return layers


def _mamba_state(c: _Ctx, heads: int, head_dim: int, d_state: int, groups: int,
                 kernel: int) -> int:
    # Mamba2 mixers (nemotron_h.py, granitemoehybrid.py, falcon_h1.py): conv state
    # (kernel-1) x (inner + 2*groups*d_state) in the activation dtype, SSM state
    # heads x head_dim x d_state in float32.
    inner = heads * head_dim
    conv = (kernel - 1) * (inner + 2 * groups * d_state) * c.act_bytes
    c.mixer.update(ssm_heads=heads, ssm_head_dim=head_dim)
    return conv + heads * head_dim * d_state * 4


# nemotron_h.py ModelArgs: layers_block_type / layer_types names -> pattern characters.
_NEMOTRON_BLOCKS = {"full_attention": "*", "attention": "*", "linear_attention": "M",
                    "mamba": "M", "conv": "M", "moe": "E", "mlp": "-"}


def _nemotron_pattern(f: _Fields) -> list[str]:
    """The block pattern as mlx-lm normalizes it; its length is the layer count."""
    raw = f.d.get("hybrid_override_pattern")
    if raw is None:
        types = f.d.get("layers_block_type") or f.d.get("layer_types")
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise ConfigError(f"{f.where}: nemotron_h needs 'hybrid_override_pattern' or "
                              "'layers_block_type'")
        unknown = sorted(set(types) - _NEMOTRON_BLOCKS.keys())
        if unknown:
            raise ConfigError(f"{f.where}: unknown nemotron_h block types {unknown}")
        return [_NEMOTRON_BLOCKS[t] for t in types]
    if isinstance(raw, str):
        return list(raw)
    if isinstance(raw, list) and all(isinstance(x, str) and len(x) == 1 for x in raw):
        return list(raw)
    raise ConfigError(f"{f.where}: 'hybrid_override_pattern' must be a string of block characters")


def _nemotron_h(c: _Ctx) -> list[Layer]:
    f = c.f
    pattern = _nemotron_pattern(f)
    state = _mamba_state(c, f.int("mamba_num_heads"), f.int("mamba_head_dim"),
                         f.int("ssm_state_size"), f.int("n_groups", 1), f.int("conv_kernel", 4))
    hd = f.int("attention_head_dim", c.head_dim) if f.has("attention_head_dim") else c.head_dim
    layers = []
    for ch in pattern:
        if ch == "M":
            layers.append(Layer(None, state_bytes=state, state_kind="mamba"))
        elif ch == "*":
            layers.append(Layer(c.attn("full", head_dim=hd)))
        elif ch in "-E":
            layers.append(Layer(None, moe=ch == "E"))
        else:
            raise ConfigError(f"{f.where}: unknown block {ch!r} in hybrid_override_pattern")
    return layers


def _granite_hybrid(c: _Ctx) -> list[Layer]:
    f = c.f
    types = f.str_list("layer_types", c.n) or ["attention"] * c.n
    state = _mamba_state(c, f.int("mamba_n_heads", 0), f.int("mamba_d_head", 0),
                         f.int("mamba_d_state", 0), f.int("mamba_n_groups", 1),
                         f.int("mamba_d_conv", 4))
    return [
        Layer(None, state_bytes=state, state_kind="mamba") if t == "mamba"
        else Layer(c.attn("full"))
        for t in types
    ]


def _falcon_h1(c: _Ctx) -> list[Layer]:
    # Every layer holds a CacheList(ArraysCache(2), KVCache()): Mamba state and attention KV.
    f = c.f
    heads = f.int("mamba_n_heads", 24)
    hd = f.int("mamba_d_head", 64)
    state = _mamba_state(c, heads, hd, f.int("mamba_d_state", 128), f.int("mamba_n_groups", 1),
                         f.int("mamba_d_conv", 4))
    return [Layer(c.attn("full"), state_bytes=state, state_kind="mamba") for _ in range(c.n)]


def _jamba(c: _Ctx) -> list[Layer]:
    f = c.f
    period = f.int("attn_layer_period", 8, minimum=1)
    offset = f.int("attn_layer_offset", 4)
    expand = f.int("mamba_expand", 2)
    d_state = f.int("mamba_d_state", 16)
    d_conv = f.int("mamba_d_conv", 4)
    inner = expand * c.hidden
    # Mamba-1 mixer: conv (d_conv-1) x inner, SSM inner x d_state (float32).
    state = (d_conv - 1) * inner * c.act_bytes + inner * d_state * 4
    return [
        Layer(c.attn("full")) if i % period == offset
        else Layer(None, state_bytes=state, state_kind="mamba")
        for i in range(c.n)
    ]


def _lfm2(c: _Ctx) -> list[Layer]:
    f = c.f
    idxs = f.int_list("full_attn_idxs")
    if idxs is None:
        types = f.str_list("layer_types", c.n)
        if types is None:
            raise ConfigError(f"{f.where}: lfm2 needs 'full_attn_idxs' or 'layer_types'")
        idxs = [i for i, t in enumerate(types) if t == "full_attention"]
    # lfm2.py conv layers: ArraysCache(1) holding (L_cache-1) x hidden.
    conv = (f.int("conv_L_cache", 3, minimum=1) - 1) * c.hidden * c.act_bytes
    full = set(idxs)
    return [
        Layer(c.attn("full")) if i in full else Layer(None, state_bytes=conv, state_kind="conv")
        for i in range(c.n)
    ]


def _llama4(c: _Ctx) -> list[Layer]:
    # llama4.py make_cache: ChunkedKVCache(attention_chunk_size) except every 4th layer.
    chunk = c.f.int("attention_chunk_size", 8192, minimum=1)
    return [
        Layer(c.attn("full")) if (i + 1) % 4 == 0 else Layer(c.attn("chunked", window=chunk))
        for i in range(c.n)
    ]


def _mamba(c: _Ctx) -> list[Layer]:
    f = c.f
    if f.has("num_heads") and f.has("head_dim") and f.has("state_size"):  # mamba2
        state = _mamba_state(c, f.int("num_heads"), f.int("head_dim"), f.int("state_size"),
                             f.int("n_groups", 1), f.int("conv_kernel", 4))
    else:
        inner = f.int("intermediate_size", 2 * c.hidden)
        state = (f.int("conv_kernel", 4) - 1) * inner * c.act_bytes + inner * f.int(
            "state_size", 16) * 4
    return [Layer(None, state_bytes=state, state_kind="mamba") for _ in range(c.n)]


@dataclass(frozen=True)
class Family:
    build: Callable[[_Ctx], list[Layer]]
    own_cache: bool  # defines make_cache() (mlx-lm then ignores --max-kv-size)
    scores_always: bool = False
    attention_free: bool = False


# One row per mlx-lm module. own_cache is True exactly where mlx_lm/models/<module>.py defines
# make_cache(). Families whose mixers are standard GQA attention share _standard.
FAMILIES: dict[str, Family] = {
    "llama": Family(_llama, own_cache=True),
    "ministral3": Family(_llama, own_cache=True),
    "qwen2": Family(_qwen2, own_cache=False),
    "qwen3": Family(_standard, own_cache=False),
    "qwen2_moe": Family(_standard, own_cache=False),
    "qwen3_moe": Family(_standard, own_cache=False),
    "mixtral": Family(_standard, own_cache=False),
    "phi3": Family(_standard, own_cache=False),
    "phimoe": Family(_standard, own_cache=False),
    "gemma": Family(_standard, own_cache=False),
    "gemma2": Family(_standard, own_cache=False, scores_always=True),
    "gemma3": Family(_gemma3, own_cache=True),
    "gemma3n": Family(_gemma3n, own_cache=True),
    "gemma4": Family(_gemma4, own_cache=True),
    "cohere2": Family(lambda c: _pattern(c, 4), own_cache=True),
    "gpt_oss": Family(_gpt_oss, own_cache=True),
    "deepseek_v3": Family(_mla, own_cache=False),
    "deepseek_v32": Family(_mla_with_indexer, own_cache=True),
    "deepseek_v2": Family(_deepseek_v2, own_cache=False),
    "glm4_moe_lite": Family(_mla, own_cache=False),
    "qwen3_next": Family(_qwen_linear, own_cache=True),
    "qwen3_5": Family(_qwen_linear, own_cache=True),
    "nemotron_h": Family(_nemotron_h, own_cache=True),
    "granitemoehybrid": Family(_granite_hybrid, own_cache=True),
    "falcon_h1": Family(_falcon_h1, own_cache=True),
    "jamba": Family(_jamba, own_cache=True),
    "lfm2": Family(_lfm2, own_cache=True),
    "llama4": Family(_llama4, own_cache=True),
    "mamba": Family(_mamba, own_cache=True, attention_free=True),
    "mamba2": Family(_mamba, own_cache=True, attention_free=True),
    "olmo2": Family(_standard, own_cache=False),
    "granite": Family(_standard, own_cache=False),
    "granitemoe": Family(_standard, own_cache=False),
    "starcoder2": Family(_standard, own_cache=False),
    "cohere": Family(_standard, own_cache=False),
    "glm4": Family(_standard, own_cache=False),
    "glm4_moe": Family(_standard, own_cache=False),
    "internlm3": Family(_standard, own_cache=False),
    "exaone": Family(_standard, own_cache=False),
    "smollm3": Family(_standard, own_cache=False),
    "seed_oss": Family(_standard, own_cache=False),
    "ernie4_5": Family(_standard, own_cache=False),
    "ernie4_5_moe": Family(_standard, own_cache=False),
    "hunyuan_v1_dense": Family(_standard, own_cache=False),
    "olmoe": Family(_standard, own_cache=False),
    "dots1": Family(_standard, own_cache=False),
}


def _experts(f: _Fields) -> tuple[int, int]:
    n = f.first_int(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 0)
    k = f.first_int(("num_experts_per_tok", "top_k_experts", "moe_k", "num_activated_experts"), 0)
    if n and not k:
        k = 1
    return n, k


def parse_config(config: dict[str, Any], *, act_bytes: int = 2,
                 where: str = "config.json") -> ModelConfig:
    """Build the ModelConfig; ``act_bytes`` is the activation dtype width from the weights."""
    t = text_fields(config)
    f = _Fields(t, where)
    raw_type = t.get("model_type")
    if not isinstance(raw_type, str) or not raw_type:
        raise ConfigError(f"{where}: missing 'model_type'")
    family_name = REMAP.get(raw_type, raw_type)
    family = FAMILIES.get(family_name)
    warnings: list[str] = []
    if family is None:
        needed = ("hidden_size", "num_hidden_layers", "num_attention_heads")
        missing = [k for k in needed if not f.has(k)]
        if missing:
            raise ConfigError(
                f"{where}: unknown model_type {raw_type!r} without standard fields "
                f"({', '.join(missing)} missing); cannot size it"
            )
        warnings.append(
            f"unknown model_type {raw_type!r}: sized as a plain transformer with a full KV cache "
            "on every layer; check mlx-lm supports it"
        )
        family = Family(_standard, own_cache=False)
        family_name = raw_type

    n_layers = f.int("num_hidden_layers", 0 if family_name == "nemotron_h" else None,
                     minimum=0 if family_name == "nemotron_h" else 1)
    if n_layers > 100_000:
        raise ConfigError(f"{where}: num_hidden_layers {n_layers} is implausible")
    # d_model is the Mamba spelling; when both are missing, name the usual one.
    hidden = f.int("d_model" if f.has("d_model") and not f.has("hidden_size") else "hidden_size",
                   minimum=1)
    if family.attention_free:
        heads = kv_heads = head_dim = 0
    else:
        heads = f.first_int(("num_attention_heads", "num_heads", "n_heads"), 0)
        if heads <= 0:
            raise ConfigError(f"{where}: missing 'num_attention_heads'")
        kv_heads = f.int("num_key_value_heads", heads, minimum=1)
        head_dim = f.int("head_dim", 0) or hidden // heads
        if head_dim < 1:  # else every cache would silently size to 0 bytes
            raise ConfigError(f"{where}: hidden_size {hidden} < num_attention_heads {heads} "
                              "and no head_dim: cannot size the attention")
    n_exp, top_k = _experts(f)
    c = _Ctx(f, n_layers, hidden, heads, kv_heads, head_dim, act_bytes, warnings)
    layers = family.build(c)
    n_layers = c.n = len(layers)  # a block pattern may define the depth (nemotron_h)
    if not 1 <= n_layers <= 100_000:  # an empty or 10^6-character block pattern
        raise ConfigError(f"{where}: {n_layers} layers is implausible (expected 1 to 100,000)")
    flags = _moe_layer_flags(c, n_exp)
    layers = [
        Layer(ly.attn, ly.state_bytes, ly.state_kind, moe=ly.moe or flags[i])
        for i, ly in enumerate(layers)
    ]
    shared_n = f.int("n_shared_experts", 0)
    moe_inter = f.first_int(("moe_intermediate_size", "expert_intermediate_size"), 0)
    shared_inter = f.int("shared_expert_intermediate_size", 0) or shared_n * moe_inter
    intermediate = f.first_int(("intermediate_size", "block_ff_dim", "ffn_hidden_size"), 0)
    max_pos = f.int("max_position_embeddings", 0) or None
    tie = f.bool("tie_word_embeddings", bool(config.get("tie_word_embeddings", False)))
    if f.has("tie_embedding"):
        tie = f.bool("tie_embedding", tie)
    return ModelConfig(
        model_type=raw_type,
        family=family_name,
        hidden=hidden,
        num_layers=n_layers,
        vocab=f.int("vocab_size", 0),
        intermediate=intermediate,
        moe_intermediate=moe_inter or (intermediate if n_exp else 0),
        num_experts=n_exp,
        top_k=min(top_k, n_exp) if n_exp else 0,
        shared_intermediate=shared_inter,
        tie_embeddings=tie,
        max_position=max_pos,
        layers=tuple(layers),
        own_cache=family.own_cache,
        scores_always=family.scores_always,
        act_bytes=act_bytes,
        warnings=tuple(warnings),
        ssm_heads=c.mixer.get("ssm_heads", 0),
        ssm_head_dim=c.mixer.get("ssm_head_dim", 0),
        linear_v_heads=c.mixer.get("linear_v_heads", 0),
        linear_k_dim=c.mixer.get("linear_k_dim", 0),
        linear_v_dim=c.mixer.get("linear_v_dim", 0),
        gated_q=family_name in ("qwen3_next", "qwen3_5") or f.bool("attn_output_gate", False),
    )
