"""Checkpoint layouts for the recurrent families' sanitize replays (model/sanitize_recurrent.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sanitize_oracle import Case, Layout, fixture, model_layout, rename, unstack


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


def hf_kv_b(layout: Layout) -> Layout:
    """MLA's embed_q (H, rank, nope) and unembed_out (H, v, rank) written as HF's fused
    kv_b_proj (H * (nope + v), rank)."""
    out: Layout = {}
    for k, (dt, s) in layout.items():
        if k.endswith(".embed_q.weight"):
            p = k.removesuffix("embed_q.weight")
            heads, rank, nope = s
            v = layout[p + "unembed_out.weight"][1][1]
            out[p + "kv_b_proj.weight"] = (dt, (heads * (nope + v), rank))
        elif not k.endswith(".unembed_out.weight"):
            out[k] = (dt, s)
    return out


def hf_experts(layout: Layout, switch: str = "switch_mlp", experts: str = "experts") -> Layout:
    """Stacked (E, ...) switch_mlp tensors written as E per-expert ones."""
    return unstack(layout, rf"(.+)\.{switch}\.(\w+)\.(weight|bias)",
                   lambda m, e: f"{m[1]}.{experts}.{e}.{m[2]}.{m[3]}")


def _bailing_moe_linear() -> list[Case]:
    shape = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
             "num_hidden_layers": 3, "first_k_dense_replace": 1, "head_dim": 16}
    cfg = _tiny("bailing_moe_linear", norm_head=True, **shape)
    tied = _tiny("bailing_moe_linear", tie_word_embeddings=True, **shape)

    def hf(c: dict[str, Any]) -> Layout:
        return rename(hf_experts(model_layout(c)),
                      lambda k: k.replace(".mlp.gate.gate_proj.", ".mlp.gate."))

    return [(cfg, hf(cfg)), (tied, {**hf(tied), "lm_head.weight": ("BF16", (256, 64))}),
            (cfg, model_layout(cfg))]


def _bailing_hybrid() -> list[Case]:
    shape = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
             "num_hidden_layers": 4, "first_k_dense_replace": 1, "layer_group_size": 2,
             "v_head_dim": 8}  # v != nope: the kv_b_proj split is told apart
    cfg = _tiny("bailing_hybrid", **shape)
    tied = _tiny("bailing_hybrid", tie_word_embeddings=True, **shape)

    def hf(c: dict[str, Any]) -> Layout:
        out = rename(hf_experts(model_layout(c)),
                     lambda k: k.replace(".mlp.gate.gate_proj.", ".mlp.gate."))
        out = hf_kv_b(out)
        # The MTP layer the checkpoint appends after the base ones (index 4).
        mtp = {k.replace("model.layers.3.", "model.layers.4."): v for k, v in out.items()
               if k.startswith("model.layers.3.")}
        return {**out, **mtp}

    return [(cfg, hf(cfg)), (tied, {**hf(tied), "lm_head.weight": ("BF16", (256, 64))}),
            (cfg, model_layout(cfg))]


def _kimi_linear() -> list[Case]:
    shape = {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
             "num_experts": 4, "num_experts_per_token": 2, "num_hidden_layers": 3,
             "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
             "head_dim": 16, "num_shared_experts": 1, "v_head_dim": 8,
             "linear_attn_config": {"head_dim": 16, "kda_layers": [1, 3], "num_heads": 4}}
    cfg = _tiny("kimi_linear", **shape)
    tied = _tiny("kimi_linear", tie_word_embeddings=True, **shape)

    def hf(c: dict[str, Any]) -> Layout:
        out: Layout = {}
        for k, (dt, s) in hf_kv_b(model_layout(c)).items():
            m = re.fullmatch(r"(model\.layers\.\d+)\.mlp\.(.+)", k)
            if m and m[1] != "model.layers.0":  # the MoE layers: block_sparse_moe
                if m[2].startswith("switch_mlp."):
                    proj = m[2].split(".")[1]
                    for e in range(s[0]):
                        out[f"{m[1]}.block_sparse_moe.experts.{e}.{_W[proj]}.weight"] = (
                            dt, s[1:])
                    continue
                tail = "gate.e_score_correction_bias" if m[2] == "e_score_correction_bias" \
                    else m[2]
                out[f"{m[1]}.block_sparse_moe.{tail}"] = (dt, s)
            elif re.search(r"\.(q|k|v)_conv\.conv\.weight$", k):
                out[re.sub(r"_conv\.conv\.weight$", "_conv1d.weight", k)] = (dt, (s[0], 1, s[1]))
            elif k.endswith(".dt_bias"):
                out[k] = (dt, (4, 16))
            else:
                out[k] = (dt, s)
        return {**out, "model.mtp.0.norm.weight": ("BF16", (64,))}

    return [(cfg, hf(cfg)), (tied, {**hf(tied), "lm_head.weight": ("BF16", (256, 64))}),
            (cfg, model_layout(cfg))]


def _longcat_flash_ngram() -> list[Case]:
    cfg = _tiny("longcat_flash_ngram", hidden_size=64, ffn_hidden_size=128,
                expert_ffn_hidden_size=32, n_routed_experts=4, num_layers=2,
                num_hidden_layers=2, ngram_vocab_size_ratio=2, v_head_dim=16)
    own = model_layout(cfg)
    hf = rename(hf_kv_b(hf_experts(own)), lambda k: k.replace(
        "model.ngram_embeddings.word_embeddings.", "model.embed_tokens."))
    return [(cfg, {**hf, "model.mtp.layers.0.norm.weight": ("BF16", (64,))}), (cfg, own)]


def _falcon_h1() -> list[Case]:
    shape = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "mamba_d_ssm": 64, "mamba_d_state": 8, "mamba_n_heads": 4, "mamba_d_head": 16,
             "head_dim": 16, "num_attention_heads": 4}
    cfg = _tiny("falcon_h1", **shape)
    untied = _tiny("falcon_h1", tie_word_embeddings=False, **shape)
    return [(cfg, hf_conv(model_layout(cfg), "conv1d.weight")),
            (untied, hf_conv(model_layout(untied), "conv1d.weight")),
            (cfg, model_layout(cfg))]


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
    "bailing_moe_linear": _bailing_moe_linear,
    "bailing_hybrid": _bailing_hybrid,
    "kimi_linear": _kimi_linear,
    "longcat_flash_ngram": _longcat_flash_ngram,
    "falcon_h1": _falcon_h1,
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
_QUANTIZED_KV_B = ("a quantized kv_b_proj (.scales/.biases) loads only into a model built "
                   "quantized, which this strict oracle never builds; the replay's output for it "
                   "is checked unloaded in tests/test_sanitize_kv_b.py")
UNREACHABLE: dict[str, dict[str, str]] = {
    "bailing_moe_linear": dict.fromkeys((
        'gate_bias = weights.pop(f"{prefix}.mlp.gate.bias")',
        'weights[f"{prefix}.mlp.gate.gate_proj.bias"] = gate_bias',
    ), "the router's gate_proj is built with bias=False: a gate.bias fails the strict load"),
    "falcon_h1": {
        "param *= args.attention_in_multiplier * args.key_multiplier":
            "no falcon_h1 module has a key_proj: a key_proj.weight fails the strict load",
    },
    "kimi_linear": dict.fromkeys((
        "dims = self.args.kv_lora_rank",
        'scales = weights.pop(f"{attn_prefix}.kv_b_proj.scales")',
        'biases = weights.pop(f"{attn_prefix}.kv_b_proj.biases")',
        "bits = (v.shape[-1] * 32) // dims",
        "group_size = dims // scales.shape[-1]",
        "v = mx.dequantize(",
        "v, scales, biases, bits=bits, group_size=group_size",
        "wk, wk_s, wk_b = mx.quantize(wk, bits=bits, group_size=group_size)",
        "wv, wv_s, wv_b = mx.quantize(wv, bits=bits, group_size=group_size)",
        'weights[f"{attn_prefix}.embed_q.scales"] = wk_s',
        'weights[f"{attn_prefix}.embed_q.biases"] = wk_b',
        'weights[f"{attn_prefix}.unembed_out.scales"] = wv_s',
        'weights[f"{attn_prefix}.unembed_out.biases"] = wv_b',
    ), _QUANTIZED_KV_B),
}
