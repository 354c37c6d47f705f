"""The mlx-lm families mlxfit sizes: one ``Family`` row per mlx-lm model module, each stating
how mlx-lm's own ``make_cache()`` builds that family's caches (mlx_lm/models/*.py, mlx-lm 0.32),
and which module a config's ``model_type`` loads.

Pure: every builder takes the config's fields (``Ctx``) and returns the per-layer plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.config import Attn, Fields, Layer, Mla

# mlx_lm/utils.py MODEL_REMAPPING, copied from mlx-lm 0.32.2: these model_types load another
# model module. tests/test_families.py fails when the installed mlx-lm (the measure extra's)
# has a different table. (Its MODEL_ARCHITECTURE_REMAPPING, by architectures, is not mirrored.)
MLX_LM_REMAPPING: dict[str, str] = {
    "mistral": "llama",
    "llava": "mistral3",
    "phi-msft": "phixtral",
    "falcon_mamba": "mamba",
    "joyai_llm_flash": "deepseek_v3",
    "kimi_k2": "deepseek_v3",
    "qwen2_5_vl": "qwen2_vl",
    "minimax_m2": "minimax",
    "iquestcoder": "llama",
    "xverse": "llama",
    "gemma4_unified": "gemma4",
    "deepseek_v41_text": "deepseek_v41",
}

# mlxfit's own aliases, not mlx-lm's (it does not remap these): the named family's builder
# sizes them, the same make_cache layout (parse_config reads MoE widths for every family).
# Most have an mlx-lm module of their own (gemma3_text.py, qwen3_5_moe.py, lfm2_moe.py, ...);
# qwen3_5_text and qwen3_5_moe_text are the text_config model_type inside a qwen3_5 wrapper.
FAMILY_ALIASES: dict[str, str] = {
    "gemma3_text": "gemma3",
    "gemma4_text": "gemma4",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "qwen3_5_moe": "qwen3_5",
    "llama4_text": "llama4",
    "lfm2_moe": "lfm2",
}


def mlx_lm_module(model_type: str) -> str:
    """The mlx_lm.models module mlx-lm imports for ``model_type`` (utils._get_classes)."""
    return MLX_LM_REMAPPING.get(model_type, model_type)


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


def _sliding_by_types(c: Ctx, types: list[str] | None, window: int | None) -> list[Layer]:
    layers = []
    for i in range(c.n):
        sliding = types is not None and types[i] == "sliding_attention"
        if sliding and window:
            layers.append(Layer(c.attn("rotating", window=window)))
        else:
            layers.append(Layer(c.attn("full")))
    return layers


def _standard(c: Ctx) -> list[Layer]:
    return [Layer(c.attn("full")) for _ in range(c.n)]


def _llama(c: Ctx) -> list[Layer]:
    # llama.py / ministral3.py honour layer_types; a bare sliding_window (Mistral 7B) is ignored.
    types = c.f.str_list("layer_types", c.n)
    window = c.f.int("sliding_window", 0) if c.f.has("sliding_window") else None
    if c.f.has("sliding_window") and types is None:
        c.warnings.append(
            "sliding_window without layer_types: mlx-lm's llama.py keeps a full cache on every layer"
        )
    return _sliding_by_types(c, types, window)


def _qwen2(c: Ctx) -> list[Layer]:
    if c.f.has("sliding_window") and c.f.bool("use_sliding_window", False):
        c.warnings.append("use_sliding_window is set but mlx-lm's qwen2.py always caches in full")
    return _standard(c)


def _pattern(c: Ctx, default_pattern: int) -> list[Layer]:
    # gemma3 / cohere2: layer i is global when i % pattern == pattern - 1 (mlx-lm make_cache).
    p = c.f.int("sliding_window_pattern", default_pattern, minimum=1)
    window = c.f.int("sliding_window", 4096, minimum=1)
    return [
        Layer(c.attn("full")) if i % p == p - 1 else Layer(c.attn("rotating", window=window))
        for i in range(c.n)
    ]


def _gemma3(c: Ctx) -> list[Layer]:
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


def _gemma4(c: Ctx) -> list[Layer]:
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


def _gemma3n(c: Ctx) -> list[Layer]:
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


def _gpt_oss(c: Ctx) -> list[Layer]:
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


def _mla(c: Ctx) -> list[Layer]:
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


def _mla_with_indexer(c: Ctx) -> list[Layer]:
    # deepseek_v32.py: CacheList(KVCache(), KVCache()) per layer: the MLA latent + rope key,
    # and the sparse-attention indexer's key stored as both keys and values
    # (update_and_fetch(k, k)). Both grow in the same 256-token steps, so one cache with the
    # summed widths has the same bytes at every step.
    index = c.f.int("index_head_dim", 128)
    return [Layer(replace(ly.attn, k_dim=ly.attn.k_dim + index, v_dim=ly.attn.v_dim + index))
            for ly in _mla(c) if ly.attn is not None]


def _deepseek_v2(c: Ctx) -> list[Layer]:
    # deepseek_v2.py decompresses before caching: full per-head K (nope+rope) and V.
    f = c.f
    k = f.int("qk_nope_head_dim", 128) + f.int("qk_rope_head_dim", 64)
    v = f.int("v_head_dim", 128)
    return [Layer(c.attn("full", kv_heads=c.heads, k_dim=k, v_dim=v, head_dim=k))
            for _ in range(c.n)]


def _linear_state_bytes(c: Ctx) -> int:
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


def _qwen_linear(c: Ctx) -> list[Layer]:
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


def _mamba_state(c: Ctx, heads: int, head_dim: int, d_state: int, groups: int,
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


def _nemotron_pattern(f: Fields) -> list[str]:
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


def _nemotron_h(c: Ctx) -> list[Layer]:
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


def _granite_hybrid(c: Ctx) -> list[Layer]:
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


def _falcon_h1(c: Ctx) -> list[Layer]:
    # Every layer holds a CacheList(ArraysCache(2), KVCache()): Mamba state and attention KV.
    f = c.f
    heads = f.int("mamba_n_heads", 24)
    hd = f.int("mamba_d_head", 64)
    state = _mamba_state(c, heads, hd, f.int("mamba_d_state", 128), f.int("mamba_n_groups", 1),
                         f.int("mamba_d_conv", 4))
    return [Layer(c.attn("full"), state_bytes=state, state_kind="mamba") for _ in range(c.n)]


def _jamba(c: Ctx) -> list[Layer]:
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


def _lfm2(c: Ctx) -> list[Layer]:
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


def _llama4(c: Ctx) -> list[Layer]:
    # llama4.py make_cache: ChunkedKVCache(attention_chunk_size) except every 4th layer.
    chunk = c.f.int("attention_chunk_size", 8192, minimum=1)
    return [
        Layer(c.attn("full")) if (i + 1) % 4 == 0 else Layer(c.attn("chunked", window=chunk))
        for i in range(c.n)
    ]


def _mamba(c: Ctx) -> list[Layer]:
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
    build: Callable[[Ctx], list[Layer]]
    own_cache: bool  # defines make_cache() (mlx-lm then ignores --max-kv-size)
    scores_always: bool = False
    attention_free: bool = False
    gated_q: bool = False  # q_proj also produces the attention output gate (always)
    # The block pattern defines the depth: num_hidden_layers may be absent (nemotron_h.py).
    depth_from_pattern: bool = False
    # head_dim when the config omits it, where mlx-lm's ModelArgs has its own default rather
    # than hidden_size // heads (gemma3_text, gemma4_text: 256; cohere2: 128; gpt_oss,
    # falcon_h1: 64). Gemma 3 12B's config has no head_dim, and 3840 // 16 = 240 sized its KV
    # cache 6% small: found by the tensor cross-check (model.crosscheck).
    head_dim_default: int | None = None


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
    "gemma3": Family(_gemma3, own_cache=True, head_dim_default=256),
    "gemma3n": Family(_gemma3n, own_cache=True),
    "gemma4": Family(_gemma4, own_cache=True, head_dim_default=256),
    "cohere2": Family(lambda c: _pattern(c, 4), own_cache=True, head_dim_default=128),
    "gpt_oss": Family(_gpt_oss, own_cache=True, head_dim_default=64),
    "deepseek_v3": Family(_mla, own_cache=False),
    "deepseek_v32": Family(_mla_with_indexer, own_cache=True),
    "deepseek_v2": Family(_deepseek_v2, own_cache=False),
    "glm4_moe_lite": Family(_mla, own_cache=False),
    "qwen3_next": Family(_qwen_linear, own_cache=True, gated_q=True),
    "qwen3_5": Family(_qwen_linear, own_cache=True, gated_q=True),
    "nemotron_h": Family(_nemotron_h, own_cache=True, depth_from_pattern=True),
    "granitemoehybrid": Family(_granite_hybrid, own_cache=True),
    "falcon_h1": Family(_falcon_h1, own_cache=True, head_dim_default=64),
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

# An unknown model_type with the standard fields: a plain transformer, full KV on every layer.
GENERIC = Family(_standard, own_cache=False)


def resolve_family(model_type: str) -> tuple[str, Family | None]:
    """The family that sizes ``model_type`` and its row: mlxfit's alias, else the module mlx-lm
    loads; (model_type, None) when mlxfit has no row for it."""
    name = FAMILY_ALIASES.get(model_type) or mlx_lm_module(model_type)
    family = FAMILIES.get(name)
    return (name, family) if family is not None else (model_type, None)
