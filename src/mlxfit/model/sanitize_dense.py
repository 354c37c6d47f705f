"""Dense decoder families (rotary buffers, tied heads, renamed or fused projections): mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_dense.py).

Families: lille-130m, internlm2, internlm3, granite, hunyuan_v1_dense, minicpm, nemotron-nas, plamo3, youtu_llm, nanbeige, olmo2, phi3small, seed_oss, apertus, glm, smollm3, talkie, bitnet, baichuan_m1, mimo, gptj, mellum, gpt2, gpt_neox, ministral3, muse_glimmer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_ops import (
    FP8_DTYPES,
    Tensors,
    broadcast_shape,
    drop,
    family_tie,
    model_arg,
    retag,
    scale_inv_applied,
)
from mlxfit.model.tensors import TensorInfo

Sanitize = Callable[[Tensors, dict[str, Any]], Tensors]


def _internlm2(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """internlm2.py: the precomputed rotary frequencies dropped."""
    return drop(ts, lambda k: "attention.rope.inv_freq" not in k)




def _dropping(*parts: str) -> Sanitize:
    """``{k: v for k, v in weights.items() if <part> not in k}``: buffers dropped by name."""
    return lambda ts, cfg: drop(ts, lambda k: not any(p in k for p in parts))


def _tied(family: str) -> Sanitize:
    """``if <args>.tie_word_embeddings: weights.pop("lm_head.weight", None)``."""
    return lambda ts, cfg: family_tie(ts, cfg, family)


def _rotary_tied(family: str) -> Sanitize:
    """glm.py, smollm3.py, bitnet.py: self_attn rotary buffers dropped, then the tie pop."""
    def sanitize(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
        ts = drop(ts, lambda k: "self_attn.rotary_emb.inv_freq" not in k)
        return family_tie(ts, cfg, family)
    return sanitize


def _talkie(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """talkie.py: anything named rotary, or ending in cos / sin, dropped."""
    return drop(ts, lambda k: "rotary" not in k and not k.endswith(("cos", "sin")))


def _minicpm(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """minicpm.py: a missing lm_head.weight becomes a copy of the embedding (appended)."""
    if model_arg(cfg, "minicpm", "tie_word_embeddings"):
        # The tied model has no lm_head, and its sanitize always leaves one (the checkpoint's
        # or the copy), so mlx-lm's strict load refuses every tied MiniCPM checkpoint.
        raise ConfigError("config.json: tie_word_embeddings is true, and mlx-lm's minicpm "
                          "sanitize always leaves an lm_head.weight the tied model does not "
                          "have (its strict load fails)")
    if "lm_head.weight" in ts:
        return ts
    emb = ts.get("model.embed_tokens.weight")
    if emb is None:
        raise ConfigError("model.embed_tokens.weight: missing; mlx-lm's minicpm sanitize copies "
                          "it into lm_head.weight (KeyError)")
    return {**ts, "lm_head.weight": retag(emb, name="lm_head.weight")}


def _squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _apertus(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """apertus.py: the xIELU alpha_p / alpha_n squeezed (HF stores them as (1,)), then the
    tie pop."""
    ts = {k: retag(v, shape=_squeeze(v.shape)) if k.endswith(("alpha_p", "alpha_n")) else v
          for k, v in ts.items()}
    return family_tie(ts, cfg, "apertus")


def _mimo(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """mimo.py: the tie pop, then rotary buffers and the MTP layers dropped."""
    ts = family_tie(ts, cfg, "mimo")
    return drop(ts, lambda k: "self_attn.rotary_emb.inv_freq" not in k
                and not k.startswith("model.mtp_layers."))


def _int(cfg: dict[str, Any], key: str) -> int:
    n = cfg.get(key)
    if type(n) is not int or n < 0:
        raise ConfigError(f"config.json: {key} must be a whole number (mlx-lm's sanitize loops "
                          f"over range({key}))")
    return n


def _gptj(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """gptj.py: each layer's attention buffers (attn.bias, attn.masked_bias) deleted, then
    every "transformer." in a name replaced by "model."."""
    gone = set()
    for i in range(_int(cfg, "n_layer")):
        gone |= {f"transformer.h.{i}.attn.masked_bias", f"transformer.h.{i}.attn.bias"}
    out: Tensors = {}
    for k, v in ts.items():
        if k not in gone:
            name = k.replace("transformer.", "model.")
            out[name] = retag(v, name=name)
    return out


_GPT2_TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                    "mlp.c_proj.weight")


def _gpt2(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """gpt2.py: per layer (unprefixed HF names "h.<i>."), attn.bias dropped and the Conv1D
    weights transposed; then every name not under "model." put there."""
    ts = dict(ts)
    for i in range(_int(cfg, "n_layer")):
        ts.pop(f"h.{i}.attn.bias", None)
        for suffix in _GPT2_TRANSPOSED:
            k = f"h.{i}.{suffix}"
            if k in ts:
                if len(ts[k].shape) != 2:
                    raise ConfigError(f"{k}: shape {list(ts[k].shape)} is not 2-D; mlx-lm's "
                                      "gpt2 sanitize transposes it as a matrix")
                ts[k] = retag(ts[k], shape=ts[k].shape[::-1])
    out: Tensors = {}
    for k, v in ts.items():
        name = k if k.startswith("model.") else f"model.{k}"
        out[name] = retag(v, name=name)
    return out


_NEOX_BUFFERS = (".attention.bias", ".attention.masked_bias", ".attention.rotary_emb.inv_freq")


def _gpt_neox(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """gpt_neox.py: attention buffers dropped, everything put under "model.", the HF
    "gpt_neox.layers." renamed "h." and the "gpt_neox." level removed."""
    out: Tensors = {}
    for k, v in ts.items():
        if k.endswith(_NEOX_BUFFERS):
            continue
        if not k.startswith("model."):
            k = f"model.{k}"
        k = k.replace(".gpt_neox.layers.", ".h.").replace(".gpt_neox.", ".")
        out[k] = retag(v, name=k)
    return out


def _mellum(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """mellum.py: the tie pop; then, when layer 0 has per-expert tensors, each layer's experts
    0..num_experts-1 popped and stacked into switch_mlp (appended, up, down, gate per layer)."""
    ts = family_tie(ts, cfg, "mellum")
    if "model.layers.0.mlp.experts.0.up_proj.weight" not in ts:
        return ts
    ts = dict(ts)
    n_exp = cfg.get("num_experts")
    for layer in range(_int(cfg, "num_hidden_layers")):
        prefix = f"model.layers.{layer}"
        for n in ("up_proj", "down_proj", "gate_proj"):
            if f"{prefix}.mlp.experts.0.{n}.weight" not in ts:
                continue
            members = []
            for e in range(_int(cfg, "num_experts")):
                k = f"{prefix}.mlp.experts.{e}.{n}.weight"
                if k not in ts:
                    raise ConfigError(f"{k}: missing; mlx-lm's mellum sanitize stacks "
                                      f"num_experts={n_exp} experts per layer (KeyError)")
                members.append(ts.pop(k))
            first = members[0]
            if any(t.shape != first.shape or t.dtype != first.dtype for t in members):
                raise ConfigError(f"{prefix}.mlp.experts.*.{n}.weight: experts differ in shape "
                                  "or dtype; mlx-lm cannot stack them")
            name = f"{prefix}.mlp.switch_mlp.{n}.weight"
            ts[name] = TensorInfo.of(name, first.dtype, (len(members), *first.shape))
    return ts


_FLOATS = ("F16", "BF16", "F32")


def _product_dtype(a: str, b: str, name: str) -> str:
    """The dtype of ``a * b`` in mlx for a weight times its scale: mx.load reads F8 tensors as
    uint8 bytes, an integer times a float is the float, two different half types meet in
    float32."""
    a = "U8" if a in FP8_DTYPES else a
    b = "U8" if b in FP8_DTYPES else b
    if a not in _FLOATS and b not in _FLOATS:
        raise ConfigError(f"{name}: neither the weight ({a}) nor its scale ({b}) is floating; "
                          "mlxfit does not model mlx's integer product")
    if a == b or b not in _FLOATS:
        return a
    if a not in _FLOATS:
        return b
    return "F32"  # F32 with anything, or F16 with BF16


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], name: str) -> tuple[int, ...]:
    shape = broadcast_shape(a, b)
    if shape is None:
        raise ConfigError(f"{name}: shapes {list(a)} and {list(b)} do not broadcast; mlx-lm's "
                          "sanitize multiplies the weight by it")
    return shape


def _ministral3(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """ministral3.py: rotary buffers dropped, the tie pop, then each ``weight_scale_inv``
    multiplied into its weight (an F8 weight as the raw bytes mx.load gives: mlx-lm does not
    decode it) and activation scales dropped."""
    ts = drop(ts, lambda k: "self_attn.rotary_emb.inv_freq" not in k)
    ts = family_tie(ts, cfg, "ministral3")
    return scale_inv_applied(ts, "ministral3", _scaled, skip=lambda k: "activation_scale" in k)


def _scaled(w: TensorInfo, scale: TensorInfo) -> TensorInfo:
    """ministral3's ``weight * scale_inv``: no from_fp8, the raw bytes times the scale."""
    return TensorInfo.of(w.name, _product_dtype(w.dtype, scale.dtype, scale.name),
                         _broadcast(w.shape, scale.shape, scale.name))


