"""Mixture-of-experts families with fused, split or renamed expert tensors: mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_moe_fused.py).

Families: hunyuan, gpt_oss, mimo_v2_flash, minimax, gear, spark2_5, laguna, step3p5, bailing_moe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_ops import (
    Tensors,
    drop,
    family_tie,
    fp8_dequantized,
    halves,
    model_arg,
    retag,
    scale_inv_applied,
    stacked,
)
from mlxfit.model.tensors import DTYPE_BYTES, TensorInfo

# ------------------------------------------------------------------ shared pieces




def _count(cfg: dict[str, Any], family: str, key: str) -> int:
    n = model_arg(cfg, family, key)
    if type(n) is not int or n < 0:
        raise ConfigError(f"config.json: {key}={n!r} is not a count; mlx-lm's {family} "
                          "sanitize loops over it")
    return n






def _stack_experts(ts: Tensors, head: str, tail: str, dst: str, n: int) -> None:
    """In place, as mlx-lm does: when expert 0 (``<head>0<tail>``) is there, experts 0..n-1
    popped and their stack appended as ``dst`` (a missing expert is mlx-lm's KeyError)."""

    def each(e: int) -> str:
        return f"{head}{e}{tail}"

    if each(0) not in ts:
        return
    if n < 1:
        raise ConfigError(f"{each(0)}: no experts to stack (the config says {n})")
    members = []
    for e in range(n):
        if each(e) not in ts:
            raise ConfigError(f"{each(e)} is missing; mlx-lm's sanitize stacks experts "
                              f"0..{n - 1}")
        members.append(ts.pop(each(e)))
    ts[dst] = stacked(dst, members)


# ------------------------------------------------------------------ families


def _spark2_5(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """spark2_5.py: an MLX conversion's embed_tokens renamed back to embedding (moved to the
    end), lm_head popped when tied (the default), rotary buffers dropped."""
    ts = dict(ts)
    if "model.embed_tokens.weight" in ts and "model.embedding.weight" not in ts:
        ts["model.embedding.weight"] = retag(ts.pop("model.embed_tokens.weight"),
                                             name="model.embedding.weight")
    ts = family_tie(ts, cfg, "spark2_5")
    return drop(ts, lambda k: "rotary_emb.inv_freq" not in k)


def _gear(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """gear.py: rotary buffers and embed_scale dropped, lm_head when tied (the default), the
    conv mixers' HF (C, 1, K) kernels transposed to MLX's (C, K, 1)."""
    tied = model_arg(cfg, "gear", "tie_word_embeddings")
    out: Tensors = {}
    for k, v in ts.items():
        if "rotary_emb.inv_freq" in k or k.endswith("embed_scale"):
            continue
        if tied and k == "lm_head.weight":
            continue
        if k.endswith(("key_conv.weight", "value_conv.weight")) and len(v.shape) == 3 \
                and v.shape[1] == 1:
            v = retag(v, shape=(v.shape[0], v.shape[2], v.shape[1]))
        out[k] = v
    return out


def _bailing_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """bailing_moe.py: lm_head popped when tied; norm_head rescales lm_head in place (same
    shape and dtype, but it must be there); from layer first_k_dense_replace on, experts
    stacked into switch_mlp and the router renamed to gate.gate_proj, each appended."""
    ts = family_tie(ts, cfg, "bailing_moe")
    if model_arg(cfg, "bailing_moe", "norm_head") and "lm_head.weight" not in ts:
        raise ConfigError("lm_head.weight: missing, and mlx-lm's bailing_moe sanitize "
                          "normalizes it for norm_head" + (" (tie_word_embeddings dropped it)"
                                                           if model_arg(cfg, "bailing_moe",
                                                                   "tie_word_embeddings")
                                                           else ""))
    ts = dict(ts)
    n = _count(cfg, "bailing_moe", "num_hidden_layers")
    dense = _count(cfg, "bailing_moe", "first_k_dense_replace")
    experts = _count(cfg, "bailing_moe", "num_experts")
    for layer in range(n):
        p = f"model.layers.{layer}.mlp"
        if layer < dense:
            continue
        for m in ("gate_proj", "down_proj", "up_proj"):
            for s in ("weight", "scales", "biases"):
                _stack_experts(ts, f"{p}.experts.", f".{m}.{s}",
                               f"{p}.switch_mlp.{m}.{s}", experts)
        for s in ("weight", "bias"):
            if f"{p}.gate.{s}" in ts:
                ts[f"{p}.gate.gate_proj.{s}"] = retag(ts.pop(f"{p}.gate.{s}"),
                                                      name=f"{p}.gate.gate_proj.{s}")
    return ts


def _laguna(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """laguna.py: a repacked checkpoint's language_model. prefix stripped, lm_head popped when
    tied; per MoE layer the bare router moved to gate.proj, the experts' score bias to gate.,
    and the experts stacked, each appended."""
    pre = "language_model."
    if any(k.startswith(pre) for k in ts):
        ts = {k.removeprefix(pre): retag(v, name=k.removeprefix(pre)) for k, v in ts.items()}
    ts = dict(family_tie(ts, cfg, "laguna"))
    experts = _count(cfg, "laguna", "num_experts")
    for layer in range(_count(cfg, "laguna", "num_hidden_layers")):
        p = f"model.layers.{layer}.mlp"
        for src, dst in ((f"{p}.gate.weight", f"{p}.gate.proj.weight"),
                         (f"{p}.experts.e_score_correction_bias",
                          f"{p}.gate.e_score_correction_bias")):
            if src in ts:
                ts[dst] = retag(ts.pop(src), name=dst)
        for m in ("gate_proj", "up_proj", "down_proj"):
            for s in ("weight", "scales", "biases"):
                _stack_experts(ts, f"{p}.experts.", f".{m}.{s}",
                               f"{p}.switch_mlp.{m}.{s}", experts)
    return ts


_STEP3P5_REMAP = (
    (".moe.gate_proj.", ".mlp.switch_mlp.gate_proj."),
    (".moe.up_proj.", ".mlp.switch_mlp.up_proj."),
    (".moe.down_proj.", ".mlp.switch_mlp.down_proj."),
    (".moe.gate.", ".mlp.gate.gate."),
    (".moe.router_bias", ".mlp.gate.router_bias"),
    (".share_expert.", ".mlp.share_expert."),
)


def _step3p5(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """step3p5.py: MTP tensors and layers from num_hidden_layers on dropped, the HF moe./
    share_expert. names moved under mlp. (the first matching rule, every occurrence). A
    vanilla checkpoint's norm weights get +1, which changes no shape or dtype."""
    n = _count(cfg, "step3p5", "num_hidden_layers")
    out: Tensors = {}
    for k, v in ts.items():
        if ".mtp" in k:
            continue
        if "model.layers." in k:
            parts = k.split(".")
            if len(parts) > 2 and parts[2].isdigit() and int(parts[2]) >= n:
                continue
        for src, dst in _STEP3P5_REMAP:
            if src in k and dst not in k:
                k = k.replace(src, dst)
                break
        out[k] = retag(v, name=k)
    return out


def _minimax(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """minimax.py: FP8 blocks dequantized to bfloat16; then, when layer 0 has per-expert w1,
    every layer's w1/w2/w3 experts stacked into switch_mlp gate/down/up, appended."""
    ts = scale_inv_applied(ts, "minimax", fp8_dequantized)
    if "model.layers.0.block_sparse_moe.experts.0.w1.weight" not in ts:
        return ts
    experts = _count(cfg, "minimax", "num_local_experts")
    for layer in range(_count(cfg, "minimax", "num_hidden_layers")):
        p = f"model.layers.{layer}.block_sparse_moe"
        for w, m in (("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj")):
            _stack_experts(ts, f"{p}.experts.", f".{w}.weight",
                           f"{p}.switch_mlp.{m}.weight", experts)
    return ts


def _mimo_v2_flash(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """mimo_v2_flash.py: FP8 blocks dequantized to bfloat16, experts stacked per layer
    (appended), the model.mtp tensors dropped."""
    ts = scale_inv_applied(ts, "mimo_v2_flash",
                           lambda w, scale: fp8_dequantized(w, scale, pad_to_scale=True))
    experts = _count(cfg, "mimo_v2_flash", "n_routed_experts")
    for layer in range(_count(cfg, "mimo_v2_flash", "num_hidden_layers")):
        p = f"model.layers.{layer}.mlp"
        for m in ("gate_proj", "down_proj", "up_proj"):
            for s in ("weight", "scales", "biases"):
                _stack_experts(ts, f"{p}.experts.", f".{m}.{s}",
                               f"{p}.switch_mlp.{m}.{s}", experts)
    return drop(ts, lambda k: not k.startswith("model.mtp"))


def _hunyuan_unfuse(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """The fused checkpoint (layer 0 has mlp.gate_and_up_proj): qkv_proj reshaped to
    (kv heads, groups + 2, head_dim, -1) and split into q/k/v flattened back to 2-D;
    gate_and_up_proj halved on axis 0 into up_proj then gate_proj."""
    d, heads = model_arg(cfg, "hunyuan", "hidden_size"), model_arg(cfg, "hunyuan", "num_attention_heads")
    kv = model_arg(cfg, "hunyuan", "num_key_value_heads")
    if not all(type(x) is int and x > 0 for x in (d, heads, kv)):
        raise ConfigError("config.json: hidden_size, num_attention_heads and "
                          "num_key_value_heads are needed to split qkv_proj as mlx-lm does")
    groups, head_dim = heads // kv, d // heads
    out: Tensors = {}
    for k, v in ts.items():
        if "qkv_proj" in k:
            if len(v.shape) != 2:
                # flatten(0, 2) makes every part 2-D: a fused bias comes out (rows, 1), which
                # the model's (rows,) bias refuses at load, so mlx_lm.convert fails on it.
                raise ConfigError(f"{k}: mlx-lm's hunyuan sanitize turns this "
                                  f"{len(v.shape)}-D tensor into 2-D q/k/v parts the model "
                                  "cannot load (mlx_lm.convert fails)")
            numel = v.nbytes // DTYPE_BYTES[v.dtype]
            unit = kv * (groups + 2) * head_dim
            if unit == 0 or numel % unit:
                raise ConfigError(f"{k}: shape {list(v.shape)} does not reshape to "
                                  f"({kv}, {groups + 2}, {head_dim}, -1) as mlx-lm's hunyuan "
                                  "sanitize does")
            cols = numel // unit
            for part, rows in (("q_proj", kv * groups * head_dim), ("k_proj", kv * head_dim),
                               ("v_proj", kv * head_dim)):
                name = k.replace("qkv_proj", part)
                out[name] = TensorInfo.of(name, v.dtype, (rows, cols))
        elif "gate_and_up_proj" in k:
            half = halves(k, v.shape, 0)
            for part in ("up_proj", "gate_proj"):
                name = k.replace("gate_and_up_proj", part)
                out[name] = TensorInfo.of(name, v.dtype, half)
        else:
            out[k] = v
    return out


def _hunyuan(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """hunyuan.py: a fused checkpoint unfused; then, when layer 0 has per-expert up_proj,
    every layer's experts stacked into switch_mlp (appended)."""
    if "model.layers.0.mlp.gate_and_up_proj.weight" in ts:
        ts = _hunyuan_unfuse(ts, cfg)
    if "model.layers.0.mlp.experts.0.up_proj.weight" not in ts:
        return ts
    ts = dict(ts)
    experts = _count(cfg, "hunyuan", "num_experts")
    for layer in range(_count(cfg, "hunyuan", "num_hidden_layers")):
        p = f"model.layers.{layer}.mlp"
        for m in ("up_proj", "down_proj", "gate_proj"):
            for s in ("weight", "scales", "biases"):
                _stack_experts(ts, f"{p}.experts.", f".{m}.{s}",
                               f"{p}.switch_mlp.{m}.{s}", experts)
    return ts


def _every_other(t: TensorInfo, name: str, axis: int, start: int) -> TensorInfo:
    """``v[..., start::2, :]`` (axis -2) or ``v[..., start::2]`` (axis -1)."""
    if len(t.shape) < -axis:
        raise ConfigError(f"{t.name}: shape {list(t.shape)} has no axis {axis} for mlx-lm's "
                          "gpt_oss sanitize to split")
    shape = list(t.shape)
    shape[axis] = (shape[axis] - start + 1) // 2
    return TensorInfo.of(name, t.dtype, tuple(shape))


def _gpt_oss_packed(k: str, v: TensorInfo) -> tuple[str, TensorInfo]:
    """An MXFP4 source's ``_blocks`` viewed as uint32 and flattened (``.weight``), its
    ``_scales`` renamed ``.scales``."""
    if "_blocks" in k:
        if len(v.shape) < 2 or (v.shape[-1] * DTYPE_BYTES[v.dtype]) % 4:
            raise ConfigError(f"{k}: shape {list(v.shape)} of {v.dtype} does not view as "
                              "uint32 and flatten as mlx-lm's gpt_oss sanitize does")
        shape = (*v.shape[:-2], v.shape[-2] * v.shape[-1] * DTYPE_BYTES[v.dtype] // 4)
        k = k.replace("_blocks", ".weight")
        v = TensorInfo.of(k, "U32", shape)
    if "_scales" in k:
        k = k.replace("_scales", ".scales")
    return k, v


def _gpt_oss(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """gpt_oss.py: unless some name has gate_proj.weight (already MLX), the experts' fused
    gate_up_proj (E, 2I, H) split by alternate rows into gate_proj and up_proj (its bias by
    alternate entries), the _bias suffixes moved to .bias, an MXFP4 source unpacked."""
    if any("gate_proj.weight" in k for k in ts):
        return ts
    out: Tensors = {}
    for k, v in ts.items():
        if "gate_up_proj" in k and "bias" not in k:
            k, v = _gpt_oss_packed(k, v)
            for start, part in ((0, "gate_proj"), (1, "up_proj")):
                name = k.replace("gate_up_proj", part)
                out[name] = _every_other(v, name, -2, start)
        elif "down_proj" in k and "bias" not in k:
            k, v = _gpt_oss_packed(k, v)
            out[k] = retag(v, name=k)
        elif "gate_up_proj_bias" in k:
            for start, part in ((0, "gate_proj.bias"), (1, "up_proj.bias")):
                name = k.replace("gate_up_proj_bias", part)
                out[name] = _every_other(v, name, -1, start)
        elif "down_proj_bias" in k:
            name = k.replace("down_proj_bias", "down_proj.bias")
            out[name] = retag(v, name=name)
        else:
            out[k] = v
    return out


SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
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
