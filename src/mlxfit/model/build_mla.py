"""DeepSeek-style latent attention (MLA) families (mlx-lm 0.32): the cache holds the latent
and the rope key (deepseek_v3.py), or decompressed per-head K/V (deepseek_v2.py, minicpm3.py),
or twice the latent (longcat_flash.py's CacheList of two KVCaches)."""

from __future__ import annotations

from dataclasses import replace

from mlxfit.model.build_ctx import Ctx
from mlxfit.model.caches import NGRAM_STATE, Full
from mlxfit.model.config import Attn, Layer, Mla


def mla(c: Ctx, *, rope: int = 64, nope: int = 128, v_head: int = 128) -> list[Layer]:
    # deepseek_v3.py caches the normalized latent (kv_lora_rank) as "keys" and the shared rope
    # key (qk_rope_head_dim) as "values": one head, no per-head K/V. The keyword widths stand
    # for an absent field (kimi_linear.py: qk_rope_head_dim or 0, the others or head_dim).
    f = c.f
    m = Mla(
        heads=c.heads,
        qk_nope=f.int("qk_nope_head_dim", nope),
        qk_rope=f.int("qk_rope_head_dim", rope),
        v_head=f.int("v_head_dim", v_head),
        kv_lora_rank=f.int("kv_lora_rank", 512),
    )
    a = Attn(Full(), q_heads=c.heads, kv_heads=1, k_dim=m.kv_lora_rank, v_dim=m.qk_rope,
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
    return [Layer(c.attn(Full(), kv_heads=c.heads, k_dim=k, v_dim=v, head_dim=k))
            for _ in range(c.n)]


def mla_decompressed(c: Ctx) -> list[Layer]:
    # youtu_llm.py / minicpm3.py: the latent is decompressed before caching: per-head keys
    # (nope + rope) and values (v_head_dim, minicpm3: hidden / heads).
    f = c.f
    k = f.int("qk_nope_head_dim") + f.int("qk_rope_head_dim")
    v = f.int("v_head_dim", c.hidden // c.heads)
    return [Layer(c.attn(Full(), kv_heads=c.heads, k_dim=k, v_dim=v, head_dim=k))
            for _ in range(c.n)]


def mla_pair(c: Ctx) -> list[Layer]:
    # longcat_flash.py: CacheList(KVCache(), KVCache()) per layer, both holding the MLA latent
    # and rope key (two attentions per layer); they grow together, so one cache of twice the
    # widths has the same bytes. longcat_flash_ngram adds one ArraysCache of the last
    # ngram-1 token ids (int64) ahead of the layers.
    layers = [Layer(replace(ly.attn, kv_heads=1, k_dim=2 * ly.attn.k_dim,
                            v_dim=2 * ly.attn.v_dim))
              for ly in mla(c) if ly.attn is not None]
    return layers


def longcat_ngram(c: Ctx) -> list[Layer]:
    # NgramEmbedding keeps the last emb_neighbor_num - 1 ids (ModelArgs default 4, filled by
    # mlx_lm_reads; ngram_size is no ModelArgs field, so mlx-lm never reads it).
    n = c.f.int("emb_neighbor_num", 0)
    return [Layer(None, state_bytes=max(n - 1, 0) * 8, state_kind=NGRAM_STATE)] + mla_pair(c)