_GLIMMER_TOWERS = ("vision_tower", "vision_adapter", "vision_projection")
_GLIMMER_NAMES = (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
                  ("model.language_model.", "model."))


def _muse_glimmer(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """muse_glimmer.py: the vision tower dropped, the text tower's language_model.* names
    moved to the top level (the first prefix that matches)."""
    out: Tensors = {}
    for k, v in ts.items():
        if k.startswith(_GLIMMER_TOWERS):
            continue
        for old, new in _GLIMMER_NAMES:
            if k.startswith(old):
                k = new + k[len(old):]
                break
        out[k] = retag(v, name=k)
    return out


def _values_only(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """baichuan_m1.py: lm_head renormalised row by row in float32 and cast back to its own
    dtype: values change, names, dtypes and shapes do not."""
    return ts


SANITIZE: dict[str, Sanitize] = {
    "baichuan_m1": _values_only,
    "internlm2": _internlm2,
    "internlm3": _internlm2,  # the same line
    "lille-130m": _dropping("rotary_emb"),
    "nanbeige": _dropping("self_attn.rotary_emb.inv_freq"),
    "olmo2": _dropping("self_attn.rotary_emb.inv_freq"),
    "phi3small": _dropping("self_attn.rotary_emb.inv_freq"),
    "talkie": _talkie,
    **{f: _tied(f) for f in ("granite", "hunyuan_v1_dense", "nemotron-nas", "plamo3",
                             "youtu_llm", "seed_oss")},
    **{f: _rotary_tied(f) for f in ("glm", "smollm3", "bitnet")},
    "minicpm": _minicpm,
    "apertus": _apertus,
    "mimo": _mimo,
    "gptj": _gptj,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "mellum": _mellum,
    "ministral3": _ministral3,
    "muse_glimmer": _muse_glimmer,
}
