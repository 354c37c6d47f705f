"""Checkpoint layouts for the wrappers families' sanitize replays (model/sanitize_wrappers.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sanitize_oracle import Case, Layout, fixture, model_layout, rename, unstack, with_extra


def text_fixture(family: str, top: dict[str, Any] | None = None, **text: Any) -> dict[str, Any]:
    """The family's fixture with ``text`` changed in its text_config (and ``top`` at the top)."""
    cfg = fixture(family, **(top or {}))
    return {**cfg, "text_config": {**cfg["text_config"], **text}}


def tower(*prefixes: str) -> Layout:
    """A few tensors under each prefix, standing for a vision or audio tower mlx-lm drops."""
    out: Layout = {}
    for p in prefixes:
        out[f"{p}.layers.0.attn.q_proj.weight"] = ("BF16", (16, 16))
        out[f"{p}.norm.weight"] = ("F32", (16,))
    return out


def _pop_towers(family: str) -> list[Case]:
    cfg = text_fixture(family, hidden_size=64, intermediate_size=128, vocab_size=256,
                       num_hidden_layers=2, torch_dtype="bfloat16")
    if family == "lfm2-vl":
        cfg["text_config"].update(block_dim=64, block_ff_dim=128, layer_types=[
            "full_attention", "conv"])
    hf = model_layout(cfg)
    return [(cfg, with_extra(hf, tower("vision_tower", "multi_modal_projector"))),
            (cfg, with_extra(tower("multi_modal_projector"), hf))]


def _gemma3n() -> list[Case]:
    cfg = text_fixture("gemma3n", torch_dtype="bfloat16")
    hf = model_layout(cfg)
    towers = tower("model.vision_tower", "model.audio_tower", "model.embed_audio",
                   "model.embed_vision")
    return [(cfg, with_extra(hf, towers)), (cfg, with_extra(tower("model.audio_tower"), hf))]


def _qwen_vl(family: str) -> list[Case]:
    cfg = text_fixture(family, torch_dtype="bfloat16", num_hidden_layers=2)
    mlx = model_layout(cfg)
    # Newer HF: model.language_model.* and model.visual.*, lm_head at the top.
    new = rename(mlx, lambda k: k.replace("language_model.model.", "model.language_model.")
                 .replace("language_model.lm_head", "lm_head"))
    old = rename(mlx, lambda k: k.removeprefix("language_model."))
    tied = text_fixture(family, torch_dtype="bfloat16", num_hidden_layers=2,
                        tie_word_embeddings=True)
    old_tied = rename(model_layout(tied), lambda k: k.removeprefix("language_model."))
    return [(cfg, with_extra(new, tower("model.visual"))),
            (cfg, with_extra(tower("visual"), old)),
            (tied, with_extra(old_tied, tower("vision_tower"))),
            (cfg, mlx)]


