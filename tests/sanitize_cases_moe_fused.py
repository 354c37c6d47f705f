"""Checkpoint layouts for the moe_fused families' sanitize replays (model/sanitize_moe_fused.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sanitize_oracle import Case, Layout, fixture, model_layout, rename, unstack, with_extra


def _without(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    """``cfg`` without ``key``: the family's ModelArgs default applies."""
    return {k: v for k, v in cfg.items() if k != key}


def _experts(layout: Layout, stacked: str, each: Callable[[re.Match, int], str]) -> Layout:
    """Stacked (E, ...) experts matching ``stacked`` written one per expert."""
    return unstack(layout, stacked, each)


def _fp8(layout: Layout, names: tuple[str, ...], scale_first: bool = False,
         blocks: tuple[int, int] | None = None) -> Layout:
    """``names`` stored as FP8 (what mx.load reads F8_E4M3 as: uint8) with 128x128-block
    weight_scale_inv scales, the scales before the weight when ``scale_first``."""
    out: Layout = {}
    for k, (dt, shape) in layout.items():
        if k not in names:
            out[k] = (dt, shape)
            continue
        scale = ("F32", blocks or tuple(-(-d // 128) for d in shape))
        if scale_first:
            out[k + "_scale_inv"] = scale
        out[k] = ("U8", shape)
        if not scale_first:
            out[k + "_scale_inv"] = scale
    return out


_BF16 = {"torch_dtype": "bfloat16"}


# ------------------------------------------------------------------ spark2_5

def _spark2_5() -> list[Case]:
    cfg = fixture("spark2_5", num_hidden_layers=2, tie_word_embeddings=False, **_BF16)
    hf = with_extra(model_layout(cfg), {"model.rotary_emb.inv_freq": ("F32", (8,))})
    # Tied by default; an MLX conversion's embed_tokens name and a stray lm_head.
    tied = _without(cfg, "tie_word_embeddings")
    mlx = rename(model_layout(tied), lambda k: k.replace("model.embedding.", "model.embed_tokens."))
    return [(cfg, hf), (tied, with_extra(mlx, {"lm_head.weight": ("BF16", (128, 64))}))]


# ------------------------------------------------------------------ gear

def _gear() -> list[Case]:
    cfg = fixture("gear", **_BF16)
    own = model_layout(cfg)
    hf = {k: (dt, (s[0], s[2], s[1]) if k.endswith("_conv.weight") else s)
          for k, (dt, s) in own.items()}
    hf = with_extra(hf, {"model.rotary_emb.inv_freq": ("F32", (8,)),
                         "model.embed_tokens.embed_scale": ("F32", ())})
    tied = _without(cfg, "tie_word_embeddings")  # tied by default
    mlx = with_extra(model_layout(tied), {"lm_head.weight": ("BF16", (128, 64))})
    return [(cfg, hf), (tied, mlx)]


# ------------------------------------------------------------------ bailing_moe

def _bailing_hf(cfg: dict[str, Any]) -> Layout:
    hf = _experts(model_layout(cfg), r"(model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight",
                  lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    return rename(hf, lambda k: k.replace(".mlp.gate.gate_proj.", ".mlp.gate."))


def _bailing_moe() -> list[Case]:
    cfg = fixture("bailing_moe", num_hidden_layers=3, first_k_dense_replace=1, vocab_size=256,
                  **_BF16)
    normed = dict(cfg, norm_head=True)
    tied = dict(cfg, tie_word_embeddings=True)
    return [(cfg, _bailing_hf(cfg)),
            (normed, model_layout(normed)),  # already MLX: norm_head rescales lm_head only
            (tied, with_extra(_bailing_hf(tied), {"lm_head.weight": ("BF16", (256, 64))}))]


# ------------------------------------------------------------------ laguna

def _laguna() -> list[Case]:
    cfg = fixture("laguna", num_hidden_layers=2, hidden_size=64, vocab_size=256, num_experts=4,
                  layer_types=["full_attention", "sliding_attention"],
                  mlp_layer_types=["dense", "sparse"], num_attention_heads_per_layer=[4, 4],
                  **_BF16)

    def hf(c: dict[str, Any]) -> Layout:
        out = _experts(model_layout(c), r"(model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight",
                       lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
        return rename(out, lambda k: k.replace(".mlp.gate.proj.", ".mlp.gate.").replace(
            ".mlp.gate.e_score_correction_bias", ".mlp.experts.e_score_correction_bias"))

    tied = dict(cfg, tie_word_embeddings=True)
    repacked = {"language_model." + k: v for k, v in
                with_extra(hf(tied), {"lm_head.weight": ("BF16", (256, 64))}).items()}
    return [(cfg, hf(cfg)), (tied, repacked), (cfg, model_layout(cfg))]


# ------------------------------------------------------------------ step3p5

_STEP3P5_HF = ((".mlp.switch_mlp.", ".moe."), (".mlp.gate.gate.", ".moe.gate."),
               (".mlp.gate.router_bias", ".moe.router_bias"),
               (".mlp.share_expert.", ".share_expert."))


def _step3p5() -> list[Case]:
    cfg = fixture("step3p5", num_hidden_layers=2, hidden_size=64, head_dim=16, vocab_size=256,
                  layer_types=["full_attention", "sliding_attention"], moe_layers_enum="1",
                  partial_rotary_factors=[0.5, 1.0], rope_theta=[10000.0, 10000.0],
                  moe_num_experts=4, intermediate_size=128, moe_intermediate_size=64,
                  share_expert_dim=64, **_BF16)
    own = model_layout(cfg)

    def vanilla(k: str) -> str:
        for mlx, hf in _STEP3P5_HF:
            k = k.replace(mlx, hf)
        return k

    # The HF names, an MTP layer past num_hidden_layers and a .mtp tensor, all dropped.
    hf = with_extra(rename(own, vanilla), {
        "model.layers.2.self_attn.q_proj.weight": ("BF16", (64, 64)),
        "model.layers.2.input_layernorm.weight": ("BF16", (64,)),
        "model.mtp.embed_tokens.weight": ("BF16", (256, 64))})
    return [(cfg, hf), (cfg, own)]


# ------------------------------------------------------------------ minimax

def _minimax() -> list[Case]:
    cfg = fixture("minimax", num_hidden_layers=2, hidden_size=64, vocab_size=256,
                  num_local_experts=4, **_BF16)
    w = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}
    own = model_layout(cfg)
    hf = _experts(own, r"(model\.layers\.\d+\.block_sparse_moe)\.switch_mlp\.(\w+)\.weight",
                  lambda m, e: f"{m[1]}.experts.{e}.{w[m[2]]}.weight")
    fp8 = _fp8(hf, ("model.layers.0.self_attn.q_proj.weight",
                    "model.layers.1.block_sparse_moe.experts.0.w2.weight"))
    fp8 = _fp8(fp8, ("model.layers.0.self_attn.o_proj.weight",), scale_first=True)
    return [(cfg, hf), (cfg, fp8), (cfg, own)]


# ------------------------------------------------------------------ mimo_v2_flash

def _mimo_v2_flash() -> list[Case]:
    cfg = fixture("mimo_v2_flash", num_hidden_layers=2, hidden_size=64, vocab_size=256,
                  hybrid_layer_pattern=[0, 1], moe_layer_freq=[0, 1], n_routed_experts=4,
                  n_group=1, head_dim=16, swa_head_dim=16, v_head_dim=16, swa_v_head_dim=16,
                  intermediate_size=128, moe_intermediate_size=64, **_BF16)
    hf = _experts(model_layout(cfg), r"(model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight",
                  lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    mtp = {"model.mtp.layers.0.input_layernorm.weight": ("BF16", (64,)),
           "model.mtp.layers.0.self_attn.q_proj.weight": ("BF16", (64, 64))}
    fp8 = _fp8(hf, ("model.layers.1.mlp.experts.2.up_proj.weight",))
    # mimo pads to the scales' blocks: more scale rows than the weight needs still load.
    fp8 = _fp8(fp8, ("model.layers.0.self_attn.k_proj.weight",), scale_first=True,
               blocks=(2, 1))
    return [(cfg, with_extra(hf, mtp)), (cfg, fp8), (cfg, model_layout(cfg))]


# ------------------------------------------------------------------ hunyuan

def hunyuan_fused(cfg: dict[str, Any]) -> Layout:
    """The fused dense checkpoint (one expert: a plain MLP): qkv_proj rows are per kv head
    [its query group, k, v]; gate_and_up_proj is [up; gate]. Layer 1 (CLA) has q_proj only."""
    groups = cfg["num_attention_heads"] // cfg["num_key_value_heads"]
    fused: Layout = {}
    for k, (dt, s) in model_layout(cfg).items():
        layer0 = k.startswith("model.layers.0.")
        if layer0 and re.search(r"self_attn\.k_proj\.", k):
            fused[k.replace("k_proj", "qkv_proj")] = (dt, (s[0] * (groups + 2), *s[1:]))
        elif re.search(r"self_attn\.v_proj\.|mlp\.up_proj\.", k) or (
                layer0 and re.search(r"self_attn\.q_proj\.", k)):
            continue  # in qkv_proj / gate_and_up_proj
        elif k.endswith("mlp.gate_proj.weight"):
            fused[k.replace("gate_proj", "gate_and_up_proj")] = (dt, (2 * s[0], s[1]))
        else:
            fused[k] = (dt, s)
    return fused


def _hunyuan() -> list[Case]:
    cfg = fixture("hunyuan", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                  vocab_size=256, **_BF16)
    hf = _experts(model_layout(cfg), r"(model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight",
                  lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    dense = dict(cfg, num_experts=1)
    return [(cfg, hf), (dense, hunyuan_fused(dense)), (cfg, model_layout(cfg))]


# ------------------------------------------------------------------ gpt_oss

def _gpt_oss() -> list[Case]:
    cfg = fixture("gpt_oss", num_hidden_layers=2, hidden_size=64, vocab_size=256,
                  layer_types=["sliding_attention", "full_attention"], num_local_experts=4,
                  intermediate_size=64, head_dim=16, num_attention_heads=4, **_BF16)
    own = model_layout(cfg)
    hf: Layout = {}
    for k, (dt, s) in own.items():
        m = re.fullmatch(r"(model\.layers\.\d+\.mlp\.experts)\.(\w+)\.(weight|bias)", k)
        if m is None:
            hf[k] = (dt, s)
        elif m[2] == "gate_proj":  # gate rows interleaved with up rows
            name = f"{m[1]}.gate_up_proj" + (".weight" if m[3] == "weight" else "_bias")
            hf[name] = (dt, (s[0], 2 * s[1], *s[2:]))
        elif m[2] == "down_proj":
            hf[k if m[3] == "weight" else f"{m[1]}.down_proj_bias"] = (dt, s)
    # MXFP4-style _blocks viewed as uint32 and flattened: U8 groups of 16 bytes, and F32
    # (E, 2I, H, 1). Strict load checks names and shapes, not dtypes: mlx-lm loads both as
    # U32 weights of the float shapes (a mangled input, but it runs the unpacking lines).
    packed: Layout = {}
    for k, (dt, s) in hf.items():
        if k.endswith("gate_up_proj.weight"):
            packed[k.replace("gate_up_proj.weight", "gate_up_proj_blocks")] = ("F32", (*s, 1))
        elif k.endswith("down_proj.weight"):
            packed[k.replace("down_proj.weight", "down_proj_blocks")] = (
                "U8", (*s[:-1], s[-1] // 4, 16))
        else:
            packed[k] = (dt, s)
    return [(cfg, hf), (cfg, own), (cfg, packed)]


CASES: dict[str, Callable[[], list[Case]]] = {
    "spark2_5": _spark2_5,
    "gear": _gear,
    "bailing_moe": _bailing_moe,
    "laguna": _laguna,
    "step3p5": _step3p5,
    "minimax": _minimax,
    "mimo_v2_flash": _mimo_v2_flash,
    "hunyuan": _hunyuan,
    "gpt_oss": _gpt_oss,
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {
    "bailing_moe": {
        'gate_bias = weights.pop(f"{prefix}.mlp.gate.bias")':
            "its router gate_proj is Linear(bias=False): a gate.bias cannot load",
        'weights[f"{prefix}.mlp.gate.gate_proj.bias"] = gate_bias':
            "its router gate_proj is Linear(bias=False): a gate.bias cannot load",
    },
    "gpt_oss": {
        'k = k.replace("_scales", ".scales")':
            "MXFP4 scales load only into a model quantized by its quantization_config; the "
            "oracle's (and convert's, for a float source) model is not",
    },
}
