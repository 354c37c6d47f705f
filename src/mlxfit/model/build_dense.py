"""Families whose every attention layer holds a KVCache (mlx-lm 0.32): the layouts differ in
their heads and widths (per-layer head counts, multi-query, an indexer key beside the cache),
or in layers that read an earlier layer's cache (afm7)."""

from __future__ import annotations

from mlxfit.errors import ConfigError
from mlxfit.model.build_ctx import Ctx
from mlxfit.model.caches import Full, Shared
from mlxfit.model.config import Attn, Fields, Layer


def standard(c: Ctx) -> list[Layer]:
    return [Layer(c.attn(Full())) for _ in range(c.n)]


def qwen2(c: Ctx) -> list[Layer]:
    if c.f.has("sliding_window") and c.f.bool("use_sliding_window", False):
        c.warnings.append("use_sliding_window is set but mlx-lm's qwen2.py always caches in full")
    return standard(c)


def llama_text(c: Ctx) -> list[Layer]:
    # pixtral.py / mistral3.py wrap llama's (or ministral3's) text model without a make_cache:
    # a KVCache per layer, and ModelArgs builds one layer per layer_types entry when given.
    types = c.f.str_list("layer_types", None)
    if types is not None:
        c.n = len(types)
    return standard(c)


def openelm(c: Ctx) -> list[Layer]:
    # openelm.py: per-layer query and KV head counts (num_query_heads, num_kv_heads lists).
    kv = c.f.int_list("num_kv_heads")
    q = c.f.int_list("num_query_heads")
    if kv is None or q is None or len(kv) < c.n or len(q) < c.n:
        raise ConfigError(f"{c.f.where}: openelm needs 'num_kv_heads' and 'num_query_heads' "
                          "lists, one entry per layer")
    return [Layer(c.attn(Full(), kv_heads=kv[i], q_heads=q[i])) for i in range(c.n)]


def gpt_bigcode(c: Ctx) -> list[Layer]:
    # gpt_bigcode.py: multi_query -> one KV head.
    kv = 1 if c.f.bool("multi_query", True) else c.heads
    return [Layer(c.attn(Full(), kv_heads=kv)) for _ in range(c.n)]


def plamo(c: Ctx) -> list[Layer]:
    # plamo.py: num_attention_heads / n_shared_head KV heads.
    kv = c.heads // c.f.int("n_shared_head", 8, minimum=1)
    return [Layer(c.attn(Full(), kv_heads=max(kv, 1))) for _ in range(c.n)]


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
        layers.append(Layer(c.attn(Full(), kv_heads=c.heads // group)))
    return layers


def afm7(c: Ctx) -> list[Layer]:
    # afm7.py: the last num_kv_reuse_layers layers reuse earlier caches (no cache of their own).
    reuse = c.f.int("num_kv_reuse_layers", 0)
    return [Layer(c.attn(Shared() if i >= c.n - reuse else Full())) for i in range(c.n)]


def minimax_m3(c: Ctx) -> list[Layer]:
    # minimax_m3_vl.py make_cache: CacheList(KVCache()) per layer, plus, on sparse-attention
    # layers (TextArgs.is_sparse_attn), a second KVCache holding the indexer key
    # (1 head x index_head_dim, zero-width values). Both grow in the same 256-token steps, so
    # the layer is one cache of kv_heads*head_dim + index_head_dim key elements per token.
    # TextArgs.__post_init__ lifts the published config's nested sparse_attention_config
    # (sparse_index_dim, sparse_block_size, sparse_attention_freq) over the flat keys.
    nested = c.f.d.get("sparse_attention_config")
    lifted = {"index_head_dim": "sparse_index_dim", "index_block_size": "sparse_block_size",
              "sparse_attention_freq": "sparse_attention_freq",
              "index_n_heads": "sparse_num_index_heads", "index_topk_blocks": "sparse_topk_blocks"}
    d = dict(c.f.d)
    if isinstance(nested, dict):
        d.update({flat: nested[key] for flat, key in lifted.items() if key in nested})
    f = Fields(d, c.f.where)
    types = c.f.str_list("layer_types", c.n)
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

    if any(sparse(i) for i in range(c.n)):
        # a sparse layer's indexer projections are index_n_heads x index_head_dim wide: without
        # either (default None) mlx-lm's Attention.__init__ fails, so mlx-lm cannot load it
        for key in ("index_head_dim", "index_n_heads"):
            if not isinstance(f.d.get(key), int):
                raise ConfigError(f"{f.where}: missing {key!r}, which mlx-lm's minimax_m3_vl "
                                  "sparse-attention layers require: mlx-lm cannot load this "
                                  "config", file=f.where, field=key)
        # Past index_topk_blocks x index_block_size keys the indexer keeps top-k blocks per
        # index head and repeats that selection num_attention_heads // index_n_heads times
        # (_index_mask): unless index_n_heads divides the heads the mask does not broadcast
        # and mlx-lm's forward pass fails.
        topk = f.d.get("index_topk_blocks")
        if not isinstance(topk, int):  # _index_mask compares None with the block count
            c.warnings.append(
                f"{f.where}: no 'index_topk_blocks' (sparse_topk_blocks): mlx-lm loads this "
                "config, but its minimax_m3_vl sparse attention fails at the first call")
        n_index = f.d["index_n_heads"]
        if isinstance(topk, int) and (n_index <= 0 or c.heads % n_index):
            c.mixer["fails_past"] = topk * f.d["index_block_size"]
            c.mixer["fails_why"] = (
                f"mlx-lm's minimax_m3_vl sparse attention fails ({c.heads} attention heads "
                f"are no multiple of index_n_heads {n_index})")
    layers = []
    for i in range(c.n):
        if sparse(i):
            w = c.kv_heads * c.head_dim
            layers.append(Layer(Attn(Full(), c.heads, 1, w + index, w, c.head_dim)))
        else:
            layers.append(Layer(c.attn(Full())))
    return layers


def olmo(c: Ctx) -> list[Layer]:
    # olmo.py: one KVCache per block, every head its own KV (no GQA), head_dim d_model/n_heads.
    c.warnings.append("mlx-lm 0.32's olmo.py fails on any model call of more than one token "
                      "(it adds the 'causal' mask string to the attention scores), so "
                      "mlx_lm.generate cannot prefill a prompt; sized as its caches would be")
    if c.f.bool("tie_word_embeddings", False):
        c.warnings.append("olmo with weight_tying: mlx-lm 0.32's olmo.py then returns "
                          "(logits, cache), which mlx_lm.generate cannot use")
    return [Layer(c.attn(Full())) for _ in range(c.n)]
