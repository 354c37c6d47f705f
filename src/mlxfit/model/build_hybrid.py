"""Hybrid and recurrent families (mlx-lm 0.32): linear-attention, Mamba / SSM, RWKV and conv
layers hold a constant ArraysCache state beside (or instead of) attention layers' KV caches.
Each builder also records the mixer's widths (``Ctx.mixer``) for the prefill transient."""

from __future__ import annotations

from mlxfit.errors import ConfigError
from mlxfit.model.build_ctx import Ctx, layer_types, sub_fields
from mlxfit.model.build_mla import mla
from mlxfit.model.caches import CONV_STATE, LINEAR_STATE, MAMBA_STATE, Full, Rotating
from mlxfit.model.config import Fields, Layer


def linear_state_bytes(c: Ctx) -> int:
    f = c.f
    kh = f.int("linear_num_key_heads", 16)
    kd = f.int("linear_key_head_dim", 128)
    vh = f.int("linear_num_value_heads", 32)
    vd = f.int("linear_value_head_dim", 128)
    kernel = f.int("linear_conv_kernel_dim", 4, minimum=1)
    conv = (kernel - 1) * (2 * kh * kd + vh * vd) * c.act_bytes
    recurrent = vh * vd * kd * 4  # gated_delta.py: float32 state (B, Hv, Dv, Dk)
    c.mixer.update(linear_scan="gated_delta", linear_v_heads=vh, linear_k_heads=kh,
                   linear_k_dim=kd, linear_v_dim=vd, linear_state_bytes=4)
    return conv + recurrent


def qwen_linear(c: Ctx) -> list[Layer]:
    types = c.f.str_list("layer_types", c.n)
    interval = c.f.int("full_attention_interval", 4, minimum=1)
    state = linear_state_bytes(c)
    layers = []
    for i in range(c.n):
        linear = (types[i] == "linear_attention") if types else (i + 1) % interval != 0
        if linear:
            layers.append(Layer(None, state_bytes=state, state_kind=LINEAR_STATE))
        else:
            layers.append(Layer(c.attn(Full())))
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
            layers.append(Layer(None, state_bytes=state, state_kind=MAMBA_STATE))
        elif ch == "*":
            layers.append(Layer(c.attn(Full(), head_dim=hd)))
        elif ch in "-E":
            layers.append(Layer(None, moe=ch == "E"))
        else:
            raise ConfigError(f"{f.where}: unknown block {ch!r} in hybrid_override_pattern")
    return layers


def granite_hybrid(c: Ctx) -> list[Layer]:
    f = c.f
    types = f.str_list("layer_types", c.n) or ["attention"] * c.n
    # The Mamba widths default to None in ModelArgs and granitemoehybrid.py multiplies them
    # when building a "mamba" layer: a config with such a layer and without one fails in
    # mlx-lm, so each is required then (the refusal names it).
    state = 0
    if "mamba" in types:
        state = mamba_state(c, f.int("mamba_n_heads"), f.int("mamba_d_head"),
                            f.int("mamba_d_state"), f.int("mamba_n_groups"),
                            f.int("mamba_d_conv"))
    return [
        Layer(None, state_bytes=state, state_kind=MAMBA_STATE) if t == "mamba"
        else Layer(c.attn(Full()))
        for t in types
    ]


def falcon_h1(c: Ctx) -> list[Layer]:
    # Every layer holds a CacheList(ArraysCache(2), KVCache()): Mamba state and attention KV.
    f = c.f
    heads = f.int("mamba_n_heads", 24)
    hd = f.int("mamba_d_head", 64)
    state = mamba_state(c, heads, hd, f.int("mamba_d_state", 128), f.int("mamba_n_groups", 1),
                         f.int("mamba_d_conv", 4))
    return [Layer(c.attn(Full()), state_bytes=state, state_kind=MAMBA_STATE) for _ in range(c.n)]


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
        Layer(c.attn(Full())) if i % period == offset
        else Layer(None, state_bytes=state, state_kind=MAMBA_STATE)
        for i in range(c.n)
    ]


