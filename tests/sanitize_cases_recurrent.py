"""Checkpoint layouts for the recurrent families' sanitize replays (model/sanitize_recurrent.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sanitize_oracle import Layout, model_layout, rename, unstack

FIXTURES = Path(__file__).parent / "fixtures" / "families"

Case = tuple[dict[str, Any], Layout]


def fixture(family: str, **changes: Any) -> dict[str, Any]:
    """The family's fixture config (tests/fixtures/families), with ``changes``."""
    return {**json.loads((FIXTURES / f"{family}.json").read_text()), **changes}


def hf_conv(layout: Layout, needle: str) -> Layout:
    """MLX's conv weights (C, K, 1) written as HF's (C, 1, K)."""
    return {k: (dt, (s[0], s[2], s[1]) if needle in k and len(s) == 3 else s)
            for k, (dt, s) in layout.items()}


def _tiny(family: str, **changes: Any) -> dict[str, Any]:
    return fixture(family, vocab_size=256, torch_dtype="bfloat16", **changes)


def _mamba() -> list[Case]:
    cfg = _tiny("mamba", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                time_step_rank=4)
    own = model_layout(cfg)
    untied = _tiny("mamba", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   time_step_rank=4, tie_word_embeddings=False)
    # HF's layout; MLX's own (conv weights already (C, K, 1)) passes through.
    return [(cfg, hf_conv(own, "conv1d.weight")), (cfg, own),
            (untied, hf_conv(model_layout(untied), "conv1d.weight"))]


def _mamba2() -> list[Case]:
    cfg = _tiny("mamba2", hidden_size=64, intermediate_size=128, num_hidden_layers=2)
    own = model_layout(cfg)
    return [(cfg, hf_conv(own, "conv1d.weight")), (cfg, own)]


def _plamo2() -> list[Case]:
    cfg = _tiny("plamo2", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                hidden_size_per_head=16, mamba_num_heads=4, mamba_d_state=8)
    own = model_layout(cfg)
    return [(cfg, hf_conv(own, "conv1d.weight")), (cfg, own)]


def _recurrent_gemma() -> list[Case]:
    cfg = _tiny("recurrent_gemma", hidden_size=64, intermediate_size=128, num_hidden_layers=3)
    own = model_layout(cfg)
    hf = hf_conv(own, "conv_1d.weight")
    # Without lm_head.weight (tied, as published) the model drops its lm_head.
    tied = {k: v for k, v in hf.items() if k != "lm_head.weight"}
    return [(cfg, tied), (cfg, hf), (cfg, own)]


def _rwkv7() -> list[Case]:
    cfg = _tiny("rwkv7", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                head_dim=16)
    own = model_layout(cfg)
    # HF keeps k_k, k_a and the per-head GroupNorm flat (hidden,).
    hf = {k: (dt, (64,) if any(s in k for s in ("k_k", "k_a", "g_norm")) else shape)
          for k, (dt, shape) in own.items()}
    return [(cfg, hf), (cfg, own)]


def _lfm2() -> list[Case]:
    cfg = _tiny("lfm2", hidden_size=64, block_dim=64, block_ff_dim=128, num_hidden_layers=2,
                full_attn_idxs=[1])
    own = model_layout(cfg)
    return [(cfg, hf_conv(own, "conv.weight")), (cfg, own)]


def _olmo_hybrid() -> list[Case]:
    kinds = ["linear_attention", "full_attention"]
    cfg = _tiny("olmo_hybrid", num_hidden_layers=2, layer_types=kinds)
    tied = _tiny("olmo_hybrid", num_hidden_layers=2, layer_types=kinds,
                 tie_word_embeddings=True)
    own = model_layout(cfg)
    # A tied checkpoint that still ships lm_head.weight: sanitize drops it.
    with_head = {**model_layout(tied), "lm_head.weight": ("BF16", (256, 64))}
    return [(cfg, hf_conv(own, "conv1d.weight")), (cfg, own),
            (tied, hf_conv(with_head, "conv1d.weight"))]


_W = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}


def _lfm2_moe() -> list[Case]:
    cfg = _tiny("lfm2_moe", hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                num_experts=4, num_hidden_layers=3, num_dense_layers=1, full_attn_idxs=[1])
    own = model_layout(cfg)
    hf = unstack(own, r"(.+)\.switch_mlp\.(\w+)\.weight",
                 lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    hf = rename(hf, lambda k: re.sub(r"\b(gate_proj|down_proj|up_proj)\.weight$",
                                     lambda m: _W[m[1]] + ".weight", k))
    return [(cfg, hf_conv(hf, "conv.weight")), (cfg, own)]


def _jamba() -> list[Case]:
    shape = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
             "mamba_expand": 2, "mamba_d_state": 8}
    cfg = _tiny("jamba", **shape)
    untied = _tiny("jamba", tie_word_embeddings=False, **shape)

    def hf(c: dict[str, Any]) -> Layout:
        out = unstack(model_layout(c), r"(.+)\.switch_mlp\.(\w+)\.weight",
                      lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
        return hf_conv(out, "conv1d.weight")

    # Tied (its default) with a redundant lm_head.weight, which sanitize drops.
    return [(cfg, {**hf(cfg), "lm_head.weight": ("BF16", (256, 64))}),
            (untied, hf(untied)), (cfg, model_layout(cfg))]


def _granitemoehybrid() -> list[Case]:
    shape = {"hidden_size": 64, "intermediate_size": 128, "shared_intermediate_size": 128,
             "num_hidden_layers": 2, "layer_types": ["mamba", "attention"]}
    moe = _tiny("granitemoehybrid", **shape)
    dense = _tiny("granitemoehybrid", num_local_experts=0, **shape)

    def hf(c: dict[str, Any]) -> Layout:
        out: Layout = {}
        for k, (dt, s) in model_layout(c).items():
            # block_sparse_moe.switch_mlp.* (experts) or mlp.* (dense: HF's shared_mlp)
            m = re.fullmatch(r"(.+)\.(block_sparse_moe\.switch_mlp|mlp)\.(gate|up|down)_proj"
                             r"\.weight", k)
            if m is None:
                out[k] = (dt, s)
                continue
            fused = f"{m[1]}.{'shared_mlp' if m[2] == 'mlp' else 'block_sparse_moe'}"
            if m[3] == "down":
                out[f"{fused}.output_linear.weight"] = (dt, s)
            elif m[3] == "gate":  # gate and up fused along the output rows
                rows = -2 if len(s) == 3 else 0
                fs = list(s)
                fs[rows] *= 2
                out[f"{fused}.input_linear.weight"] = (dt, tuple(fs))
        out = hf_conv(out, "conv1d.weight")
        return {**out, "lm_head.weight": ("BF16", (256, 64))}  # shipped though tied

    return [(moe, hf(moe)), (dense, hf(dense)), (moe, model_layout(moe))]


CASES: dict[str, Callable[[], list[Case]]] = {
    "mamba": _mamba,
    "mamba2": _mamba2,
    "plamo2": _plamo2,
    "recurrent_gemma": _recurrent_gemma,
    "rwkv7": _rwkv7,
    "lfm2": _lfm2,
    "olmo_hybrid": _olmo_hybrid,
    "lfm2_moe": _lfm2_moe,
    "jamba": _jamba,
    "granitemoehybrid": _granitemoehybrid,
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {}
