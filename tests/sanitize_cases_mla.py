"""Checkpoint layouts for the latent-attention families' sanitize replays
(model/sanitize_mla.py), each written by undoing mlx-lm's sanitize on the model's own
parameters; see tests/sanitize_oracle.py. Together a family's cases must run every line of its
mlx-lm sanitize (or name the line in UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sanitize_oracle import Case, Layout, fixture, model_layout, unstack


def experts_hf(layout: Layout, mlp: str = r"model\.layers\.\d+\.mlp", stacked: str = "switch_mlp",
               experts: str = "experts") -> Layout:
    """Stacked ``<mlp>.<stacked>.<proj>.weight`` (E, ...) written as E per-expert tensors
    ``<mlp>.<experts>.<e>.<proj>.weight``."""
    return unstack(layout, rf"({mlp})\.{stacked}\.(\w+)\.weight",
                   lambda m, e: f"{m[1]}.{experts}.{e}.{m[2]}.weight")


def kv_b_hf(layout: Layout) -> Layout:
    """Each attention's embed_q (H, rank, nope) and unembed_out (H, v, rank) written back as the
    one kv_b_proj (H * (nope + v), rank) mlx-lm's sanitize splits."""
    out: Layout = {}
    for k, (dt, shape) in layout.items():
        if k.endswith(".embed_q.weight"):
            p = k[: -len("embed_q.weight")]
            heads, rank, nope = shape
            vdim = layout[p + "unembed_out.weight"][1][1]
            out[p + "kv_b_proj.weight"] = (dt, (heads * (nope + vdim), rank))
        elif not k.endswith(".unembed_out.weight"):
            out[k] = (dt, shape)
    return out


