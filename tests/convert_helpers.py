"""Tiny real HF checkpoints for the converter checks (tests/test_quantize.py): a family's
mlx-lm module builds the parameter list, ``to_hf`` undoes its sanitize (experts unstacked,
kv_b_proj joined, towers and MTP layers added), and the real mlx_lm.convert runs on it."""

from __future__ import annotations

import contextlib
import io
import json
import re
import struct
from pathlib import Path
from typing import Any

FP8 = "F8_E4M3"


def mlx_params(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """name -> shape of the family's mlx-lm model (nothing evaluated)."""
    from mlx.utils import tree_flatten  # heavy, optional: only the converter tests
    from mlx_lm.utils import _get_classes  # heavy, optional: only the converter tests

    model_cls, args_cls = _get_classes(config)
    model = model_cls(args_cls.from_dict(config))
    return {k: tuple(v.shape) for k, v in tree_flatten(model.parameters())}


def _unstack(params, pattern, name):
    out = {}
    for k, shape in params.items():
        m = re.fullmatch(pattern, k)
        if m is None:
            out[k] = shape
            continue
        for e in range(shape[0]):
            out[name(m, e)] = shape[1:]
    return out


MIXTRAL = {"gate_proj": "w1", "down_proj": "w2", "up_proj": "w3"}


def to_hf(family: str, config: dict[str, Any], params: dict[str, tuple[int, ...]]) -> dict:
    """The HF checkpoint layout: name -> (dtype, shape)."""
    p = dict(params)
    if family in ("qwen3_moe", "qwen3_next", "deepseek_v3", "glm4_moe", "glm4_moe_lite"):
        p = _unstack(p, r"(.+\.mlp)\.switch_mlp\.(\w+)\.weight",
                     lambda m, e: f"{m[1]}.experts.{e}.{m[2]}.weight")
    if family == "mixtral":
        p = _unstack(p, r"(.+\.block_sparse_moe)\.switch_mlp\.(\w+)\.weight",
                     lambda m, e: f"{m[1]}.experts.{e}.{MIXTRAL[m[2]]}.weight")
    if family == "nemotron_h":
        p = _unstack(p, r"(.+\.mixer)\.switch_mlp\.(fc1|fc2)\.weight",
                     lambda m, e: f"{m[1]}.experts.{e}.{'up_proj' if m[2] == 'fc1' else 'down_proj'}.weight")
    if family == "dbrx":  # HF: one fused (E*ffn, d_model) tensor per w1 / v1 / w2, no .weight
        q: dict = {}
        for k, shape in p.items():
            m = re.fullmatch(r"(.+\.experts)\.(\d+)\.(w1|v1|w2)\.weight", k)
            if m is None:
                q[k] = shape
            elif m[2] == "0":
                n = config["ffn_config"]["moe_num_experts"]
                rows, cols = shape if m[3] != "w2" else (shape[1], shape[0])
                q[f"{m[1]}.mlp.{m[3]}"] = (n * rows, cols)
        p = q
    dt = {k: "BF16" for k in p}
    if family == "glm4_moe_lite":  # kv_b_proj joined (bfloat16), the MTP layer appended
        h, nope, v = (config["num_attention_heads"], config["qk_nope_head_dim"],
                      config["v_head_dim"])
        for k in [k for k in p if k.endswith(".embed_q.weight")]:
            pre = k[: -len("embed_q.weight")]
            rank = p.pop(k)[1]
            p.pop(pre + "unembed_out.weight")
            dt.pop(k)
            dt.pop(pre + "unembed_out.weight")
            p[pre + "kv_b_proj.weight"], dt[pre + "kv_b_proj.weight"] = (h * (nope + v), rank), "BF16"
        n = config["num_hidden_layers"]
        for k in [k for k in p if k.startswith("model.layers.1.")]:
            p[k.replace("model.layers.1.", f"model.layers.{n}.", 1)] = p[k]
            dt[k.replace("model.layers.1.", f"model.layers.{n}.", 1)] = dt[k]
        for k in [k for k in p if "e_score_correction_bias" in k]:
            dt[k] = "F32"
    if family == "deepseek_v3":
        h, nope, v = (config["num_attention_heads"], config["qk_nope_head_dim"],
                      config["v_head_dim"])
        for k in [k for k in p if k.endswith("embed_q.weight") and "unembed" not in k]:
            pre = k[: -len("embed_q.weight")]
            rank = p.pop(k)[1]
            p.pop(pre + "unembed_out.weight")
            dt.pop(k)
            dt.pop(pre + "unembed_out.weight")
            p[pre + "kv_b_proj.weight"] = (h * (nope + v), rank)
            dt[pre + "kv_b_proj.weight"] = "BF16"
        # FP8 with 128x128 block scales, as DeepSeek-V3 ships: every Linear of the experts
        for k in [k for k in p if ".experts." in k or k.endswith("q_a_proj.weight")]:
            rows, cols = p[k]
            dt[k] = FP8
            p[k + "_scale_inv"] = (-(-rows // 128), -(-cols // 128))
            dt[k + "_scale_inv"] = "F32"
        for k in [k for k in p if "e_score_correction_bias" in k]:
            dt[k] = "F32"
    if family in ("llama", "deepseek_v3"):
        for k in [k for k in p if k.endswith("self_attn.o_proj.weight")]:
            name = k.replace("o_proj.weight", "rotary_emb.inv_freq")
            p[name], dt[name] = (8,), "F32"
    if family == "glm4_moe":  # GLM's MTP layer: one more decoder layer, experts unstacked
        n, h = config["num_hidden_layers"], config["hidden_size"]
        for k, shape in list(p.items()):
            if k.startswith("model.layers.1."):
                p[k.replace("model.layers.1.", f"model.layers.{n}.", 1)] = shape
                dt[k.replace("model.layers.1.", f"model.layers.{n}.", 1)] = dt[k]
        p[f"model.layers.{n}.eh_proj.weight"], dt[f"model.layers.{n}.eh_proj.weight"] = (
            (h, 2 * h), "BF16")
        for k in [k for k in p if "e_score_correction_bias" in k]:
            dt[k] = "F32"
    if family in ("nemotron_h", "qwen3_next"):
        for k in [k for k in p if "conv1d.weight" in k]:  # HF stores (C, 1, K)
            c, kk, one = p[k]
            p[k] = (c, one, kk)
        mtp = "mtp.layers.0.fc.weight" if family == "nemotron_h" else "mtp.fc.weight"
        p[mtp], dt[mtp] = (config["hidden_size"], 2 * config["hidden_size"]), "BF16"
    if family == "mistral3":
        p = {("model.language_model." + k.removeprefix("language_model.model.")
              if k.startswith("language_model.model.") else
              k.removeprefix("language_model.")): s for k, s in p.items()}
        dt = {k: "BF16" for k in p}
        for k, s in {"model.vision_tower.patch_conv.weight": (64, 3, 4, 4),
                     "model.vision_tower.transformer.layers.0.attention.q_proj.weight": (64, 64),
                     "model.multi_modal_projector.linear_1.weight": (64, 64)}.items():
            p[k], dt[k] = s, "BF16"
    if family == "gemma3":  # ships tied, with its tower beside the language model
        for k in [k for k in p if k.endswith("lm_head.weight")]:
            p.pop(k)
            dt.pop(k)
        for k, s in {"vision_tower.vision_model.embeddings.patch_embedding.weight": (64, 3, 4, 4),
                     "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight": (128, 64),
                     "multi_modal_projector.mm_input_projection_weight": (64, 256)}.items():
            p[k], dt[k] = s, "BF16"
    if family in ("qwen3_5", "qwen3_5_moe"):  # HF: model.language_model.*, conv (C, 1, K)
        q: dict = {}
        for k, shape in p.items():
            m = re.fullmatch(r"(.+\.mlp)\.switch_mlp\.(gate|up|down)_proj\.weight", k)
            if m and m[2] == "gate":  # one fused (E, 2I, H) tensor, as transformers 5 writes
                q[m[1] + ".experts.gate_up_proj"] = (shape[0], 2 * shape[1], shape[2])
                continue
            if m and m[2] == "up":
                continue
            if m:
                k = m[1] + ".experts.down_proj"
            if "conv1d.weight" in k:
                shape = (shape[0], shape[2], shape[1])
            q[k.replace("language_model.model.", "model.language_model.", 1)
              .replace("language_model.lm_head", "lm_head", 1)] = shape
        q["mtp.fc.weight"] = (config["text_config"]["hidden_size"],) * 2
        q["model.visual.blocks.0.attn.qkv.weight"] = (192, 64)
        p = q
        dt = {k: "F32" if k.endswith("A_log") else "BF16" for k in p}
    if family == "qwen2":
        for k in [k for k in p if k.endswith("self_attn.o_proj.weight")]:
            name = k.replace("o_proj.weight", "rotary_emb.inv_freq")
            p[name], dt[name] = (8,), "F32"
    return {k: (dt[k], p[k]) for k in p}


def write_checkpoint(folder: Path, config: dict[str, Any], layout: dict) -> Path:
    """config.json, a word-level tokenizer and one model.safetensors of zeros."""
    from tokenizers import Tokenizer, models  # heavy, optional: only the converter tests
    from transformers import PreTrainedTokenizerFast  # heavy, optional: as above

    from mlxfit.model.tensors import DTYPE_BYTES

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(folder)
    header: dict[str, Any] = {}
    off = 0
    for name, (dtype, shape) in layout.items():
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.write(bytes(off))
    return folder


def run_convert(src: Path, dst: Path, **kw: Any) -> str:
    """The real mlx_lm.convert on the CPU; its printed output (bits per weight)."""
    import mlx.core as mx  # heavy, optional: only the converter tests
    from mlx_lm.convert import convert  # heavy, optional: as above

    mx.set_default_device(mx.cpu)
    out = io.StringIO()
    kw = {"quantize": True, **kw}
    with contextlib.redirect_stdout(out):
        convert(str(src), str(dst), **kw)
    return out.getvalue()


def dequantized_manifest(entry) -> tuple[list, dict[str, Any]]:
    """A published MLX quantization's manifest back in float: each packed U32 weight at its
    logical width in its scales' dtype, scales and biases gone, the quantization block gone.
    What mlx_lm.convert --dequantize would write (an MLX-layout bf16 repo)."""
    from mlxfit.model.tensors import TensorInfo
    from mlxfit.model.weights import parse_quantization

    q = parse_quantization(entry.config)
    by = {t.name: t for t in entry.tensors}
    out = []
    for t in entry.tensors:
        m = t.name.rsplit(".", 1)[0]
        packed = by.get(m + ".weight")
        if t.name.endswith((".scales", ".biases")) and packed is not None and packed.dtype == "U32":
            continue
        if t.dtype == "U32" and m + ".scales" in by:
            bits = q.overrides.get(m, {}).get("bits", q.bits)
            out.append(TensorInfo.of(t.name, by[m + ".scales"].dtype,
                                     (*t.shape[:-1], t.shape[-1] * 32 // bits)))
        else:
            out.append(t)
    cfg = {k: v for k, v in entry.config.items() if k not in ("quantization", "quantization_config")}
    return out, cfg


def lazy_converted(config: dict[str, Any], kw: dict[str, Any]) -> tuple[dict, dict, int, dict]:
    """mlx-lm's own quantizer on a model built from ``config`` at its real size, nothing
    evaluated: convert's dtype cast (bfloat16, the family's cast_predicate), its predicate and
    quantize_model. (name -> (dtype, shape), the quantization block, make_shards' count, and
    the MLX-layout float model it started from, name -> (dtype, shape))."""
    import mlx.core as mx  # heavy, optional: only the converter tests
    from mlx.utils import tree_flatten, tree_map_with_path  # heavy, optional: as above
    from mlx_lm.convert import mixed_quant_predicate_builder  # heavy, optional: as above
    from mlx_lm.utils import _get_classes, make_shards, quantize_model  # heavy, optional

    from mlxfit.model.tensors import MLX_TO_SAFETENSORS

    model_cls, args_cls = _get_classes(config)
    model = model_cls(args_cls.from_dict(config))
    cast = getattr(model, "cast_predicate", lambda _: True)
    model.update(tree_map_with_path(
        lambda k, v: v.astype(mx.bfloat16) if cast(k) and mx.issubdtype(v.dtype, mx.floating)
        else v, model.parameters()))

    def layout(m) -> dict:
        return {k: (MLX_TO_SAFETENSORS[str(v.dtype).rsplit(".", 1)[-1]], tuple(v.shape))
                for k, v in tree_flatten(m.parameters())}

    source = layout(model)
    pred = kw.get("quant_predicate")
    if pred is not None:
        pred = mixed_quant_predicate_builder(pred, model, kw.get("q_group_size"))
    with contextlib.redirect_stdout(io.StringIO()):
        model, qcfg = quantize_model(model, dict(config), kw.get("q_group_size"),
                                     kw.get("q_bits"), mode=kw.get("q_mode", "affine"),
                                     quant_predicate=pred)
    return (layout(model), qcfg["quantization"],
            len(make_shards(dict(tree_flatten(model.parameters())))), source)
