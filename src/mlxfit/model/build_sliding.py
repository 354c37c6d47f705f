"""Families with windowed caches (mlx-lm 0.32): RotatingKVCache on sliding-window layers
(chosen by layer_types, a pattern or a period), ChunkedKVCache on Llama 4's local layers,
Gemma 3n / 4's KV-shared layers, and deepseek_v41's LayerCache window with its compressed KV."""

from __future__ import annotations

from mlxfit.errors import ConfigError
from mlxfit.model.build_ctx import Ctx, layer_types, sub_fields
from mlxfit.model.caches import CacheKind, Chunked, Full, Rotating, Shared, Window
from mlxfit.model.config import Attn, Compress, Layer, SparseIndex


def sliding_by_types(c: Ctx, types: list[str] | None, window: int | None) -> list[Layer]:
    layers = []
    for i in range(c.n):
        sliding = types is not None and types[i] == "sliding_attention"
        if sliding and window:
            layers.append(Layer(c.attn(Rotating(window))))
        else:
            layers.append(Layer(c.attn(Full())))
    return layers


def llama(c: Ctx) -> list[Layer]:
    # llama.py / ministral3.py honour layer_types; a bare sliding_window (Mistral 7B) is ignored.
    # ModelArgs fills layer_types from num_hidden_layers only when absent; the model builds a
    # layer per entry (pixtral-11-2: 8 layer_types, num_hidden_layers 1, 8 caches).
    types = c.f.str_list("layer_types", None)
    if types is not None:
        c.n = len(types)
    window = c.f.int("sliding_window", 0) if c.f.has("sliding_window") else None
    if c.f.has("sliding_window") and types is None:
        c.warnings.append(
            "sliding_window without layer_types: mlx-lm's llama.py keeps a full cache on every "
            "layer"
        )
    return sliding_by_types(c, types, window)


def pattern(c: Ctx, default_pattern: int) -> list[Layer]:
    # gemma3 / cohere2: layer i is global when i % pattern == pattern - 1 (mlx-lm make_cache).
    p = c.f.int("sliding_window_pattern", default_pattern, minimum=1)
    window = c.f.int("sliding_window", 4096, minimum=1)
    return [
        Layer(c.attn(Full())) if _global_in_pattern(i, p) else Layer(c.attn(Rotating(window)))
        for i in range(c.n)
    ]


def _global_in_pattern(i: int, p: int) -> bool:
    return i % p == p - 1


def gemma3(c: Ctx) -> list[Layer]:
    # mlx-lm's gemma3_text reads only sliding_window_pattern (default 6), never layer_types.
    layers = pattern(c, 6)
    types = c.f.str_list("layer_types", c.n)
    if types is not None:
        p = c.f.int("sliding_window_pattern", 6, minimum=1)
        ours = ["full_attention" if _global_in_pattern(i, p) else "sliding_attention"
                for i in range(c.n)]
        if ours != types:
            c.warnings.append("gemma3: config layer_types disagree with sliding_window_pattern; "
                              "sized as mlx-lm runs it (by the pattern)")
    return layers


def _check_kv_owners(types: list[str], shared: int, where: str) -> None:
    """gemma4_text.py's Model maps each of the last ``shared`` layers to the last earlier
    layer of its type (kvs_by_type); a shared layer whose type no earlier layer has, or
    ``shared`` at or past the depth, is a KeyError when mlx-lm builds the model."""
    if shared <= 0:
        return
    first = len(types) - shared
    owners = set(types[:max(first, 0)])
    for j in range(max(first, 0), len(types)):
        if first <= 0 or types[j] not in owners:
            raise ConfigError(f"{where}: num_kv_shared_layers={shared} leaves layer {j} "
                              f"({types[j]}) no earlier layer of its type to share; mlx-lm's "
                              "gemma4_text cannot build the model")


