"""Cache-plan builders of the mlx-lm families added with the oracle check (issue 12): sliding
windows by layer type, MLA variants, linear-attention and recurrent hybrids, and the families
whose configs name their fields their own way (``prepare`` hooks that map them to the standard
names before ``parse_config`` reads them). Each builder states the mlx-lm 0.32.2 module it
models; tests/test_oracle_families.py checks every one against mlx-lm's own caches.
"""

from __future__ import annotations

from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.builders import Ctx, linear_state_bytes, mla
from mlxfit.model.config import Attn, Compress, Fields, Layer, SparseIndex


def _sub(c: Ctx, key: str, required: bool = True) -> Fields:
    """Typed reads of a nested object of the config (linear_attn_config, ...)."""
    d = c.f.d.get(key)
    if d is None and not required:
        return Fields({}, f"{c.f.where}: {key}")
    if not isinstance(d, dict):
        raise ConfigError(f"{c.f.where}: '{key}' must be an object")
    return Fields(d, f"{c.f.where}: {key}")


def _types_of(c: Ctx, key: str) -> list[str] | None:
    return c.f.str_list(key, c.n)


def _types(c: Ctx, default: list[str] | None = None) -> list[str] | None:
    return c.f.str_list("layer_types", c.n) or default


def by_layer_types(c: Ctx) -> list[Layer]:
    """olmo3 / mellum / exaone_moe / laguna / afmoe / gpt-style hybrids: make_cache gives a
    RotatingKVCache(sliding_window) to every "sliding_attention" layer, KVCache to the rest."""
    types = _types(c) or ["full_attention"] * c.n
    window = c.f.int("sliding_window", 4096, minimum=1)
    return [Layer(c.attn("rotating", window=window)) if t == "sliding_attention"
            else Layer(c.attn("full")) for t in types]


def olmo3(c: Ctx) -> list[Layer]:
    # olmo3.py ModelArgs: without layer_types, every 4th layer full, the rest sliding.
    if c.f.has("layer_types"):
        return by_layer_types(c)
    window = c.f.int("sliding_window", minimum=1)
    return [Layer(c.attn("full")) if (i + 1) % 4 == 0
            else Layer(c.attn("rotating", window=window)) for i in range(c.n)]


def gear(c: Ctx) -> list[Layer]:
    # gear.py make_cache: RotatingKVCache(sliding_window) on "sliding_attention", KVCache on
    # "full_attention", and on "conv_mixer" layers an ArraysCache(2): the key and value
    # convs, each (conv_L_cache-1) x kv_heads*head_dim.
    types = _types(c)
    if types is None:
        raise ConfigError(f"{c.f.where}: gear needs 'layer_types'")
    window = c.f.int("sliding_window", 4096, minimum=1)
    conv = 2 * (c.f.int("conv_L_cache", 3, minimum=1) - 1) * c.kv_heads * c.head_dim * c.act_bytes
    layers = []
    for t in types:
        if t == "sliding_attention":
            layers.append(Layer(c.attn("rotating", window=window)))
        elif t == "full_attention":
            layers.append(Layer(c.attn("full")))
        else:
            layers.append(Layer(None, state_bytes=conv, state_kind="conv"))
    return layers


def spark2_5(c: Ctx) -> list[Layer]:
    # spark2_5.py ModelArgs: without layer_types, three sliding layers then one full.
    if c.f.has("layer_types"):
        return by_layer_types(c)
    window = c.f.int("sliding_window", minimum=1)
    return [Layer(c.attn("full")) if i % 4 == 3 else Layer(c.attn("rotating", window=window))
            for i in range(c.n)]