def lfm2(c: Ctx) -> list[Layer]:
    f = c.f
    idxs = f.int_list("full_attn_idxs")
    if idxs is None:
        # ModelArgs.__post_init__: the indices of "full_attention" in layer_types, whatever
        # its length; num_hidden_layers alone is the depth (lfm2-vl-11-1: 4 types, 8 layers)
        types = f.str_list("layer_types", None)
        if types is None:
            raise ConfigError(f"{f.where}: lfm2 needs 'full_attn_idxs' or 'layer_types'")
        idxs = [i for i, t in enumerate(types) if t == "full_attention"]
    # lfm2.py conv layers: ArraysCache(1) holding (L_cache-1) x hidden.
    conv = (f.int("conv_L_cache", 3, minimum=1) - 1) * c.hidden * c.act_bytes
    full = set(idxs)
    return [
        Layer(c.attn(Full())) if i in full else Layer(None, state_bytes=conv, state_kind=CONV_STATE)
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
    return [Layer(None, state_bytes=state, state_kind=MAMBA_STATE) for _ in range(c.n)]


def _kda_state(c: Ctx, cfg: Fields) -> int:
    # kimi_linear.py KDA: q, k, v short convs (kernel-1) x heads*head_dim in the activation
    # dtype (kimi_k3 fuses them into one of 3x the width: the same bytes), and the float32
    # gated-delta state heads x head_dim x head_dim.
    heads = cfg.int("num_heads", c.heads, minimum=1)
    hd = cfg.int("head_dim", c.head_dim, minimum=1)
    kernel = cfg.int("short_conv_kernel_size", 4, minimum=1)
    c.mixer.update(linear_scan="gated_delta", linear_v_heads=heads, linear_k_heads=heads,
                   linear_k_dim=hd, linear_v_dim=hd, linear_state_bytes=4)
    return (kernel - 1) * 3 * heads * hd * c.act_bytes + heads * hd * hd * 4


def kimi_linear(c: Ctx) -> list[Layer]:
    # kimi_linear.py make_cache: ArraysCache(4) for layers listed (1-based) in
    # linear_attn_config.kda_layers, KVCache holding the MLA latent for the rest.
    cfg = sub_fields(c, "linear_attn_config")
    kda = set(cfg.int_list("kda_layers") or [])
    state = _kda_state(c, cfg)
    latent = mla(c, rope=0, nope=c.head_dim, v_head=c.head_dim)
    return [Layer(None, state_bytes=state, state_kind=LINEAR_STATE) if i + 1 in kda
            else latent[i] for i in range(c.n)]


def kimi_k3(c: Ctx) -> list[Layer]:
    """kimi_k3.py: kimi_linear's caches, but its TextArgs leave the MLA widths and the expert
    width at None and its layers read them as they are built: a config that lacks one a layer
    needs cannot be built by mlx-lm (KimiK3MLAAttention on the layers not in kda_layers,
    KimiK3SparseMoE on layers >= first_k_dense_replace and a multiple of moe_layer_freq when
    num_experts > 0)."""
    f = c.f
    kda = set(sub_fields(c, "linear_attn_config").int_list("kda_layers") or [])
    needs: list[str] = []
    if any(i + 1 not in kda for i in range(c.n)):
        needs += ["kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]
    first, freq = f.int("first_k_dense_replace", 0), f.int("moe_layer_freq", 1, minimum=1)
    if f.int("num_experts", 0) > 0 and any(i >= first and i % freq == 0 for i in range(c.n)):
        needs.append("moe_intermediate_size")
    missing = [k for k in needs if not f.has(k)]
    if missing:
        raise ConfigError(f"{f.where}: missing required field '{missing[0]}' (kimi_k3 builds "
                          "its MLA and expert layers from it)", file=f.where, field=missing[0])
    return kimi_linear(c)


def _global_every(c: Ctx, group_key: str = "layer_group_size") -> list[bool]:
    # bailing_hybrid.py / bailing_moe_linear.py: layer i is global softmax attention when
    # (i+1) % group == 0 or it is past the last whole group.
    g = c.f.int(group_key, minimum=1)
    return [bailing_global(i, g, c.n) for i in range(c.n)]


def bailing_global(i: int, group: int, n_layers: int) -> bool:
    """Layer ``i`` of a Bailing hybrid is global (softmax / MLA) attention: the last of each
    group of ``group`` layers, and every layer past the last whole group."""
    return (i + 1) % group == 0 or i >= (n_layers // group) * group


def bailing_hybrid(c: Ctx) -> list[Layer]:
    # Linear layers: ArraysCache(1) with a float32 heads x head_dim x head_dim state; global
    # layers: MLA latent (kv_lora_rank) + rope key.
    state = c.heads * c.head_dim * c.head_dim * 4
    latent = mla(c)
    return [latent[i] if g else Layer(None, state_bytes=state, state_kind=LINEAR_STATE)
            for i, g in enumerate(_global_every(c))]


def bailing_moe_linear(c: Ctx) -> list[Layer]:
    # Linear layers: ArraysCache(1), heads x head_dim x head_dim in the activation dtype, the
    # state of recurrent_gla (a per-token op loop on every backend: no kernel). Their head_dim
    # is hidden // heads whatever the config's head_dim (bailing_moe_linear.py
    # LinearAttention); only the full-attention layers read head_dim.
    hd = c.hidden // c.heads
    state = c.heads * hd * hd * c.act_bytes
    c.mixer.update(linear_scan="gla", linear_v_heads=c.heads, linear_k_dim=hd,
                   linear_v_dim=hd, linear_state_bytes=c.act_bytes)
    return [Layer(c.attn(Full())) if g else Layer(None, state_bytes=state, state_kind=LINEAR_STATE)
            for g in _global_every(c)]


def bailing_moe_v3(c: Ctx) -> list[Layer]:
    # bailing_moe_v3.py: KDA layers (not global, the bailing grouping) hold ArraysCache(4) as
    # kimi_linear's (heads x head_dim wide, short_conv_kernel_size); the rest the MLA latent.
    state = _kda_state(c, Fields({"num_heads": c.heads, "head_dim": c.head_dim,
                                  "short_conv_kernel_size": c.f.int("short_conv_kernel_size",
                                                                    4)}, c.f.where))
    latent = mla(c)
    return [latent[i] if g else Layer(None, state_bytes=state, state_kind=LINEAR_STATE)
            for i, g in enumerate(_global_every(c))]


def olmo_hybrid(c: Ctx) -> list[Layer]:
    # olmo_hybrid.py: ArraysCache(4) (three convs + gated-delta state) on "linear_attention"
    # layers, as Qwen3-Next's layers; KVCache on the rest.
    # ModelArgs.__post_init__ without layer_types: full attention where i % 4 == 3.
    types = layer_types(c, ["full_attention" if i % 4 == 3 else "linear_attention"
                            for i in range(c.n)])
    state = linear_state_bytes(c)
    return [Layer(None, state_bytes=state, state_kind=LINEAR_STATE) if t == "linear_attention"
            else Layer(c.attn(Full())) for t in types]


def recurrent_gemma(c: Ctx) -> list[Layer]:
    # recurrent_gemma.py: block_types cycle; recurrent blocks hold ArraysCache(2): conv
    # (conv1d_width-1) x lru_width and the LRU state lru_width, both activation dtype;
    # attention blocks a RotatingKVCache(attention_window_size) with one KV head (MQA).
    f = c.f
    types = f.d.get("block_types") or f.d.get("_block_types")
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{f.where}: recurrent_gemma needs 'block_types' (a list of strings)")
    # The model builds every block with lru_width = hidden and ResidualBlock's default
    # temporal conv width 4: the config's lru_width and conv1d_width are not passed on.
    lru = c.hidden
    state = (3 * lru + lru) * c.act_bytes
    c.mixer.update(lru_width=lru)
    window = f.int("attention_window_size", 2048, minimum=1)
    hd = c.hidden // c.heads
    return [Layer(c.attn(Rotating(window), kv_heads=1, head_dim=hd))
            if types[i % len(types)] == "attention"
            else Layer(None, state_bytes=state, state_kind=CONV_STATE) for i in range(c.n)]


def plamo2(c: Ctx) -> list[Layer]:
    # plamo2.py is_mamba(): Mamba layers hold conv (d_conv-1) x heads*head_dim and a float32
    # SSM state heads x head_dim x d_state; attention layers a KVCache.
    f = c.f
    hd = f.int("hidden_size_per_head", 128)
    heads = f.int("mamba_num_heads", 64)
    conv = (f.int("mamba_d_conv", 4) - 1) * heads * hd * c.act_bytes
    state = conv + heads * hd * f.int("mamba_d_state", 64) * 4
    c.mixer.update(ssm_heads=heads, ssm_head_dim=hd)
    step = f.int("mamba_step", 2, minimum=2)
    enabled = f.bool("mamba_enabled", True)

    def mamba(i: int) -> bool:
        if not enabled:
            return False
        if c.n <= step // 2:
            return i != c.n - 1
        return i % step != step // 2

    return [Layer(None, state_bytes=state, state_kind=MAMBA_STATE) if mamba(i)
            else Layer(c.attn(Full(), head_dim=hd)) for i in range(c.n)]


def baichuan_m1(c: Ctx) -> list[Layer]:
    # baichuan_m1.py: CacheList(ArraysCache(2), KVCache or RotatingKVCache(sliding_window) on
    # sliding_window_layers); the ArraysCache holds the key and value convs, each
    # kv_heads x (conv_window-1) x head_dim.
    f = c.f
    swa = set(f.int_list("sliding_window_layers") or [])
    window = f.int("sliding_window", 4096, minimum=1)
    conv = f.int("conv_window", 2, minimum=1) - 1
    layers = []
    for i in range(c.n):
        if i in swa:
            kv = f.int("num_swa_key_value_heads", c.kv_heads) or c.kv_heads
            a = c.attn(Rotating(window), kv_heads=kv)
        else:
            kv = c.kv_heads
            a = c.attn(Full())
        layers.append(Layer(a, state_bytes=2 * kv * conv * c.head_dim * c.act_bytes,
                            state_kind=CONV_STATE))
    return layers


def rwkv7(c: Ctx) -> list[Layer]:
    # rwkv7.py: ArraysCache(3): two token-shift rows of hidden and the WKV state
    # heads x head_dim x head_dim, all in the activation dtype.
    hd = c.f.int("head_dim", 64, minimum=1)
    heads = c.hidden // hd
    state = (2 * c.hidden + heads * hd * hd) * c.act_bytes
    # The WKV recurrence: a Metal kernel, else (CPU) a per-token op loop on that state.
    c.mixer.update(linear_scan="wkv7", linear_v_heads=heads, linear_k_dim=hd, linear_v_dim=hd,
                   linear_state_bytes=c.act_bytes)
    return [Layer(None, state_bytes=state, state_kind=LINEAR_STATE) for _ in range(c.n)]


def gear(c: Ctx) -> list[Layer]:
    # gear.py make_cache: RotatingKVCache(sliding_window) on "sliding_attention", KVCache on
    # "full_attention", and on "conv_mixer" layers an ArraysCache(2): the key and value
    # convs, each (conv_L_cache-1) x kv_heads*head_dim.
    types = layer_types(c)
    if types is None:
        raise ConfigError(f"{c.f.where}: gear needs 'layer_types'")
    window = c.f.int("sliding_window", 4096, minimum=1)
    conv = 2 * (c.f.int("conv_L_cache", 3, minimum=1) - 1) * c.kv_heads * c.head_dim * c.act_bytes
    layers = []
    for t in types:
        if t == "sliding_attention":
            layers.append(Layer(c.attn(Rotating(window))))
        elif t == "full_attention":
            layers.append(Layer(c.attn(Full())))
        else:
            layers.append(Layer(None, state_bytes=conv, state_kind=CONV_STATE))
    return layers
