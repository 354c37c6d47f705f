"""How mlx-lm's ``make_cache()`` builds each family's caches: the builders the family table
(``mlxfit.model.families``) names, one function per cache layout (mlx_lm/models/*.py,
mlx-lm 0.32). Pure: every builder takes the config's fields (``Ctx``) and returns the
per-layer plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.config import Attn, Fields, Layer, Mla


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


def sliding_by_types(c: Ctx, types: list[str] | None, window: int | None) -> list[Layer]:
    layers = []
    for i in range(c.n):
        sliding = types is not None and types[i] == "sliding_attention"
        if sliding and window:
            layers.append(Layer(c.attn("rotating", window=window)))
        else:
            layers.append(Layer(c.attn("full")))
    return layers


def standard(c: Ctx) -> list[Layer]:
    return [Layer(c.attn("full")) for _ in range(c.n)]


def llama(c: Ctx) -> list[Layer]:
    # llama.py / ministral3.py honour layer_types; a bare sliding_window (Mistral 7B) is ignored.
    types = c.f.str_list("layer_types", c.n)
    window = c.f.int("sliding_window", 0) if c.f.has("sliding_window") else None
    if c.f.has("sliding_window") and types is None:
        c.warnings.append(
            "sliding_window without layer_types: mlx-lm's llama.py keeps a full cache on every layer"
        )
    return sliding_by_types(c, types, window)


def qwen2(c: Ctx) -> list[Layer]:
    if c.f.has("sliding_window") and c.f.bool("use_sliding_window", False):
        c.warnings.append("use_sliding_window is set but mlx-lm's qwen2.py always caches in full")
    return standard(c)


def pattern(c: Ctx, default_pattern: int) -> list[Layer]:
    # gemma3 / cohere2: layer i is global when i % pattern == pattern - 1 (mlx-lm make_cache).
    p = c.f.int("sliding_window_pattern", default_pattern, minimum=1)
    window = c.f.int("sliding_window", 4096, minimum=1)
    return [
        Layer(c.attn("full")) if i % p == p - 1 else Layer(c.attn("rotating", window=window))
        for i in range(c.n)
    ]


def gemma3(c: Ctx) -> list[Layer]:
    # mlx-lm's gemma3_text reads only sliding_window_pattern (default 6), never layer_types.
    layers = pattern(c, 6)
    types = c.f.str_list("layer_types", c.n)
    if types is not None:
        ours = ["full_attention" if ly.attn and ly.attn.cache == "full" else "sliding_attention"
                for ly in layers]
        if ours != types:
            c.warnings.append("gemma3: config layer_types disagree with sliding_window_pattern; "
                              "sized as mlx-lm runs it (by the pattern)")
    return layers


def gemma4(c: Ctx) -> list[Layer]:
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


def gemma3n(c: Ctx) -> list[Layer]:
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


def gpt_oss(c: Ctx) -> list[Layer]:
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


def mla(c: Ctx) -> list[Layer]:
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


def mla_with_indexer(c: Ctx) -> list[Layer]:
    # deepseek_v32.py: CacheList(KVCache(), KVCache()) per layer: the MLA latent + rope key,
    # and the sparse-attention indexer's key stored as both keys and values
    # (update_and_fetch(k, k)). Both grow in the same 256-token steps, so one cache with the
    # summed widths has the same bytes at every step.
    index = c.f.int("index_head_dim", 128)
    return [Layer(replace(ly.attn, k_dim=ly.attn.k_dim + index, v_dim=ly.attn.v_dim + index))
            for ly in mla(c) if ly.attn is not None]


def deepseek_v2(c: Ctx) -> list[Layer]:
    # deepseek_v2.py decompresses before caching: full per-head K (nope+rope) and V.
    f = c.f
    k = f.int("qk_nope_head_dim", 128) + f.int("qk_rope_head_dim", 64)
    v = f.int("v_head_dim", 128)
    return [Layer(c.attn("full", kv_heads=c.heads, k_dim=k, v_dim=v, head_dim=k))
            for _ in range(c.n)]


def linear_state_bytes(c: Ctx) -> int:
    f = c.f
    kh = f.int("linear_num_key_heads", 16)
    kd = f.int("linear_key_head_dim", 128)
    vh = f.int("linear_num_value_heads", 32)
    vd = f.int("linear_value_head_dim", 128)
    kernel = f.int("linear_conv_kernel_dim", 4, minimum=1)
    conv = (kernel - 1) * (2 * kh * kd + vh * vd) * c.act_bytes
    recurrent = vh * vd * kd * 4  # gated_delta.py: float32 state (B, Hv, Dv, Dk)
    c.mixer.update(linear_scan="gated_delta", linear_v_heads=vh, linear_k_dim=kd,
                   linear_v_dim=vd, linear_state_bytes=4)
    return conv + recurrent


def qwen_linear(c: Ctx) -> list[Layer]:
    types = c.f.str_list("layer_types", c.n)
    interval = c.f.int("full_attention_interval", 4, minimum=1)
    state = linear_state_bytes(c)
    layers = []
    for i in range(c.n):
        linear = (types[i] == "linear_attention") if types else (i + 1) % interval != 0
        if linear:
            layers.append(Layer(None, state_bytes=state, state_kind="linear"))
        else:
            layers.append(Layer(c.attn("full")))
    return layers


def mamba_state(c: Ctx, heads: int, head_dim: int, d_state: int, groups: int,
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


def nemotron_pattern(f: Fields) -> list[str]:
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


def nemotron_h(c: Ctx) -> list[Layer]:
    f = c.f
    pattern = nemotron_pattern(f)
    state = mamba_state(c, f.int("mamba_num_heads"), f.int("mamba_head_dim"),
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


def granite_hybrid(c: Ctx) -> list[Layer]:
    f = c.f
    types = f.str_list("layer_types", c.n) or ["attention"] * c.n
    state = mamba_state(c, f.int("mamba_n_heads", 0), f.int("mamba_d_head", 0),
                         f.int("mamba_d_state", 0), f.int("mamba_n_groups", 1),
                         f.int("mamba_d_conv", 4))
    return [
        Layer(None, state_bytes=state, state_kind="mamba") if t == "mamba"
        else Layer(c.attn("full"))
        for t in types
    ]


def falcon_h1(c: Ctx) -> list[Layer]:
    # Every layer holds a CacheList(ArraysCache(2), KVCache()): Mamba state and attention KV.
    f = c.f
    heads = f.int("mamba_n_heads", 24)
    hd = f.int("mamba_d_head", 64)
    state = mamba_state(c, heads, hd, f.int("mamba_d_state", 128), f.int("mamba_n_groups", 1),
                         f.int("mamba_d_conv", 4))
    return [Layer(c.attn("full"), state_bytes=state, state_kind="mamba") for _ in range(c.n)]


def jamba(c: Ctx) -> list[Layer]:
    f = c.f
    period = f.int("attn_layer_period", 8, minimum=1)
    offset = f.int("attn_layer_offset", 4)
    expand = f.int("mamba_expand", 2)
    d_state = f.int("mamba_d_state", 16)
    d_conv = f.int("mamba_d_conv", 4)
    inner = expand * c.hidden
    # Mamba-1 mixer: conv (d_conv-1) x inner and SSM inner x d_state, both in the activation
    # dtype (jamba.py keeps the state in the dtype of its inputs, checked by the oracle).
    state = (d_conv - 1) * inner * c.act_bytes + inner * d_state * c.act_bytes
    return [
        Layer(c.attn("full")) if i % period == offset
        else Layer(None, state_bytes=state, state_kind="mamba")
        for i in range(c.n)
    ]


def lfm2(c: Ctx) -> list[Layer]:
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


def llama4(c: Ctx) -> list[Layer]:
    # llama4.py make_cache: ChunkedKVCache(attention_chunk_size) except every 4th layer.
    chunk = c.f.int("attention_chunk_size", 8192, minimum=1)
    return [
        Layer(c.attn("full")) if (i + 1) % 4 == 0 else Layer(c.attn("chunked", window=chunk))
        for i in range(c.n)
    ]


def mamba(c: Ctx) -> list[Layer]:
    f = c.f
    if f.has("num_heads") and f.has("head_dim") and f.has("state_size"):  # mamba2
        state = mamba_state(c, f.int("num_heads"), f.int("head_dim"), f.int("state_size"),
                             f.int("n_groups", 1), f.int("conv_kernel", 4))
    else:
        inner = f.int("intermediate_size", 2 * c.hidden)
        # mamba.py (Mamba-1): conv and SSM state both in the activation dtype.
        state = (f.int("conv_kernel", 4) - 1) * inner * c.act_bytes + inner * f.int(
            "state_size", 16) * c.act_bytes
    return [Layer(None, state_bytes=state, state_kind="mamba") for _ in range(c.n)]


def cohere2(c: Ctx) -> list[Layer]:
    return pattern(c, 4)
