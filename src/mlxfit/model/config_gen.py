"""Seeded config variants of a family fixture, for the differential check (verbs/diffcheck.py).

A variant redraws the integer fields that shape mlx-lm's caches, each with some probability,
from values chosen to cross the rules: depths off the layer pattern, kv heads a divisor of
(and mostly different from) the heads, odd head counts and head dims (24, 40, 80, 96),
windows just below, at and above the prompts and chunks the check runs (37, 64, 300, 512),
MLA ranks, linear-attention and SSM widths, MoE frequencies; per-layer lists are redrawn at
the new depth from the values the fixture uses and index lists are cut to it. Whether mlx-lm
accepts the variant is the checker's question (``diffcheck.accepted_by_mlx_lm``), not this
module's: it only draws. Pure and stdlib only; the same (family, seed, index) always gives
the same variant.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers",
              "num_transformer_layers")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "num_query_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_n_heads")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "model_dim", "dim")
# Lists with one entry per layer, redrawn at the new depth from the fixture's values.
PER_LAYER_LISTS = ("layer_types", "mlp_layer_types", "block_types", "moe_layer_freq",
                   "compress_ratios", "num_attention_heads_per_layer", "is_moe_layer",
                   "hybrid_layer_pattern", "no_rope_layers", "layer_rope_theta")
# Lists of layer indices, cut to the new depth and sometimes redrawn.
INDEX_LISTS = ("mlp_only_layers", "full_attn_idxs", "sliding_window_layers", "kda_layers",
               "full_attn_layers", "engram_layer_ids", "index_source_layer_ids",
               "kv_source_layer_ids")
WINDOW_KEYS = ("sliding_window", "attention_window_size", "window_size", "sliding_window_size",
               "loop_window_size", "attention_chunk_size")
WINDOWS = (1, 2, 33, 36, 37, 38, 63, 64, 65, 255, 256, 257, 299, 300, 301, 511, 513, 1100, 4096)
HEAD_DIMS = (8, 16, 24, 32, 40, 64, 80, 96, 128)
CHOICES: dict[str, tuple[int, ...]] = {
    "kv_lora_rank": (16, 32, 64, 96, 512),
    "q_lora_rank": (16, 32, 64),
    "qk_rope_head_dim": (8, 16, 32, 64),
    "qk_nope_head_dim": (16, 24, 32, 64, 128),
    "v_head_dim": (16, 24, 32, 64, 128),
    "index_head_dim": (16, 32, 64, 128),
    "index_n_heads": (1, 2, 4),
    "index_topk": (1, 4, 64, 2048),
    "linear_num_key_heads": (1, 2, 4),
    "linear_key_head_dim": (16, 32, 64),
    "linear_value_head_dim": (16, 32, 64),
    "linear_conv_kernel_dim": (2, 3, 4),
    "mamba_d_state": (8, 16, 32),
    "mamba_d_conv": (2, 3, 4),
    "ssm_state_size": (8, 16, 32),
    "conv_kernel": (2, 3, 4),
    "conv_L_cache": (2, 3, 4),
    "short_conv_kernel_size": (2, 3, 4),
    "sliding_window_pattern": (1, 2, 3, 4, 6),
    "full_attention_interval": (1, 2, 3, 4),
    "decoder_sparse_step": (1, 2, 3),
    "cla_share_factor": (1, 2, 3),
    "emb_neighbor_num": (2, 3, 4, 5),
    "rotary_dim": (8, 16, 32),
}
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "moe_top_k", "moe_k")
SMALL_WIDTH_KEYS = ("intermediate_size", "moe_intermediate_size", "ffn_hidden_size",
                    "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
                    "expert_ffn_hidden_size", "dense_intermediate_size", "moe_hidden_size",
                    "n_inner", "intermediate_size_mlp", "block_ff_dim")


@dataclass(frozen=True)
class Variant:
    name: str  # "<family>-<seed>-<index>"
    config: dict[str, Any]
    tweaks: dict[str, Any]  # the fields redrawn and their new values (for the report)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _mutate(c: dict[str, Any], r: random.Random, tweaks: dict[str, Any], where: str) -> None:
    old_layers = next((c[k] for k in LAYER_KEYS if isinstance(c.get(k), int)), None)
    if old_layers is not None and r.random() < 0.8:
        layers = r.randint(1, 7)
        for k in LAYER_KEYS:
            if isinstance(c.get(k), int) and c[k] == old_layers:
                c[k] = layers
        tweaks[where + "layers"] = layers
        for k in PER_LAYER_LISTS:
            v = c.get(k)
            if isinstance(v, list) and v and len(v) == old_layers:
                pool = list(v)
                c[k] = [v[i] if i < len(v) and r.random() < 0.5 else r.choice(pool)
                        for i in range(layers)]
        for k in INDEX_LISTS:
            v = c.get(k)
            if isinstance(v, list) and all(isinstance(x, int) for x in v):
                kept = [x for x in v if x < layers]
                if r.random() < 0.4:
                    kept = sorted(r.sample(range(layers), r.randint(0, layers)))
                c[k] = kept
        for k in ("first_k_dense_replace", "num_kv_shared_layers", "num_kv_reuse_layers",
                  "max_window_layers", "num_dense_layers"):
            if isinstance(c.get(k), int):
                c[k] = r.randint(0, max(layers - 1, 0))
    heads_key = next((k for k in HEAD_KEYS if isinstance(c.get(k), int)), None)
    if heads_key is not None and r.random() < 0.7:
        heads = r.choice((1, 2, 3, 4, 5, 6, 7, 8, 12))
        c[heads_key] = heads
        tweaks[where + "heads"] = heads
        for k in KV_HEAD_KEYS:
            if isinstance(c.get(k), int):
                c[k] = r.choice(_divisors(heads))
                tweaks[where + "kv_heads"] = c[k]
        if "head_dim" in c and isinstance(c["head_dim"], int):
            c["head_dim"] = r.choice(HEAD_DIMS)
            tweaks[where + "head_dim"] = c["head_dim"]
        hidden_key = next((k for k in HIDDEN_KEYS if isinstance(c.get(k), int)), None)
        if hidden_key is not None:
            # Some modules require hidden = heads x head_dim (cohere2), most do not.
            hd = c.get("head_dim") if isinstance(c.get("head_dim"), int) else None
            width = hd if hd and r.random() < 0.5 else r.choice((16, 24, 32, 40, 64, 80))
            c[hidden_key] = heads * width
            tweaks[where + "hidden"] = c[hidden_key]
    for k in WINDOW_KEYS:
        if isinstance(c.get(k), int) and r.random() < 0.8:
            c[k] = r.choice(WINDOWS)
            tweaks[where + k] = c[k]
    for k, values in CHOICES.items():
        if isinstance(c.get(k), int) and not isinstance(c[k], bool) and r.random() < 0.6:
            c[k] = r.choice(values)
            tweaks[where + k] = c[k]
    if isinstance(c.get("moe_layer_freq"), int) and r.random() < 0.6:
        c["moe_layer_freq"] = r.choice((1, 2, 3))
    experts_key = next((k for k in EXPERT_KEYS if isinstance(c.get(k), int) and c[k] > 0), None)
    if experts_key is not None and r.random() < 0.5:
        experts = r.randint(2, 8)
        c[experts_key] = experts
        for k in TOPK_KEYS:
            if isinstance(c.get(k), int):
                c[k] = r.randint(1, min(experts, 4))
        for k in ("n_group", "topk_group", "num_expert_group"):
            if isinstance(c.get(k), int):
                c[k] = 1
    for k in SMALL_WIDTH_KEYS:
        if isinstance(c.get(k), int) and c[k] > 0:
            c[k] = 64
    if isinstance(c.get("vocab_size"), int):
        c["vocab_size"] = 512


def variant(family: str, fixture: dict[str, Any], seed: int, index: int) -> Variant:
    """The ``index``-th draw of ``seed`` from ``fixture``: the fields above redrawn on the top
    level and in every nested config (a wrapper's text_config)."""
    r = random.Random(f"{family}|{seed}|{index}")
    c = copy.deepcopy(fixture)
    tweaks: dict[str, Any] = {}
    _mutate(c, r, tweaks, "")
    for k, v in sorted(c.items()):
        if isinstance(v, dict) and any(isinstance(v.get(x), int) for x in LAYER_KEYS + HEAD_KEYS):
            _mutate(v, r, tweaks, k + ".")
    return Variant(f"{family}-{seed}-{index}", c, tweaks)


def flag_sets(seed: int, index: int) -> list[dict[str, Any]]:
    """The flag sets a variant is run with: plain, one --kv-bits set (bits, group, start) and
    one --max-kv-size, drawn from the same seed."""
    r = random.Random(f"flags|{seed}|{index}")
    return [
        {},
        {"kv_bits": r.choice((4, 8)), "kv_group_size": r.choice((32, 64)),
         "quantized_kv_start": r.choice((0, 37, 100))},
        {"max_kv_size": r.choice((64, 100, 300))},
    ]