def fp8(layout: Layout, names: Callable[[str], bool], suffix: str = "_scale_inv") -> Layout:
    """The 2-D weights ``names`` picks written as FP8 (loaded by mlx as uint8) with a float32
    scale per 128x128 block, ``<weight name><suffix>``."""
    out: Layout = {}
    for k, (dt, shape) in layout.items():
        if names(k) and len(shape) == 2:
            out[k] = ("U8", shape)
            out[k + suffix] = ("F32", tuple(-(-d // 128) for d in shape))
        else:
            out[k] = (dt, shape)
    return out


def _deepseek_v2() -> list[Case]:
    moe = fixture("deepseek_v2", num_hidden_layers=3, hidden_size=64, intermediate_size=128,
                  moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1,
                  num_experts_per_tok=2, first_k_dense_replace=1, vocab_size=128,
                  torch_dtype="bfloat16")
    dense = fixture("deepseek_v2", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                    vocab_size=128, q_lora_rank=None, torch_dtype="bfloat16")
    mlx = model_layout(moe)
    return [(moe, experts_hf(mlx)), (moe, mlx), (dense, model_layout(dense))]


def _v32(family: str, **changes: Any) -> Callable[[], list[Case]]:
    def cases() -> list[Case]:
        cfg = fixture(family, num_hidden_layers=3, hidden_size=64, intermediate_size=128,
                      moe_intermediate_size=32, n_routed_experts=4, first_k_dense_replace=1,
                      vocab_size=128, index_n_heads=2, index_head_dim=32, torch_dtype="bfloat16",
                      **changes)
        mlx = model_layout(cfg)
        hf = kv_b_hf(experts_hf(mlx))
        mtp = {f"model.layers.3.{k.split('.', 3)[3]}": v for k, v in hf.items()
               if k.startswith("model.layers.2.")}
        mtp["model.layers.3.eh_proj.weight"] = ("BF16", (64, 128))
        scaled = fp8(hf, lambda k: k.endswith(("q_a_proj.weight", "o_proj.weight"))
                     or ".experts.1." in k)
        return [(cfg, {**hf, **mtp}), (cfg, scaled), (cfg, mlx)]
    return cases


def fused_experts(layout: Layout) -> Layout:
    """switch_mlp's gate and up (E, I, H) written as one experts.gate_up_proj (E, 2I, H) and its
    down as experts.down_proj (Mistral 4's HF MoE layout)."""
    out: Layout = {}
    for k, (dt, shape) in layout.items():
        m = re.fullmatch(r"(.+\.mlp)\.switch_mlp\.(gate|up|down)_proj\.weight", k)
        if m is None:
            out[k] = (dt, shape)
        elif m[2] == "gate":
            out[f"{m[1]}.experts.gate_up_proj"] = (dt, (shape[0], 2 * shape[1], *shape[2:]))
        elif m[2] == "down":
            out[f"{m[1]}.experts.down_proj"] = (dt, shape)
    return out


def _mistral4() -> list[Case]:
    cfg = fixture("mistral4", num_hidden_layers=3, vocab_size=256, torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    rope = {f"model.layers.{i}.self_attn.rotary_emb.inv_freq": ("F32", (4,)) for i in range(3)}
    fused = kv_b_hf(fused_experts(mlx))
    scaled: Layout = {}
    for k, (dt, shape) in fused.items():
        if k.endswith("experts.gate_up_proj"):  # one scale per expert
            scaled[k] = ("U8", shape)
            scaled[k + "_scale_inv"] = ("F32", (shape[0], 1, 1))
        elif k.endswith("experts.down_proj"):  # one scale for the tensor
            scaled[k] = ("U8", shape)
            scaled[k + "_scale_inv"] = ("F32", ())
        elif k.endswith("o_proj.weight"):  # 128x128 blocks, and an unused activation scale
            scaled[k] = ("U8", shape)
            scaled[k + "_scale_inv"] = ("F32", (1, 1))
            scaled[k.replace("weight", "activation_scale")] = ("F32", ())
        elif k == "lm_head.weight":  # (256, 64): a 2 x 1 block grid, which does not broadcast
            scaled[k] = ("U8", shape)
            scaled[k + "_scale_inv"] = ("F32", (2, 1))
        elif k.endswith("q_a_proj.weight"):  # a scale of more axes than its weight
            scaled[k] = ("U8", shape)
            scaled[k + "_scale_inv"] = ("F32", (1, 1, 1))
        else:
            scaled[k] = (dt, shape)
    return [(cfg, {**scaled, **rope}), (cfg, kv_b_hf(experts_hf(mlx))), (cfg, mlx)]


def _longcat_flash() -> list[Case]:
    cfg = fixture("longcat_flash", num_layers=2, num_hidden_layers=4, hidden_size=64,
                  vocab_size=128, expert_ffn_hidden_size=32, n_routed_experts=4,
                  torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    hf = kv_b_hf(experts_hf(mlx))
    mtp = {"model.mtp.embed_tokens.weight": ("BF16", (128, 64)),
           "model.mtp.layers.0.self_attn.kv_b_proj.weight": ("BF16", (64, 16))}
    return [(cfg, {**hf, **mtp}), (cfg, mlx)]


def _bailing_moe_v3() -> list[Case]:
    small = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
             "head_dim": 16, "kv_lora_rank": 32, "q_lora_rank": 32, "qk_nope_head_dim": 16,
             "qk_rope_head_dim": 8, "v_head_dim": 16, "layer_group_size": 2,
             "num_hidden_layers": 4, "num_experts": 4, "num_experts_per_tok": 2, "n_group": 1,
             "topk_group": 1, "moe_intermediate_size": 32,
             "moe_shared_expert_intermediate_size": 32, "vocab_size": 128,
             "torch_dtype": "bfloat16"}
    cfg = fixture("bailing_moe_v3", **small)
    mlx = model_layout(cfg)
    hf = {k: (dt, (s[0], s[2], s[1]) if "_conv1d.weight" in k else s)
          for k, (dt, s) in kv_b_hf(experts_hf(mlx)).items()}
    mtp = {k.replace("model.layers.3.", "model.layers.4."): v for k, v in hf.items()
           if k.startswith("model.layers.3.")}
    tied = fixture("bailing_moe_v3", **small, tie_word_embeddings=True)
    return [(cfg, {**hf, **mtp}), (tied, {**model_layout(tied), "lm_head.weight": ("BF16", (128, 64))}),
            (cfg, mlx)]


_KIMI_W = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}


def _kimi_hf(cfg: dict[str, Any], prefix: str, bias_in_gate: bool, a_log: int) -> Layout:
    """kimi_k3's own parameters written as a Kimi checkpoint: the MoE under block_sparse_moe
    (experts per index, w1/w2/w3), KDA's fused q/k/v projections and convolutions split (HF
    convolutions (C, 1, K)), A_log and dt_bias as (1, n) rows (A_log ``a_log`` x num_heads
    wide), attention-residual weights as <src>.proj_weight / norm_weight, kv_b_proj unsplit."""
    mlx = {k.removeprefix("language_model."): v for k, v in model_layout(cfg).items()}
    out: Layout = {}
    for k, (dt, s) in mlx.items():
        m = re.fullmatch(r"(model\.layers\.\d+)\.(mlp|self_attn)\.(.+)", k)
        moe = m is not None and f"{m[1]}.mlp.switch_mlp.gate_proj.weight" in mlx
        res = re.fullmatch(r"(.+)\.(self_attention_res|mlp_res|output_attn_res)_(proj|norm)"
                           r"\.weight", k)
        if moe and m[2] == "mlp" and m[3].startswith("switch_mlp."):
            w = _KIMI_W[m[3].split(".")[1]]
            for e in range(s[0]):
                out[f"{m[1]}.block_sparse_moe.experts.{e}.{w}.weight"] = (dt, s[1:])
        elif moe and m[3] == "e_score_correction_bias":
            out[f"{m[1]}.block_sparse_moe.{'gate.' * bias_in_gate}e_score_correction_bias"] = (
                dt, s)
        elif moe and m[2] == "mlp":
            out[f"{m[1]}.block_sparse_moe.{m[3]}"] = (dt, s)
        elif m is not None and m[3] == "qkv_proj.weight":
            for p in "qkv":
                out[f"{m[1]}.self_attn.{p}_proj.weight"] = (dt, (s[0] // 3, *s[1:]))
        elif m is not None and m[3] == "qkv_conv.conv.weight":
            for p in "qkv":
                out[f"{m[1]}.self_attn.{p}_conv1d.weight"] = (dt, (s[0] // 3, s[2], s[1]))
        elif m is not None and m[3] in ("A_log", "dt_bias"):
            out[k] = (dt, (1, s[0] * (a_log if m[3] == "A_log" else 1)))
        elif res is not None:
            out[f"{res[1]}.{res[2]}.{res[3]}_weight"] = (dt, s)
        else:
            out[k] = (dt, s)
    return {prefix + k: v for k, v in kv_b_hf(out).items()}


def _kimi_k3() -> list[Case]:
    base = fixture("kimi_k3")
    text = base["text_config"]
    full = {**base, "torch_dtype": "bfloat16",
            "text_config": {**text, "attn_res_block_size": 2, "routed_expert_hidden_size": 32,
                            "latent_moe_use_norm": True, "num_shared_experts": 1}}
    tied = {**base, "torch_dtype": "bfloat16",
            "text_config": {**text, "tie_word_embeddings": True}}
    mtp = {"model.mtp.0.weight": ("BF16", (64,)), "mtp.1.weight": ("BF16", (64,)),
           "model.layers.4.input_layernorm.weight": ("BF16", (64,))}
    towers = {"vision_tower.patch.weight": ("BF16", (8, 8)),
              "mm_projector.proj.weight": ("BF16", (64, 8))}
    a = {**_kimi_hf(full, "language_model.", True, 1),
         **{"language_model." + k: v for k, v in mtp.items()}, **towers}
    b = {**_kimi_hf(tied, "", False, 2), "lm_head.weight": ("BF16", (128, 64))}
    return [(full, a), (tied, b), (full, model_layout(full))]


_V41_BACK = (
    (".self_attn.", ".attn."), (".mlp.", ".ffn."), (".input_layernorm.", ".attn_norm."),
    (".post_attention_layernorm.", ".ffn_norm."), (".attn_hc.", ".hc_attn_"),
    (".ffn_hc.", ".hc_ffn_"), (".sinks", ".attn_sink"),
    (".shared_experts.gate_proj.", ".shared_experts.w1."),
    (".shared_experts.down_proj.", ".shared_experts.w2."),
    (".shared_experts.up_proj.", ".shared_experts.w3."), (".q_a_proj.", ".wq_a."),
    (".q_b_proj.", ".wq_b."), (".kv_proj.", ".wkv."), (".gate_proj.", ".wgate."),
    (".o_a_proj.", ".wo_a."), (".o_b_proj.", ".wo_b."), (".q_a_norm.", ".q_norm."),
    (".compressor.kv_norm.", ".compressor.norm."), (".indexer.k_proj.", ".indexer.wk."),
    (".gate.e_score_correction_bias", ".gate.bias"),
)


def _v41_published(layout: Layout) -> Layout:
    """deepseek_v41's parameters under the published checkpoint's names (no "model." prefix,
    wq_a / wkv / wo_a ..., experts per index as w1/w2/w3, wo_a as one 2-D matrix)."""
    out: Layout = {}
    for k, (dt, s) in layout.items():
        m = re.fullmatch(r"model\.(layers\.\d+)\.mlp\.experts\.switch_mlp\.(\w+)\.weight", k)
        if m is not None:
            w = _KIMI_W[m[2]]
            for e in range(s[0]):
                out[f"{m[1]}.ffn.experts.{e}.{w}.weight"] = (dt, s[1:])
            continue
        if k in ("lm_head.weight", "model.embed_tokens.weight"):
            out["head.weight" if k == "lm_head.weight" else "embed.weight"] = (dt, s)
            continue
        name = k.removeprefix("model.")
        for new, old in _V41_BACK:
            name = name.replace(new, old)
        out[name] = (dt, (s[0] * s[1], s[2]) if name.endswith(".wo_a.weight") else s)
    return out


def _deepseek_v41() -> list[Case]:
    cfg = fixture("deepseek_v41_compressed", torch_dtype="bfloat16")
    mlx = model_layout(cfg)
    extra = {"mtp.0.attn.wq_a.weight": ("BF16", (32, 64)), "vision.patch.weight": ("BF16", (8,)),
             "aligner.proj.weight": ("BF16", (64, 8)), "image_newline": ("BF16", (64,)),
             "layers.1.engram.table": ("BF16", (8, 64)),
             "layers.2.ffn.gate.bias_vl": ("F32", (4,))}
    published = _v41_published(mlx)
    # A key ending in ".scale" with no ".weight" beside it is renamed like any other: the
    # hyper-connection scale written under its MLX spelling reaches the model as it is.
    published = {("layers.2.attn_hc.scale" if k == "layers.2.hc_attn_scale" else k): v
                 for k, v in published.items()}
    return [(cfg, {**published, **extra}), (cfg, mlx)]


CASES: dict[str, Callable[[], list[Case]]] = {
    "deepseek_v2": _deepseek_v2,
    "deepseek_v32": _v32("deepseek_v32"),
    "glm_moe_dsa": _v32("glm_moe_dsa"),
    "mistral4": _mistral4,
    "longcat_flash": _longcat_flash,
    "bailing_moe_v3": _bailing_moe_v3,
    "kimi_k3": _kimi_k3,
    "deepseek_v41": _deepseek_v41,
}
# The quantized kv_b_proj branch: the oracle's model is unquantized, so its strict load refuses
# embed_q.scales; and mlxfit refuses an already-quantized source before any sanitize.
_QUANTIZED = "a quantized kv_b_proj: strict load of the unquantized model refuses its scales"
_V32_Q = {
    "dims = self.args.kv_lora_rank": _QUANTIZED,
    "scales = weights.pop(f\"{prefix}.kv_b_proj.scales\")": _QUANTIZED,
    "biases = weights.pop(f\"{prefix}.kv_b_proj.biases\")": _QUANTIZED,
    "bits = (v.shape[-1] * 32) // dims": _QUANTIZED,
    "group_size = dims // scales.shape[-1]": _QUANTIZED,
    "v = mx.dequantize(": _QUANTIZED,
    "wk, wk_scales, wk_biases = mx.quantize(": _QUANTIZED,
    "wv, wv_scales, wv_biases = mx.quantize(": _QUANTIZED,
    "v, scales, biases, bits=bits, group_size=group_size": _QUANTIZED,
    "wk, bits=bits, group_size=group_size": _QUANTIZED,
    "wv, bits=bits, group_size=group_size": _QUANTIZED,
    "weights[f\"{prefix}.embed_q.scales\"] = wk_scales": _QUANTIZED,
    "weights[f\"{prefix}.unembed_out.scales\"] = wv_scales": _QUANTIZED,
    "weights[f\"{prefix}.embed_q.biases\"] = wk_biases": _QUANTIZED,
    "weights[f\"{prefix}.unembed_out.biases\"] = wv_biases": _QUANTIZED,
}
_INT4 = ("an int4 (weight_packed / weight_shape) checkpoint: its scales and biases are refused "
         "by the strict load of the oracle's unquantized model")
_LONGCAT_Q = dict.fromkeys((
    "dims = self.args.kv_lora_rank",
    'scales = weights.pop(f"{prefix}.kv_b_proj.scales")',
    'biases = weights.pop(f"{prefix}.kv_b_proj.biases")',
    "bits = (v.shape[-1] * 32) // dims",
    "group_size = dims // scales.shape[-1]",
    "v = mx.dequantize(",
    "v, scales, biases, bits=bits, group_size=group_size",
    "wk, wk_s, wk_b = mx.quantize(",
    "wk, bits=bits, group_size=group_size",
    "wv, wv_s, wv_b = mx.quantize(",
    "wv, bits=bits, group_size=group_size",
    'weights[f"{prefix}.embed_q.scales"] = wk_s',
    'weights[f"{prefix}.embed_q.biases"] = wk_b',
    'weights[f"{prefix}.unembed_out.scales"] = wv_s',
    'weights[f"{prefix}.unembed_out.biases"] = wv_b'), _QUANTIZED)
_V41_SCALED = ("an FP8/FP4 weight with its .scale: repacked as uint32 weight + scales, which the "
               "strict load of the oracle's unquantized model refuses")
_V41_RAISE = "mlx-lm raises (ValueError; the replay a ConfigError): a raising case cannot load"
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {
    "deepseek_v32": _V32_Q,
    "glm_moe_dsa": _V32_Q,
    "longcat_flash": _LONGCAT_Q,
    "deepseek_v41": {
        # the skip of a .scale whose .weight is present (the expert loop's and bias_vl's
        # ``continue`` lines, same text, do run)
        "continue": _V41_SCALED,
        "value, scale = _repack(value, scale)": _V41_SCALED,
        "scale = scale.reshape(self.args.o_groups, -1, scale.shape[-1])": _V41_SCALED,
        'clean[f"{name.removesuffix(\'weight\')}scales"] = scale': _V41_SCALED,
        'scales = mx.stack([part["scale"] for part in parts])': _V41_SCALED,
        "value, scales = _repack(value, scales)": _V41_SCALED,
        'clean[f"{name}.scales"] = scales': _V41_SCALED,
        "raise ValueError(": _V41_RAISE,
        'f"Layer {layer} has {len(rows)} {proj} expert weights, "': _V41_RAISE,
        'f"but the config declares {n_experts} experts."': _V41_RAISE,
    },
    "bailing_moe_v3": dict.fromkeys((
        "raise ValueError(", '"Quantized Bailing V3 kv_b_proj weights are not supported"'),
        "mlx-lm raises on a quantized kv_b_proj (so does the replay, ConfigError); a case that "
        "raises cannot be loaded"),
    "mistral4": {**{line: _INT4 for line in (
        'base = k.replace("weight_shape", "")',
        'new_weights[base + "weight"] = weights[base + "weight_packed"].view(',
        "mx.uint32",
        's = weights[base + "weight_scale"]',
        'new_weights[base + "scales"] = s',
        'new_weights[base + "biases"] = -8 * s')},
        **{line.replace("{prefix}", "{attn}").replace("v = mx.deq", "w = mx.deq")
           .replace("(v.shape", "(w.shape").replace("v, scales, biases", "w, scales, biases")
           : why for line, why in _V32_Q.items()}},
}