def gemma4(c: Ctx) -> list[Layer]:
    f = c.f
    # gemma4_text.ModelArgs.__post_init__ without layer_types: sliding_window_pattern - 1
    # sliding layers, then a full one, repeated.
    p = f.int("sliding_window_pattern", 5, minimum=1)
    types = f.str_list("layer_types", c.n) or [
        "full_attention" if (i + 1) % p == 0 else "sliding_attention" for i in range(c.n)]
    window = f.int("sliding_window", 512, minimum=1)
    shared = f.int("num_kv_shared_layers", 0)
    global_hd = f.int("global_head_dim", 0) or c.head_dim
    k_eq_v = f.bool("attention_k_eq_v", False)
    global_kv = f.int("num_global_key_value_heads", 0)
    first_shared = c.n - shared
    _check_kv_owners(types, shared, f.where)
    layers = []
    for i, t in enumerate(types):
        sliding = t == "sliding_attention"
        hd = c.head_dim if sliding else global_hd
        kv = global_kv if (not sliding and k_eq_v and global_kv) else c.kv_heads
        kind: CacheKind = Rotating(window) if sliding else Full()
        if i >= first_shared:  # reads the last earlier cache of its type; owns no memory
            kind = Shared(window if sliding else None)
        layers.append(Layer(c.attn(kind, head_dim=hd, kv_heads=kv)))
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
        kind: CacheKind = Rotating(window) if sliding else Full()
        if i >= first_shared:
            kind = Shared(window if sliding else None)
        layers.append(Layer(c.attn(kind)))
    return layers


def gpt_oss(c: Ctx) -> list[Layer]:
    types = c.f.str_list("layer_types", c.n)
    window = c.f.int("sliding_window", 128, minimum=1)
    if types is None:  # gpt-oss alternates sliding / full, sliding first
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(c.n)]
    return [
        Layer(c.attn(Rotating(window), sinks=True))
        if t == "sliding_attention"
        else Layer(c.attn(Full(), sinks=True))
        for t in types
    ]


def cohere2(c: Ctx) -> list[Layer]:
    return pattern(c, 4)


def by_layer_types(c: Ctx) -> list[Layer]:
    """olmo3 / mellum / exaone_moe / laguna / afmoe / gpt-style hybrids: make_cache gives a
    RotatingKVCache(sliding_window) to every "sliding_attention" layer, KVCache to the rest."""
    types = layer_types(c) or ["full_attention"] * c.n
    window = c.f.int("sliding_window", 4096, minimum=1)
    return [Layer(c.attn(Rotating(window))) if t == "sliding_attention"
            else Layer(c.attn(Full())) for t in types]


def afmoe(c: Ctx) -> list[Layer]:
    # afmoe.py builds a layer per layer_types entry (a required field); num_hidden_layers
    # (ModelArgs default 32) is read only by sanitize.
    types = c.f.str_list("layer_types", None)
    if types is not None:
        c.n = len(types)
    return by_layer_types(c)


def olmo3(c: Ctx) -> list[Layer]:
    # olmo3.py ModelArgs: without layer_types, every 4th layer full, the rest sliding.
    if c.f.has("layer_types"):
        return by_layer_types(c)
    window = c.f.int("sliding_window", minimum=1)
    return [Layer(c.attn(Full())) if (i + 1) % 4 == 0
            else Layer(c.attn(Rotating(window))) for i in range(c.n)]


def spark2_5(c: Ctx) -> list[Layer]:
    # spark2_5.py ModelArgs: without layer_types, three sliding layers then one full.
    if c.f.has("layer_types"):
        return by_layer_types(c)
    window = c.f.int("sliding_window", minimum=1)
    return [Layer(c.attn(Full())) if i % 4 == 3 else Layer(c.attn(Rotating(window)))
            for i in range(c.n)]