def _llama4() -> list[Case]:
    cfg = text_fixture("llama4", torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    hf: Layout = {}
    for k, (dt, shape) in mlx.items():
        if k.endswith("experts.gate_proj.weight"):  # (E, I, H) -> fused (E, H, 2I)
            e, i, h = shape
            hf[k.replace("gate_proj.weight", "gate_up_proj")] = (dt, (e, h, 2 * i))
        elif k.endswith("experts.up_proj.weight"):
            continue
        elif k.endswith("experts.down_proj.weight"):  # (E, H, I) -> (E, I, H)
            hf[k.removesuffix(".weight")] = (dt, (shape[0], shape[2], shape[1]))
        else:
            hf[k] = (dt, shape)
    return [(cfg, with_extra(hf, tower("vision_model", "multi_modal_projector"))), (cfg, mlx)]


def _kimi_vl() -> list[Case]:
    cfg = text_fixture("kimi_vl", torch_dtype="bfloat16", num_hidden_layers=2)
    mlx = model_layout(cfg)
    hf = unstack(mlx, r"(.+\.mlp)\.switch_mlp\.(\w+)\.weight",
                 lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    rope = {f"language_model.model.layers.{i}.self_attn.rotary_emb.inv_freq": ("F32", (4,))
            for i in range(2)}
    return [(cfg, with_extra(hf, {**rope, **tower("vision_tower", "multi_modal_projector")})),
            (cfg, mlx)]


def _fused_qwen_experts(mlx: Layout) -> Layout:
    """switch_mlp gate/up (E, I, H) -> experts.gate_up_proj (E, H, 2I); down (E, H, I) ->
    experts.down_proj (E, I, H)."""
    hf: Layout = {}
    for k, (dt, shape) in mlx.items():
        if k.endswith("switch_mlp.gate_proj.weight"):
            e, i, h = shape
            hf[k.replace("switch_mlp.gate_proj.weight", "experts.gate_up_proj")] = (
                dt, (e, h, 2 * i))
        elif k.endswith("switch_mlp.up_proj.weight"):
            continue
        elif k.endswith("switch_mlp.down_proj.weight"):
            hf[k.replace("switch_mlp.down_proj.weight", "experts.down_proj")] = (
                dt, (shape[0], shape[2], shape[1]))
        else:
            hf[k] = (dt, shape)
    return hf


def _qwen3_vl_moe() -> list[Case]:
    cfg = text_fixture("qwen3_vl_moe", torch_dtype="bfloat16", num_hidden_layers=2)
    mlx = model_layout(cfg)
    fused = _fused_qwen_experts(mlx)
    new = rename(fused, lambda k: k.replace("language_model.model.", "model.language_model.")
                 .replace("language_model.lm_head", "lm_head"))
    # Older: language_model.{model,lm_head} already, towers under visual (anything else at
    # the top is dropped with them).
    old = with_extra(tower("visual"), fused)
    return [(cfg, with_extra(new, tower("model.visual"))), (cfg, old),
            (cfg, with_extra(mlx, {"mtp.fc.weight": ("BF16", (8, 8))}))]


def _gemma4_hf(mlx: Layout, cfg: dict[str, Any]) -> Layout:
    """gemma4_text's HF names: fused experts, K/V of the KV-shared layers, rotary buffers and
    activation ranges (all dropped or rebuilt by its sanitize)."""
    hf: Layout = {}
    n, shared = cfg["num_hidden_layers"], cfg["num_kv_shared_layers"]
    for k, (dt, shape) in mlx.items():
        if k.endswith("experts.switch_glu.gate_proj.weight"):  # (E, I, H) -> (E, 2I, H)
            e, i, h = shape
            hf[k.replace("switch_glu.gate_proj.weight", "gate_up_proj")] = (dt, (e, 2 * i, h))
        elif k.endswith("experts.switch_glu.up_proj.weight"):
            continue
        elif k.endswith("experts.switch_glu.down_proj.weight"):
            hf[k.replace("switch_glu.down_proj.weight", "down_proj")] = (dt, shape)
        else:
            hf[k] = (dt, shape)
        if k.endswith("self_attn.q_norm.weight"):
            p = k.removesuffix("q_norm.weight")
            if int(k.split("layers.")[1].split(".")[0]) >= n - shared:
                hf[p + "k_proj.weight"] = (dt, (shape[0], cfg["hidden_size"]))
                hf[p + "v_proj.weight"] = (dt, (shape[0], cfg["hidden_size"]))
                hf[p + "k_norm.weight"] = (dt, shape)
            hf[p + "rotary_emb.inv_freq"] = ("F32", (shape[0] // 2,))
            hf[p + "o_proj.input_max"] = ("F32", ())
            hf[p + "o_proj.output_min"] = ("F32", ())
    return hf


_GEMMA4_MOE = {"num_hidden_layers": 3, "num_kv_shared_layers": 1, "enable_moe_block": True,
               "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
               "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32,
               "attention_k_eq_v": True}


def _gemma4_text() -> list[Case]:
    dense = fixture("gemma4_text", torch_dtype="bfloat16")
    moe = fixture("gemma4_text", torch_dtype="bfloat16", **_GEMMA4_MOE)
    return [(c, _gemma4_hf(model_layout(c), c)) for c in (dense, moe)] + [
        (moe, model_layout(moe))]


def _gemma4() -> list[Case]:
    cfg = text_fixture("gemma4", torch_dtype="bfloat16", **{
        **_GEMMA4_MOE, "hidden_size": 64, "head_dim": 16, "global_head_dim": 32,
        "intermediate_size": 128, "hidden_size_per_layer_input": 16, "num_attention_heads": 2,
        "sliding_window_pattern": 2})
    text = {**cfg["text_config"], "vocab_size": cfg["vocab_size"]}
    mlx = model_layout(cfg)
    hf = rename(_gemma4_hf(mlx, text),
                lambda k: k.replace("language_model.model.", "model.language_model."))
    towers = tower(*(f"model.{t}" for t in ("vision_tower", "multi_modal_projector",
                                            "audio_tower", "embed_audio", "embed_vision",
                                            "vision_embedder")))
    return [(cfg, with_extra(hf, towers)),
            (cfg, with_extra(mlx, tower("vision_tower")))]


def _deepseek_hf(mlx: Layout, text: dict[str, Any], prefix: str) -> Layout:
    """DeepSeek-V3's HF names under ``prefix``: per-expert MLPs, kv_b_proj whole (heads x
    (nope + v), rank), rotary buffers."""
    heads, nope, vdim = (text["num_attention_heads"], text["qk_nope_head_dim"],
                         text["v_head_dim"])
    hf = unstack(mlx, rf"({prefix}model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight",
                 lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    out: Layout = {}
    for k, (dt, shape) in hf.items():
        if k.endswith("self_attn.embed_q.weight"):
            p = k.removesuffix("embed_q.weight")
            out[p + "kv_b_proj.weight"] = (dt, (heads * (nope + vdim), shape[1]))
            out[p + "rotary_emb.inv_freq"] = ("F32", (4,))
        elif not k.endswith("self_attn.unembed_out.weight"):
            out[k] = (dt, shape)
    return out


def _kimi_k25() -> list[Case]:
    cfg = fixture("kimi_k25", torch_dtype="bfloat16")
    text = cfg["text_config"]
    mlx = model_layout(cfg)
    hf = _deepseek_hf(mlx, text, r"language_model\.")
    towers = tower("vision_tower", "vision_model", "multi_modal_projector", "mm_projector")
    mtp = {"language_model.model.layers.61.eh_proj.weight": ("BF16", (64, 128))}
    # FP8 (read by mlx as uint8) with one scale per 128x128 block, dequantized to bfloat16.
    fp8 = {k: ("U8", shape) if k.endswith("q_a_proj.weight") else (dt, shape)
           for k, (dt, shape) in hf.items()}
    fp8.update({k.replace(".weight", ".weight_scale_inv"): ("F32", (1, 1))
                for k in hf if k.endswith("q_a_proj.weight")})
    return [(cfg, with_extra(hf, {**towers, **mtp})), (cfg, fp8), (cfg, mlx)]


def _minimax_m3_vl() -> list[Case]:
    dense0 = text_fixture("minimax_m3_vl", torch_dtype="bfloat16",
                          mlp_layer_types=["dense", "sparse", "sparse", "sparse"])
    mlx = model_layout(dense0)
    names = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}
    hf = unstack(mlx, r"(.+\.block_sparse_moe)\.switch_mlp\.(\w+)\.weight",
                 lambda m, e: f"{m[1]}.experts.{e}.{names[m[2]]}.weight")
    # Layer 0 is dense, exported under block_sparse_moe.
    hf = rename(hf, lambda k: k.replace("layers.0.mlp.", "layers.0.block_sparse_moe."))
    towers = tower("vision_tower", "multi_modal_projector", "patch_merge_mlp")
    # Shared expert as wide as the routed ones, folded in as expert n (fused gate_up on layer
    # 1, separate on 2); layer 3 keeps it apart, both fused.
    fold = text_fixture("minimax_m3_vl", torch_dtype="bfloat16", shared_intermediate_size=128)
    folded: Layout = {}
    for k, (dt, shape) in model_layout(fold).items():
        layer = k.split("layers.")[1][0] if "layers." in k else ""
        if "shared_experts" in k and layer in "12":
            continue
        if "switch_mlp" in k and layer in "12":
            shape = (shape[0] + 1, *shape[1:])
        if layer in "13" and k.endswith(("gate_proj.weight", "up_proj.weight")) and (
                "switch_mlp" in k or "shared_experts" in k):
            if k.endswith("up_proj.weight"):
                continue
            k = k.replace("gate_proj.weight", "gate_up_proj.weight")
            shape = (*shape[:-2], 2 * shape[-2], shape[-1])
        folded[k] = (dt, shape)
    tied = text_fixture("minimax_m3_vl", torch_dtype="bfloat16", tie_word_embeddings=True)
    with_head = with_extra(model_layout(tied), {"language_model.lm_head.weight": ("BF16",
                                                                                  (128, 64))})
    return [(dense0, with_extra(towers, hf)), (fold, folded), (tied, with_head), (dense0, mlx)]


_MUSE_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 2, "patch_size": 4, "pos_emb_height": 4,
                "pos_emb_width": 4}


def _muse_hf(mlx: Layout, text: dict[str, Any]) -> Layout:
    """Muse Spark's HF names: q, k, v and the output gate apart, residual gates as one
    ``*_residual_gate.gate`` each, zero-centred norms in float32, experts' gate and up fused
    along axis 1, activation input scales; vision q, k, v apart."""
    q = text["num_attention_heads"] * text["head_dim"]
    kv = text["num_key_value_heads"] * text["head_dim"]
    gates = {"add_attn": "post_attention_residual_gate.gate",
             "add_ffn": "post_feedforward_residual_gate.gate"}
    hf: Layout = {}
    for k, (dt, shape) in mlx.items():
        if k.endswith("self_attn.qkvg_proj.weight"):
            p = k.removesuffix("qkvg_proj.weight")
            for name, rows in (("q", q), ("k", kv), ("v", kv), ("gate", shape[0] - q - 2 * kv)):
                hf[f"{p}{name}_proj.weight"] = (dt, (rows, shape[1]))
        elif k.endswith(("attn.qkv_proj.weight", "attn.qkv_proj.bias")):
            param = k.rsplit(".", 1)[1]
            p = k.removesuffix(f"qkv_proj.{param}")
            for name in "qkv":
                hf[f"{p}{name}_proj.{param}"] = (dt, (shape[0] // 3, *shape[1:]))
        elif k.endswith("_alpha"):
            hf[k.rsplit(".", 1)[0] + "." + gates[k.rsplit(".", 1)[1][: -len("_alpha")]]] = (
                dt, shape)
        elif k.endswith("_beta"):
            continue
        elif k.endswith("experts.gate_proj.weight"):
            e, i, h = shape
            hf[k.replace("gate_proj.weight", "gate_up_proj")] = (dt, (e, 2 * i, h))
            hf[k.replace("gate_proj.weight", "gate_up_proj_input_scale")] = ("F32", ())
        elif k.endswith("experts.up_proj.weight"):
            continue
        elif k.endswith("experts.down_proj.weight"):
            hf[k.removesuffix(".weight")] = (dt, shape)
            hf[k.replace("down_proj.weight", "down_proj_input_scale")] = ("F32", ())
        elif k.startswith("model.language_model.layers.") and k.endswith("norm.weight") and (
                "self_attn" not in k):
            hf[k] = ("F32", shape)
        else:
            hf[k] = (dt, shape)
    return hf


def _muse_spark() -> list[Case]:
    cfg = fixture("muse_spark", torch_dtype="bfloat16")
    text = cfg["text_config"]
    mlx = model_layout(cfg)
    towers = tower("model.audio_tower", "model.vision_tower", "model.vision_adapter",
                   "model.vision_projection")
    seeing = fixture("muse_spark", torch_dtype="bfloat16", vision_config=_MUSE_VISION)
    seen = model_layout(seeing)
    return [(cfg, with_extra(_muse_hf(mlx, text), towers)),
            (seeing, with_extra(_muse_hf(seen, text), tower("model.audio_tower"))),
            (seeing, seen)]


CASES: dict[str, Callable[[], list[Case]]] = {
    "pixtral": lambda: _pop_towers("pixtral"),
    "lfm2-vl": lambda: _pop_towers("lfm2-vl"),
    "gemma3n": _gemma3n,
    "qwen2_vl": lambda: _qwen_vl("qwen2_vl"),
    "qwen3_vl": lambda: _qwen_vl("qwen3_vl"),
    "llama4": _llama4,
    "kimi_vl": _kimi_vl,
    "qwen3_vl_moe": _qwen3_vl_moe,
    "gemma4_text": _gemma4_text,
    "gemma4": _gemma4,
    "kimi_k25": _kimi_k25,
    "minimax_m3_vl": _minimax_m3_vl,
    "muse_spark": _muse_spark,
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
_NO_LAYER = ("every name with .self_attn.k_proj/v_proj/k_norm the model loads is "
             "model.layers.<int>.*; any other is kept and fails the strict load")
_MXFP8 = ("MXFP8 source: the .scales it makes load only into a model mlx-lm quantizes from "
          "the checkpoint's quantization config first; the oracle's model is unquantized")
_NVFP4 = ("NVFP4 source: the packed uint32 weights, .scales and .global_scale it makes load only "
          "into a model mlx-lm quantizes from the checkpoint's quantization config first; the "
          "oracle's model is unquantized")
_MUSE_NVFP4_LINES = (
    "gate_proj = gate_proj.view(mx.uint32)", "up_proj = up_proj.view(mx.uint32)",
    "gate_scales, up_scales = mx.split(v, 2, axis=1)",
    'sanitized[experts + "gate_proj.scales"] = gate_scales',
    'sanitized[experts + "up_proj.scales"] = up_scales', "gate_gs, up_gs = v[:, 0], v[:, 1]",
    'sanitized[experts + "gate_proj.global_scale"] = (', "gate_gs * _NVFP4_SCALE_2_TO_GLOBAL",
    'sanitized[experts + "up_proj.global_scale"] = (', "up_gs * _NVFP4_SCALE_2_TO_GLOBAL",
    'sanitized[experts + "down_proj.scales"] = v',
    'sanitized[experts + "down_proj.global_scale"] = (', "v * _NVFP4_SCALE_2_TO_GLOBAL")
UNREACHABLE: dict[str, dict[str, str]] = {
    "muse_spark": dict.fromkeys(_MUSE_NVFP4_LINES, _NVFP4),
    "minimax_m3_vl": {'base = k[: -len(".weight_scale_inv")]': _MXFP8,
                      'out[f"{base}.scales"] = out.pop(k)': _MXFP8,
                      'out[f"{base}.weight"] = out[f"{base}.weight"].view(mx.uint32)': _MXFP8},
    "gemma4_text": {"except (IndexError, ValueError):": _NO_LAYER, "pass": _NO_LAYER},
}