def exaone4(c: Ctx) -> list[Layer]:
    # exaone4.py: layer i is local (RotatingKVCache) when pattern[i % len] == "L"; no pattern:
    # every layer global.
    pattern = c.f.d.get("sliding_window_pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise ConfigError(f"{c.f.where}: 'sliding_window_pattern' must be a string like 'LLLG'")
    window = c.f.int("sliding_window", 4096, minimum=1) if pattern else 0
    return [Layer(c.attn("rotating", window=window))
            if pattern and pattern[i % len(pattern)] == "L" else Layer(c.attn("full"))
            for i in range(c.n)]


def step3p5(c: Ctx) -> list[Layer]:
    # step3p5.py: layer_types, else even layers slide; KV heads are num_attention_groups, the
    # sliding layers' from attention_other_setting.
    f = c.f
    types = _types(c) or ["sliding_attention" if i % 2 == 0 else "full_attention"
                          for i in range(c.n)]
    kv = f.int("num_attention_groups", c.kv_heads)
    other = _sub(c, "attention_other_setting", required=False)
    swa_kv = other.int("num_attention_groups", kv, minimum=1)
    swa_q = other.int("num_attention_heads", c.heads, minimum=1)
    window = f.int("sliding_window", 4096, minimum=1)
    return [Layer(c.attn("rotating", window=window, kv_heads=swa_kv, q_heads=swa_q))
            if t == "sliding_attention" else Layer(c.attn("full", kv_heads=kv))
            for t in types]


def mimo_v2_flash(c: Ctx) -> list[Layer]:
    # mimo_v2_flash.py: hybrid_layer_pattern 1 = sliding (RotatingKVCache(sliding_window_size))
    # with the swa_* widths; keys head_dim wide, values v_head_dim.
    f = c.f
    pattern = f.int_list("hybrid_layer_pattern") or [0] * c.n
    full = c.attn("full", k_dim=c.head_dim, v_dim=f.int("v_head_dim", c.head_dim))
    swa_hd = f.int("swa_head_dim", c.head_dim)
    swa = c.attn("rotating", window=f.int("sliding_window_size", 4096, minimum=1),
                 q_heads=f.int("swa_num_attention_heads", c.heads),
                 kv_heads=f.int("swa_num_key_value_heads", c.kv_heads), head_dim=swa_hd,
                 k_dim=swa_hd, v_dim=f.int("swa_v_head_dim", swa_hd))
    return [Layer(swa if p == 1 else full) for p in pattern[:c.n]]


def iquestloopcoder(c: Ctx) -> list[Layer]:
    # iquestloopcoder.py make_cache: a KVCache per layer, then a RotatingKVCache
    # (loop_window_size) per layer for the loop pass.
    window = c.f.int("loop_window_size", 64, minimum=1)
    return ([Layer(c.attn("full")) for _ in range(c.n)]
            + [Layer(c.attn("rotating", window=window)) for _ in range(c.n)])


def mla_decompressed(c: Ctx) -> list[Layer]:
    # youtu_llm.py / minicpm3.py: the latent is decompressed before caching: per-head keys
    # (nope + rope) and values (v_head_dim, minicpm3: hidden / heads).
    f = c.f
    k = f.int("qk_nope_head_dim") + f.int("qk_rope_head_dim")
    v = f.int("v_head_dim", c.hidden // c.heads)
    return [Layer(c.attn("full", kv_heads=c.heads, k_dim=k, v_dim=v, head_dim=k))
            for _ in range(c.n)]


def mla_pair(c: Ctx) -> list[Layer]:
    # longcat_flash.py: CacheList(KVCache(), KVCache()) per layer, both holding the MLA latent
    # and rope key (two attentions per layer); they grow together, so one cache of twice the
    # widths has the same bytes. longcat_flash_ngram adds one ArraysCache of the last
    # ngram-1 token ids (int64) ahead of the layers.
    layers = [Layer(Attn(ly.attn.cache, ly.attn.q_heads, 1, 2 * ly.attn.k_dim,
                         2 * ly.attn.v_dim, ly.attn.head_dim, mla=ly.attn.mla))
              for ly in mla(c) if ly.attn is not None]
    return layers


def longcat_ngram(c: Ctx) -> list[Layer]:
    n = c.f.int("ngram_size", 0) if c.f.has("ngram_size") else c.f.int("emb_neighbor_num", 0)
    return [Layer(None, state_bytes=max(n - 1, 0) * 8, state_kind="ngram")] + mla_pair(c)


def _kda_state(c: Ctx, cfg: Fields) -> int:
    # kimi_linear.py KDA: q, k, v short convs (kernel-1) x heads*head_dim in the activation
    # dtype (kimi_k3 fuses them into one of 3x the width: the same bytes), and the float32
    # gated-delta state heads x head_dim x head_dim.
    heads = cfg.int("num_heads", c.heads, minimum=1)
    hd = cfg.int("head_dim", c.head_dim, minimum=1)
    kernel = cfg.int("short_conv_kernel_size", 4, minimum=1)
    c.mixer.update(linear_scan="gated_delta", linear_v_heads=heads, linear_k_dim=hd,
                   linear_v_dim=hd, linear_state_bytes=4)
    return (kernel - 1) * 3 * heads * hd * c.act_bytes + heads * hd * hd * 4


def kimi_linear(c: Ctx) -> list[Layer]:
    # kimi_linear.py make_cache: ArraysCache(4) for layers listed (1-based) in
    # linear_attn_config.kda_layers, KVCache holding the MLA latent for the rest.
    cfg = _sub(c, "linear_attn_config")
    kda = set(cfg.int_list("kda_layers") or [])
    state = _kda_state(c, cfg)
    latent = mla(c)
    return [Layer(None, state_bytes=state, state_kind="linear") if i + 1 in kda
            else latent[i] for i in range(c.n)]


def _global_every(c: Ctx, group_key: str = "layer_group_size") -> list[bool]:
    # bailing_hybrid.py / bailing_moe_linear.py: layer i is global softmax attention when
    # (i+1) % group == 0 or it is past the last whole group.
    g = c.f.int(group_key, minimum=1)
    return [(i + 1) % g == 0 or i >= (c.n // g) * g for i in range(c.n)]


def bailing_hybrid(c: Ctx) -> list[Layer]:
    # Linear layers: ArraysCache(1) with a float32 heads x head_dim x head_dim state; global
    # layers: MLA latent (kv_lora_rank) + rope key.
    state = c.heads * c.head_dim * c.head_dim * 4
    latent = mla(c)
    return [latent[i] if g else Layer(None, state_bytes=state, state_kind="linear")
            for i, g in enumerate(_global_every(c))]


def bailing_moe_linear(c: Ctx) -> list[Layer]:
    # Linear layers: ArraysCache(1), heads x head_dim x head_dim in the activation dtype, the
    # state of recurrent_gla (a per-token op loop on every backend: no kernel).
    state = c.heads * c.head_dim * c.head_dim * c.act_bytes
    c.mixer.update(linear_scan="gla", linear_v_heads=c.heads, linear_k_dim=c.head_dim,
                   linear_v_dim=c.head_dim, linear_state_bytes=c.act_bytes)
    return [Layer(c.attn("full")) if g else Layer(None, state_bytes=state, state_kind="linear")
            for g in _global_every(c)]


def olmo_hybrid(c: Ctx) -> list[Layer]:
    # olmo_hybrid.py: ArraysCache(4) (three convs + gated-delta state) on "linear_attention"
    # layers, as Qwen3-Next's layers; KVCache on the rest.
    types = _types(c)
    if types is None:
        raise ConfigError(f"{c.f.where}: olmo_hybrid needs 'layer_types'")
    state = linear_state_bytes(c)
    return [Layer(None, state_bytes=state, state_kind="linear") if t == "linear_attention"
            else Layer(c.attn("full")) for t in types]


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
    return [Layer(c.attn("rotating", window=window, kv_heads=1, head_dim=hd))
            if types[i % len(types)] == "attention"
            else Layer(None, state_bytes=state, state_kind="conv") for i in range(c.n)]


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

    return [Layer(None, state_bytes=state, state_kind="mamba") if mamba(i)
            else Layer(c.attn("full", head_dim=hd)) for i in range(c.n)]


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
            a = c.attn("rotating", window=window, kv_heads=kv)
        else:
            kv = c.kv_heads
            a = c.attn("full")
        layers.append(Layer(a, state_bytes=2 * kv * conv * c.head_dim * c.act_bytes,
                            state_kind="conv"))
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
    return [Layer(None, state_bytes=state, state_kind="linear") for _ in range(c.n)]


def nemotron_nas(c: Ctx) -> list[Layer]:
    # nemotron-nas.py make_cache: a KVCache for each block whose attention is neither no_op nor
    # replace_with_linear, with num_attention_heads / n_heads_in_group KV heads.
    blocks = c.f.d.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != c.n:
        raise ConfigError(f"{c.f.where}: nemotron-nas needs 'block_configs', one per layer")
    layers = []
    for b in blocks:
        attn = b.get("attention") if isinstance(b, dict) else None
        attn = attn if isinstance(attn, dict) else {}
        if attn.get("no_op") or attn.get("replace_with_linear"):
            layers.append(Layer(None))
            continue
        group = attn.get("n_heads_in_group")
        if isinstance(group, bool) or not isinstance(group, int) or group < 1:
            raise ConfigError(f"{c.f.where}: block_configs attention needs 'n_heads_in_group'")
        layers.append(Layer(c.attn("full", kv_heads=c.heads // group)))
    return layers


def afm7(c: Ctx) -> list[Layer]:
    # afm7.py: the last num_kv_reuse_layers layers reuse earlier caches (no cache of their own).
    reuse = c.f.int("num_kv_reuse_layers", 0)
    return [Layer(c.attn("shared" if i >= c.n - reuse else "full")) for i in range(c.n)]


def openelm(c: Ctx) -> list[Layer]:
    # openelm.py: per-layer query and KV head counts (num_query_heads, num_kv_heads lists).
    kv = c.f.int_list("num_kv_heads")
    q = c.f.int_list("num_query_heads")
    if kv is None or q is None or len(kv) < c.n or len(q) < c.n:
        raise ConfigError(f"{c.f.where}: openelm needs 'num_kv_heads' and 'num_query_heads' "
                          "lists, one entry per layer")
    return [Layer(c.attn("full", kv_heads=kv[i], q_heads=q[i])) for i in range(c.n)]


def gpt_bigcode(c: Ctx) -> list[Layer]:
    # gpt_bigcode.py: multi_query -> one KV head.
    kv = 1 if c.f.bool("multi_query", True) else c.heads
    return [Layer(c.attn("full", kv_heads=kv)) for _ in range(c.n)]


def plamo(c: Ctx) -> list[Layer]:
    # plamo.py: num_attention_heads / n_shared_head KV heads.
    kv = c.heads // c.f.int("n_shared_head", 8, minimum=1)
    return [Layer(c.attn("full", kv_heads=max(kv, 1))) for _ in range(c.n)]


# --------------------------------------------------------------------------- field names


def renamed(names: dict[str, str]):
    """A prepare hook: copy each mlx-lm field name to the standard one it stands for."""
    def prepare(d: dict[str, Any]) -> dict[str, Any]:
        out = dict(d)
        for theirs, ours in names.items():
            if out.get(theirs) is not None and out.get(ours) is None:
                out[ours] = out[theirs]
        return out
    return prepare


GPT2_NAMES = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers",
              "n_head": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
              "n_inner": "intermediate_size", "n_positions": "max_position_embeddings"}


def prepare_recurrent_gemma(d: dict[str, Any]) -> dict[str, Any]:
    """recurrent_gemma.py MLPBlock: intermediate_size is the expanded width; its gate and up
    projections are each half of it, the width a prefill chunk's MLP computes."""
    out = dict(d)
    v = out.get("intermediate_size")
    if isinstance(v, int) and not isinstance(v, bool):
        out["intermediate_size"] = v // 2
    return out


def prepare_dbrx(d: dict[str, Any]) -> dict[str, Any]:
    # max_seq_len is DBRX's context limit (databricks/dbrx-instruct: 32768)
    out = renamed({"d_model": "hidden_size", "n_layers": "num_hidden_layers",
                   "n_heads": "num_attention_heads", "max_seq_len": "max_position_embeddings"})(d)
    attn = d.get("attn_config")
    if isinstance(attn, dict) and out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = attn.get("kv_n_heads")
    ffn = d.get("ffn_config")
    if isinstance(ffn, dict):
        for theirs, ours in (("moe_num_experts", "num_local_experts"),
                             ("moe_top_k", "num_experts_per_tok"), ("ffn_hidden_size",
                                                                    "intermediate_size")):
            if ffn.get(theirs) is not None and out.get(ours) is None:
                out[ours] = ffn[theirs]
    return out


def prepare_openelm(d: dict[str, Any]) -> dict[str, Any]:
    out = renamed({"model_dim": "hidden_size",
                   "num_transformer_layers": "num_hidden_layers"})(d)
    q = d.get("num_query_heads")
    if (isinstance(q, list) and q and all(isinstance(x, int) and not isinstance(x, bool)
                                          for x in q) and out.get("num_attention_heads") is None):
        out["num_attention_heads"] = max(q)
    return out


def minimax_m3(c: Ctx) -> list[Layer]:
    # minimax_m3_vl.py make_cache: CacheList(KVCache()) per layer, plus, on sparse-attention
    # layers (TextArgs.is_sparse_attn), a second KVCache holding the indexer key
    # (1 head x index_head_dim, zero-width values). Both grow in the same 256-token steps, so
    # the layer is one cache of kv_heads*head_dim + index_head_dim key elements per token.
    f = c.f
    types = _types_of(c, "layer_types")
    freq = f.int_list("sparse_attention_freq")
    if freq is not None and len(freq) < c.n:
        raise ConfigError(f"{f.where}: 'sparse_attention_freq' needs an entry per layer")
    index = f.int("index_head_dim", 0)

    def sparse(i: int) -> bool:
        if f.d.get("index_block_size") is None:
            return False
        if types is not None:
            return types[i] != "full_attention"
        if freq is not None:
            return bool(freq[i])
        return True

    layers = []
    for i in range(c.n):
        if sparse(i):
            w = c.kv_heads * c.head_dim
            layers.append(Layer(Attn("full", c.heads, 1, w + index, w, c.head_dim)))
        else:
            layers.append(Layer(c.attn("full")))
    return layers


def bailing_moe_v3(c: Ctx) -> list[Layer]:
    # bailing_moe_v3.py: KDA layers (not global, the bailing grouping) hold ArraysCache(4) as
    # kimi_linear's (heads x head_dim wide, short_conv_kernel_size); the rest the MLA latent.
    state = _kda_state(c, Fields({"num_heads": c.heads, "head_dim": c.head_dim,
                                  "short_conv_kernel_size": c.f.int("short_conv_kernel_size",
                                                                    4)}, c.f.where))
    latent = mla(c)
    return [latent[i] if g else Layer(None, state_bytes=state, state_kind="linear")
            for i, g in enumerate(_global_every(c))]


def plamo3(c: Ctx) -> list[Layer]:
    # plamo3.py: layer i is full when (i+1) % sliding_window_pattern == 0, else a
    # RotatingKVCache(window_size).
    p = c.f.int("sliding_window_pattern", 8, minimum=1)
    window = c.f.int("window_size", 2048, minimum=1)
    return [Layer(c.attn("full")) if (i + 1) % p == 0
            else Layer(c.attn("rotating", window=window)) for i in range(c.n)]


def _layer_ids(c: Ctx, key: str) -> set[int]:
    ids = c.f.int_list(key) or []
    if any(not 0 <= i < c.n for i in ids):
        raise ConfigError(f"{c.f.where}: '{key}' names a layer outside 0..{c.n - 1}",
                          file=c.f.where, field=key)
    return set(ids)


def deepseek_v41(c: Ctx) -> list[Layer]:
    # deepseek_v41.py make_cache: a LayerCache(sliding_window) per layer. Every layer keeps the
    # last sliding_window rows of its head_dim-wide KV (one latent, no heads). A layer with a
    # compress ratio r > 0 that is in kv_source_layer_ids also keeps its compressed KV (one
    # head_dim row per r tokens; r == 1: every token) and, when in index_source_layer_ids too,
    # index keys (index_head_dim) per compressed row; with r > 1, the open group's rows stay
    # as two float32 head_dim arrays (pending_kv, pending_gate). Other layers read the
    # compressed state of earlier ones and hold none of it.
    f = c.f
    if f.int_list("engram_layer_ids"):  # ModelArgs.__post_init__ raises ValueError for these
        raise ConfigError(f"{f.where}: 'engram_layer_ids' is set: mlx-lm 0.32's deepseek_v41 "
                          "has no engram memory and refuses the config", file=f.where,
                          field="engram_layer_ids")
    ratios = f.int_list("compress_ratios") or []
    if any(r < 0 for r in ratios):
        raise ConfigError(f"{f.where}: 'compress_ratios' must be >= 0", file=f.where,
                          field="compress_ratios")
    kv_src = _layer_ids(c, "kv_source_layer_ids")
    index_src = _layer_ids(c, "index_source_layer_ids")
    for key, ids in (("kv_source_layer_ids", kv_src), ("index_source_layer_ids", index_src)):
        if ids and max(ids) >= len(ratios):  # mlx-lm's Compressor / Indexer read ratios[i]
            raise ConfigError(f"{f.where}: '{key}' names layer {max(ids)} but "
                              f"'compress_ratios' has {len(ratios)} entries", file=f.where,
                              field="compress_ratios")
    window = f.int("sliding_window", 128, minimum=1)
    hd = c.head_dim
    index = f.int("index_head_dim", 128)
    index_heads = f.int("index_n_heads", 32)
    layers = []
    index_ratio = 0  # ratio of the latest layer that made index keys (forward order)
    picked = False  # an index layer has chosen top-k compressed rows (shared topk_idx)
    for i in range(c.n):
        r = ratios[i] if i < len(ratios) else 0
        comp = idx = None
        if r and i in kv_src:
            comp = Compress(r, hd + (index if i in index_src else 0), 2 * hd if r > 1 else 0)
            if i in index_src:
                index_ratio = r
        if r and i in index_src and index_ratio:  # Indexer scores the shared index keys
            idx = SparseIndex(index_heads, index_ratio)
            picked = True
        # A compressing layer past an index layer attends its window plus the top-k picks.
        topk = f.int("index_topk", 512) if r and picked else 0
        layers.append(Layer(Attn("window", c.heads, 1, hd, 0, hd, window=window, sinks=True,
                                 compress=comp, index=idx, sparse_topk=topk)))
    return layers


def prepare_olmo(d: dict[str, Any]) -> dict[str, Any]:
    # olmo.py (OLMo 1) ModelArgs: d_model / n_layers / n_heads; wte and the output head have
    # embedding_size rows (padded past vocab_size); ff_proj is mlp_hidden_size wide (default
    # mlp_ratio x d_model) and SwiGLU halves it, so the MLP's intermediate is half of it.
    out = renamed({"d_model": "hidden_size", "n_layers": "num_hidden_layers",
                   "n_heads": "num_attention_heads", "weight_tying": "tie_word_embeddings",
                   "max_sequence_length": "max_position_embeddings"})(d)
    if isinstance(d.get("embedding_size"), int):
        out["vocab_size"] = d["embedding_size"]
    mlp = d.get("mlp_hidden_size")
    if mlp is None and isinstance(d.get("d_model"), int):
        ratio = d.get("mlp_ratio", 4)
        mlp = ratio * d["d_model"] if isinstance(ratio, int) else None
    if isinstance(mlp, int) and not isinstance(mlp, bool) and out.get("intermediate_size") is None:
        out["intermediate_size"] = mlp // 2
    return out


def olmo(c: Ctx) -> list[Layer]:
    # olmo.py: one KVCache per block, every head its own KV (no GQA), head_dim d_model/n_heads.
    c.warnings.append("mlx-lm 0.32's olmo.py fails on any model call of more than one token "
                      "(it adds the 'causal' mask string to the attention scores), so "
                      "mlx_lm.generate cannot prefill a prompt; sized as its caches would be")
    if c.f.bool("tie_word_embeddings", False):
        c.warnings.append("olmo with weight_tying: mlx-lm 0.32's olmo.py then returns "
                          "(logits, cache), which mlx_lm.generate cannot use")
    return [Layer(c.attn("full")) for _ in range(c.n)]