def exaone4(c: Ctx) -> list[Layer]:
    # exaone4.py: layer i is local (RotatingKVCache) when pattern[i % len] == "L"; no pattern:
    # every layer global.
    pattern = c.f.d.get("sliding_window_pattern")
    if pattern is not None and not isinstance(pattern, str):
        raise ConfigError(f"{c.f.where}: 'sliding_window_pattern' must be a string like 'LLLG'")
    window = c.f.int("sliding_window", 4096, minimum=1) if pattern else 0
    return [Layer(c.attn(Rotating(window)))
            if pattern and pattern[i % len(pattern)] == "L" else Layer(c.attn(Full()))
            for i in range(c.n)]


def step3p5(c: Ctx) -> list[Layer]:
    # step3p5.py: layer_types, else even layers slide; KV heads are num_attention_groups, the
    # sliding layers' from attention_other_setting.
    f = c.f
    types = layer_types(c) or ["sliding_attention" if i % 2 == 0 else "full_attention"
                          for i in range(c.n)]
    kv = f.int("num_attention_groups", c.kv_heads)
    other = sub_fields(c, "attention_other_setting", required=False)
    swa_kv = other.int("num_attention_groups", kv, minimum=1)
    swa_q = other.int("num_attention_heads", c.heads, minimum=1)
    window = f.int("sliding_window", 4096, minimum=1)
    return [Layer(c.attn(Rotating(window), kv_heads=swa_kv, q_heads=swa_q))
            if t == "sliding_attention" else Layer(c.attn(Full(), kv_heads=kv))
            for t in types]


def mimo_v2_flash(c: Ctx) -> list[Layer]:
    # mimo_v2_flash.py: hybrid_layer_pattern 1 = sliding (RotatingKVCache(sliding_window_size))
    # with the swa_* widths; keys head_dim wide, values v_head_dim.
    f = c.f
    pattern = f.int_list("hybrid_layer_pattern") or [0] * c.n
    full = c.attn(Full(), k_dim=c.head_dim, v_dim=f.int("v_head_dim", c.head_dim))
    swa_hd = f.int("swa_head_dim", c.head_dim)
    swa = c.attn(Rotating(f.int("sliding_window_size", 4096, minimum=1)),
                 q_heads=f.int("swa_num_attention_heads", c.heads),
                 kv_heads=f.int("swa_num_key_value_heads", c.kv_heads), head_dim=swa_hd,
                 k_dim=swa_hd, v_dim=f.int("swa_v_head_dim", swa_hd))
    return [Layer(swa if p == 1 else full) for p in pattern[:c.n]]


def iquestloopcoder(c: Ctx) -> list[Layer]:
    # iquestloopcoder.py make_cache: a KVCache per layer, then a RotatingKVCache
    # (loop_window_size) per layer for the loop pass.
    window = c.f.int("loop_window_size", 64, minimum=1)
    return ([Layer(c.attn(Full())) for _ in range(c.n)]
            + [Layer(c.attn(Rotating(window))) for _ in range(c.n)])


def plamo3(c: Ctx) -> list[Layer]:
    # plamo3.py: layer i is full when (i+1) % sliding_window_pattern == 0, else a
    # RotatingKVCache(window_size).
    # ModelArgs.__post_init__: a non-null sliding_window overrides window_size.
    p = c.f.int("sliding_window_pattern", 8, minimum=1)
    key = "sliding_window" if c.f.has("sliding_window") else "window_size"
    window = c.f.int(key, 2048, minimum=1)
    return [Layer(c.attn(Full())) if (i + 1) % p == 0
            else Layer(c.attn(Rotating(window))) for i in range(c.n)]


def llama4(c: Ctx) -> list[Layer]:
    # llama4.py make_cache: ChunkedKVCache(attention_chunk_size) except every 4th layer.
    chunk = c.f.int("attention_chunk_size", 8192, minimum=1)
    return [
        Layer(c.attn(Full())) if (i + 1) % 4 == 0 else Layer(c.attn(Chunked(chunk)))
        for i in range(c.n)
    ]


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
        layers.append(Layer(Attn(Window(window, topk), c.heads, 1, hd, 0, hd, sinks=True,
                                 compress=comp, index=idx)))
    return layers
