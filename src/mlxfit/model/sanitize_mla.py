"""Latent-attention (MLA / DSA) families: kv_b_proj splits, indexers, MTP layers: mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_mla.py).

Families: deepseek_v2, deepseek_v32, glm_moe_dsa, deepseek_v41, mistral4, kimi_k3, bailing_moe_v3, longcat_flash.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_ops import (
    KV_B_BY_KIND,
    Tensors,
    drop,
    family_tie,
    fp8_dequantized,
    halves,
    model_arg,
    popped,
    retag,
    scale_inv_applied,
    split_kv_b,
    stacked,
)
from mlxfit.model.tensors import DTYPE_BYTES, FLOAT_DTYPES, TensorInfo

_PROJS = ("gate_proj", "down_proj", "up_proj")
_QPARTS = ("weight", "scales", "biases")




def _count(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ConfigError(f"config.json: {what} is {value!r}; mlx-lm's sanitize needs a count")
    return value






def _stack_experts(ts: Tensors, src: str, dst: str, n: Any, projs: tuple[str, ...] = _PROJS,
                   parts: tuple[str, ...] = _QPARTS, what: str = "n_routed_experts") -> None:
    """DeepSeek's per-layer loop, in place: for each projection and part whose expert 0 is
    present, experts 0..n-1 popped and stacked into ``dst``.<proj>.<part> (appended)."""
    for m in projs:
        for k in parts:
            if f"{src}.experts.0.{m}.{k}" in ts:
                count = _count(n, what)
                members = [popped(ts, f"{src}.experts.{e}.{m}.{k}") for e in range(count)]
                if not members:
                    raise ConfigError(f"config.json: {what} is 0; mlx-lm cannot stack the "
                                      f"experts of {src}")
                name = f"{dst}.{m}.{k}"
                ts[name] = stacked(name, members)


def _layer_index(key: str) -> int | None:
    """``int(parts[2])`` of a ``<x>.layers.<i>...`` name (mlx-lm's MTP filters)."""
    parts = key.split(".")
    if len(parts) < 3 or parts[1] != "layers":
        return None
    try:
        return int(parts[2])
    except ValueError:
        raise ConfigError(f"{key}: layer index {parts[2]!r} is not a number (mlx-lm's "
                          "sanitize calls int() on it)") from None


# --------------------------------------------------------------------------- families

def _deepseek_v2(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """deepseek_v2.py: each layer's experts stacked (weight/scales/biases); nothing else."""
    ts = dict(ts)
    n = _count(model_arg(cfg, "deepseek_v2", "num_hidden_layers"), "num_hidden_layers")
    experts = model_arg(cfg, "deepseek_v2", "n_routed_experts")
    for layer in range(n):
        p = f"model.layers.{layer}"
        _stack_experts(ts, f"{p}.mlp", f"{p}.mlp.switch_mlp", experts)
    return ts


def _v32(family: str) -> Callable[[Tensors, dict[str, Any]], Tensors]:
    """deepseek_v32.py (glm_moe_dsa.py inherits it): layers from num_hidden_layers on (MTP)
    dropped, FP8 weights with weight_scale_inv dequantized, then per layer the experts stacked
    and kv_b_proj split into embed_q / unembed_out."""
    def sanitize(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
        n = _count(model_arg(cfg, family, "num_hidden_layers"), "num_hidden_layers")
        kept: Tensors = {}
        for k, v in ts.items():
            i = _layer_index(k)
            if i is None or i < n:
                kept[k] = v
        ts = scale_inv_applied(kept, family, fp8_dequantized)
        experts = model_arg(cfg, family, "n_routed_experts")
        for layer in range(n):
            p = f"model.layers.{layer}"
            _stack_experts(ts, f"{p}.mlp", f"{p}.mlp.switch_mlp", experts)
            split_kv_b(ts, f"{p}.self_attn", cfg, family, order=KV_B_BY_KIND)
        return ts
    return sanitize


def _view_u32(t: TensorInfo, name: str) -> TensorInfo:
    """``a.view(mx.uint32)``: the last axis rescaled by the itemsize ratio."""
    size = DTYPE_BYTES.get(t.dtype)
    if size is None or not t.shape or (t.shape[-1] * size) % 4:
        raise ConfigError(f"{t.name}: {t.dtype} {list(t.shape)} does not view as uint32")
    return TensorInfo.of(name, "U32", (*t.shape[:-1], t.shape[-1] * size // 4))


def _mistral4_int4(ts: Tensors) -> Tensors:
    """mistral4.py's int4 remap: each ``<m>.weight_shape`` marks a packed ``<m>.weight_packed``
    (viewed as uint32) with ``<m>.weight_scale`` (the scales; biases -8 x scales); every
    ``weight_scale`` / ``weight_packed`` key is dropped."""
    out: Tensors = {}
    for k, v in ts.items():
        if k.endswith("weight_shape"):
            base = k.replace("weight_shape", "")
            if base + "weight_packed" not in ts or base + "weight_scale" not in ts:
                raise ConfigError(f"{k}: {base}weight_packed or {base}weight_scale is missing "
                                  "(mlx-lm's sanitize reads both)")
            out[base + "weight"] = _view_u32(ts[base + "weight_packed"], base + "weight")
            scale = ts[base + "weight_scale"]
            out[base + "scales"] = retag(scale, name=base + "scales")
            out[base + "biases"] = retag(scale, name=base + "biases")
        elif not k.endswith(("weight_scale", "weight_packed")):
            out[k] = v
    return out


def _mistral4(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """mistral4.py: the int4 remap, FP8 dequantized (``*_scale_inv`` suffixes, per-tensor and
    per-expert scales broadcast; activation scales dropped), then per layer the fused
    experts.gate_up_proj split in two on axis 1, experts.down_proj renamed, per-expert tensors
    stacked and kv_b_proj absorbed; rotary buffers dropped last."""
    ts = _mistral4_int4(ts)
    ts = scale_inv_applied(drop(ts, lambda k: not k.endswith("activation_scale")), "mistral4",
                           lambda w, scale: fp8_dequantized(w, scale, broadcast_ok=True),
                           is_scale=lambda k: k.endswith("_scale_inv"))
    n = _count(model_arg(cfg, "mistral4", "num_hidden_layers"), "num_hidden_layers")
    experts = model_arg(cfg, "mistral4", "n_routed_experts")
    for layer in range(n):
        p = f"model.layers.{layer}"
        gup = f"{p}.mlp.experts.gate_up_proj"
        if gup in ts:
            w = ts.pop(gup)
            half = halves(gup, w.shape, 1)
            for part in ("gate_proj", "up_proj"):
                name = f"{p}.mlp.switch_mlp.{part}.weight"
                ts[name] = TensorInfo.of(name, w.dtype, half)
        down = f"{p}.mlp.experts.down_proj"
        if down in ts:
            name = f"{p}.mlp.switch_mlp.down_proj.weight"
            ts[name] = retag(ts.pop(down), name=name)
        _stack_experts(ts, f"{p}.mlp", f"{p}.mlp.switch_mlp", experts)
        split_kv_b(ts, f"{p}.self_attn", cfg, "mistral4")
    return drop(ts, lambda k: "rotary_emb.inv_freq" not in k)


def longcat_flash(ts: Tensors, cfg: dict[str, Any], fam: str = "longcat_flash") -> Tensors:
    """longcat_flash.py: experts stacked per layer (num_layers, not num_hidden_layers), then
    both attentions of each layer (self_attn.0 / .1) have kv_b_proj absorbed; model.mtp.*
    dropped last. longcat_flash_ngram runs it too (``fam``: whose ModelArgs defaults apply)."""
    ts = dict(ts)
    n = _count(model_arg(cfg, fam, "num_layers"), "num_layers")
    experts = model_arg(cfg, fam, "n_routed_experts")
    for layer in range(n):
        p = f"model.layers.{layer}"
        _stack_experts(ts, f"{p}.mlp", f"{p}.mlp.switch_mlp", experts)
    for layer in range(n):
        for i in range(2):
            split_kv_b(ts, f"model.layers.{layer}.self_attn.{i}", cfg, fam)
    return drop(ts, lambda k: not k.startswith("model.mtp"))


def _bailing_moe_v3(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """bailing_moe_v3.py: lm_head dropped when tied, MTP layers (model.layers.<i >= n>)
    dropped, per layer from first_k_dense_replace the experts' weights stacked, kv_b_proj
    absorbed (a quantized one refused), then HF short convolutions (C, 1, K) moved to (C, K, 1)
    in place."""
    ts = family_tie(ts, cfg, "bailing_moe_v3")
    n = _count(model_arg(cfg, "bailing_moe_v3", "num_hidden_layers"), "num_hidden_layers")
    out: Tensors = {}
    for k, v in ts.items():
        idx = k[len("model.layers."):].split(".", 1)[0] if k.startswith("model.layers.") else ""
        if not (idx.isdigit() and int(idx) >= n):
            out[k] = v
    dense = model_arg(cfg, "bailing_moe_v3", "first_k_dense_replace")
    experts = model_arg(cfg, "bailing_moe_v3", "num_experts")
    for layer in range(n):
        p = f"model.layers.{layer}"
        if layer >= _count(dense, "first_k_dense_replace"):
            _stack_experts(out, f"{p}.mlp", f"{p}.mlp.switch_mlp", experts,
                           projs=("gate_proj", "up_proj", "down_proj"), parts=("weight",),
                           what="num_experts")
        split_kv_b(out, f"{p}.attention", cfg, "bailing_moe_v3", quantized="refuse")
    for k, v in list(out.items()):
        if "_conv1d.weight" in k and v.shape and v.shape[-1] != 1:
            if len(v.shape) < 3:
                raise ConfigError(f"{k}: shape {list(v.shape)} has no axis 2 to move "
                                  "(mlx-lm's moveaxis raises)")
            s = v.shape
            out[k] = retag(v, shape=(s[0], s[2], s[1], *s[3:]))
    return out


_KIMI_TOWERS = ("vision_tower", "vision_model", "multi_modal_projector", "mm_projector")
_KIMI_RES = tuple((f"{src}.{a}_weight", f"{src}_{a}.weight")
                  for src in ("self_attention_res", "mlp_res", "output_attn_res")
                  for a in ("proj", "norm"))
_KIMI_MOE_NAMES = ("shared_experts.gate_proj", "shared_experts.up_proj",
                   "shared_experts.down_proj", "routed_expert_down_proj", "routed_expert_up_proj",
                   "routed_expert_norm", "gate", "switch_mlp.gate_proj", "switch_mlp.up_proj",
                   "switch_mlp.down_proj")


def _concat0(name: str, parts: list[TensorInfo]) -> TensorInfo:
    """``mx.concatenate(parts, axis=0)``."""
    first = parts[0]
    if any(len(t.shape) != len(first.shape) or not t.shape or t.shape[1:] != first.shape[1:]
           for t in parts):
        raise ConfigError(f"{name}: its parts differ past axis 0; mlx-lm cannot concatenate them")
    dtype = first.dtype
    if any(t.dtype != dtype for t in parts):
        if not all(t.dtype in FLOAT_DTYPES for t in parts):
            raise ConfigError(f"{name}: its parts differ in dtype; mlxfit does not model mlx's "
                              "promotion of those dtypes")
        dtype = "F32"
    return TensorInfo.of(name, dtype, (sum(t.shape[0] for t in parts), *first.shape[1:]))


def _kimi_k3_text(ts: Tensors, text: dict[str, Any]) -> Tensors:
    """kimi_k3.py LanguageModel.sanitize on the text model's names."""
    fam = "kimi_k3:text"
    n = _count(model_arg(text, fam, "num_hidden_layers"), "text_config.num_hidden_layers")
    ts = {k: v for k, v in ts.items() if not k.startswith(("model.mtp", "mtp"))}
    kept: Tensors = {}
    for k, v in ts.items():
        m = re.match(r"model\.layers\.(\d+)\.", k)
        if m is None or int(m[1]) < n:
            kept[k] = v
    ts = family_tie(kept, text, fam)
    for k in list(ts):
        for pat, dst in _KIMI_RES:
            if k.endswith(pat):
                name = k[: -len(pat)] + dst
                ts[name] = retag(ts.pop(k), name=name)
                break
    linear = text.get("linear_attn_config")
    if not isinstance(linear, dict) or "kda_layers" not in linear or "num_heads" not in linear:
        raise ConfigError("config.json: linear_attn_config with kda_layers and num_heads is "
                          "needed to build kimi_k3's layers")
    kda = linear["kda_layers"]
    experts = model_arg(text, fam, "num_experts")
    dense = _count(model_arg(text, fam, "first_k_dense_replace"), "text_config.first_k_dense_replace")
    freq = _count(model_arg(text, fam, "moe_layer_freq"), "text_config.moe_layer_freq")
    if not isinstance(kda, (list, tuple)) or (experts is not None and type(experts) is not int) \
            or freq < 1:
        raise ConfigError("config.json: text_config's kda_layers, num_experts or moe_layer_freq "
                          "is not what kimi_k3's layers are built from")
    for i in range(n):
        lp = f"model.layers.{i}"
        if (experts or 0) > 0 and i >= dense and i % freq == 0:
            _kimi_k3_moe(ts, f"{lp}.block_sparse_moe", f"{lp}.mlp", experts)
        ap = f"{lp}.self_attn"
        if (i + 1) in kda:
            _kimi_k3_delta(ts, ap, linear["num_heads"])
        split_kv_b(ts, ap, text, fam)
    return ts


def _kimi_k3_moe(ts: Tensors, src: str, dst: str, experts: Any) -> None:
    for w, proj in (("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj")):
        if f"{src}.experts.0.{w}.weight_packed" in ts:
            count = _count(experts, "text_config.num_experts")
            packed = [popped(ts, f"{src}.experts.{i}.{w}.weight_packed") for i in range(count)]
            scales = [popped(ts, f"{src}.experts.{i}.{w}.weight_scale") for i in range(count)]
            name = f"{dst}.switch_mlp.{proj}.weight"
            ts[name] = _view_u32(stacked(name, packed), name)
            ts[f"{dst}.switch_mlp.{proj}.scales"] = stacked(f"{dst}.switch_mlp.{proj}.scales",
                                                             scales)
        else:
            for suffix in _QPARTS:
                if f"{src}.experts.0.{w}.{suffix}" in ts:
                    count = _count(experts, "text_config.num_experts")
                    name = f"{dst}.switch_mlp.{proj}.{suffix}"
                    ts[name] = stacked(name, [popped(ts, f"{src}.experts.{i}.{w}.{suffix}")
                                               for i in range(count)])
    for name in _KIMI_MOE_NAMES:
        for suffix in _QPARTS:
            key = f"{src}.{name}.{suffix}"
            if key in ts:
                ts[f"{dst}.{name}.{suffix}"] = retag(ts.pop(key), name=f"{dst}.{name}.{suffix}")
    for key in (f"{src}.gate.e_score_correction_bias", f"{src}.e_score_correction_bias"):
        if key in ts:
            name = f"{dst}.e_score_correction_bias"
            ts[name] = retag(ts.pop(key), name=name)


def _kimi_k3_delta(ts: Tensors, ap: str, heads: Any) -> None:
    """A KDA layer: q/k/v_conv1d renamed (HF (C, 1, K) moved to (C, K, 1)), dt_bias and A_log
    flattened, A_log cut to num_heads, q/k/v projections and convolutions fused on axis 0."""
    for src, dst in (("q_conv1d", "q_conv"), ("k_conv1d", "k_conv"), ("v_conv1d", "v_conv")):
        key = f"{ap}.{src}.weight"
        if key in ts:
            w = ts.pop(key)
            name = f"{ap}.{dst}.conv.weight"
            s = w.shape
            ts[name] = TensorInfo.of(name, w.dtype, (s[0], s[2], s[1]) if len(s) == 3 else s)
    for name in ("dt_bias", "A_log"):
        key = f"{ap}.{name}"
        if key in ts and len(ts[key].shape) > 1:
            ts[key] = retag(ts[key], shape=(math.prod(ts[key].shape),))
    key = f"{ap}.A_log"
    if key in ts:
        if not ts[key].shape:
            raise ConfigError(f"{key}: a scalar; mlx-lm's sanitize reads its shape[0]")
        if type(heads) is not int:
            raise ConfigError("config.json: linear_attn_config.num_heads is not a number")
        if ts[key].shape[0] > heads:
            ts[key] = retag(ts[key], shape=(heads,))
    if f"{ap}.qkv_proj.weight" not in ts:
        for suffix in _QPARTS:
            parts = [f"{ap}.{p}_proj.{suffix}" for p in "qkv"]
            if all(p in ts for p in parts):
                name = f"{ap}.qkv_proj.{suffix}"
                ts[name] = _concat0(name, [ts.pop(p) for p in parts])
    conv = [f"{ap}.{p}_conv.conv.weight" for p in "qkv"]
    if f"{ap}.qkv_conv.conv.weight" not in ts and all(p in ts for p in conv):
        name = f"{ap}.qkv_conv.conv.weight"
        ts[name] = _concat0(name, [ts.pop(p) for p in conv])


def _kimi_k3(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """kimi_k3.py Model.sanitize: towers dropped, the language_model. prefix stripped, the text
    model's sanitize, then every name under language_model."""
    text = cfg.get("text_config", cfg)  # ModelArgs.from_dict: a flat config is the text one
    if not isinstance(text, dict):
        raise ConfigError("config.json: text_config is not an object (kimi_k3 reads it)")
    inner: Tensors = {}
    for k, v in ts.items():
        if k.startswith(_KIMI_TOWERS):
            continue
        k = k.removeprefix("language_model.")
        inner[k] = retag(v, name=k)
    out = _kimi_k3_text(inner, text)
    return {f"language_model.{k}": retag(v, name=f"language_model.{k}") for k, v in out.items()}


_V41_DROP = ("vision.", "aligner.", "image_", "mtp.")
_V41_EXPERT = r"layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.(weight|scale)"
_V41_PROJ = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}
_V41_RENAMES = (
    (".attn.", ".self_attn."), (".ffn.", ".mlp."), (".attn_norm.", ".input_layernorm."),
    (".ffn_norm.", ".post_attention_layernorm."), (".hc_attn_", ".attn_hc."),
    (".hc_ffn_", ".ffn_hc."), (".attn_sink", ".sinks"), (".wq_a.", ".q_a_proj."),
    (".wq_b.", ".q_b_proj."), (".wkv.", ".kv_proj."), (".wgate.", ".gate_proj."),
    (".wo_a.", ".o_a_proj."), (".wo_b.", ".o_b_proj."), (".q_norm.", ".q_a_norm."),
    (".compressor.norm.", ".compressor.kv_norm."), (".indexer.wk.", ".indexer.k_proj."),
    (".gate.bias", ".gate.e_score_correction_bias"),
    (".shared_experts.w1.", ".shared_experts.gate_proj."),
    (".shared_experts.w2.", ".shared_experts.down_proj."),
    (".shared_experts.w3.", ".shared_experts.up_proj."),
)


def _v41_rename(key: str) -> str:
    """deepseek_v41.py _rename: one DeepSeek checkpoint name to its MLX name."""
    if key == "head.weight":
        return "lm_head.weight"
    if key == "embed.weight":
        return "model.embed_tokens.weight"
    key = f"model.{key}"
    for old, new in _V41_RENAMES:
        key = key.replace(old, new)
    return key


def _v41_repack(w: TensorInfo, scale: TensorInfo, name: str) -> tuple[TensorInfo, TensorInfo]:
    """deepseek_v41.py _repack: the packed weight viewed as uint32, its ue8m0 scale as uint8,
    32x32-tile scales repeated to one per output row."""
    if len(scale.shape) < 2 or len(w.shape) < 2:
        raise ConfigError(f"{name}: weight {list(w.shape)} or scale {list(scale.shape)} has no "
                          "row axis (mlx-lm's repack reads shape[-2])")
    rows = scale.shape[-2]
    if rows != w.shape[-2]:
        rows = min(rows * 32, w.shape[-2])
    sname = name.removesuffix("weight") + "scales"
    return (_view_u32(w, name),
            TensorInfo.of(sname, "U8", (*scale.shape[:-2], rows, scale.shape[-1])))


def _o_groups(t: TensorInfo, groups: Any, name: str) -> TensorInfo:
    """``value.reshape(o_groups, -1, value.shape[-1])``."""
    last, size = (t.shape[-1] if t.shape else 0), math.prod(t.shape)
    if type(groups) is not int or groups < 1 or last < 1 or size % (groups * last):
        raise ConfigError(f"{name}: shape {list(t.shape)} does not reshape into o_groups="
                          f"{groups!r} groups")
    return retag(t, shape=(groups, size // (groups * last), last))


def _deepseek_v41(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """deepseek_v41.py: a checkpoint with MLX names (any "model." key) passes untouched; the
    published one loses its vision, aligner, image, MTP and engram tensors and image-routing
    biases, is renamed, has FP8/FP4 weights with a ``.scale`` repacked as MLX quantized
    tensors, wo_a split into its o_groups, and its experts stacked per layer and projection
    (appended, in order of first appearance)."""
    if any(k.startswith("model.") for k in ts):
        return ts
    args = {**cfg["text_config"], "model_type": cfg.get("model_type")} if isinstance(
        cfg.get("text_config"), dict) else cfg
    text = {k: v for k, v in ts.items() if not k.startswith(_V41_DROP) and ".engram." not in k}
    clean: Tensors = {}
    experts: dict[tuple[int, str], dict[int, dict[str, TensorInfo]]] = {}
    for key, value in text.items():
        m = re.fullmatch(_V41_EXPERT, key)
        if m is not None:
            rows = experts.setdefault((int(m[1]), m[3]), {})
            rows.setdefault(int(m[2]), {})[m[4]] = value
            continue
        if key.endswith(".gate.bias_vl"):
            continue
        if key.endswith(".scale") and f"{key.removesuffix('.scale')}.weight" in text:
            continue
        scale = text.get(f"{key.removesuffix('.weight')}.scale") if key.endswith(".weight") \
            else None
        name = _v41_rename(key)
        if scale is not None:
            value, scale = _v41_repack(value, scale, name)
        if name.endswith(".o_a_proj.weight"):
            groups = model_arg(args, "deepseek_v41", "o_groups")
            value = _o_groups(value, groups, name)
            if scale is not None:
                scale = _o_groups(scale, groups, name)
        clean[name] = retag(value, name=name)
        if scale is not None:
            sname = f"{name.removesuffix('weight')}scales"
            clean[sname] = retag(scale, name=sname)
    n = model_arg(args, "deepseek_v41", "n_routed_experts")
    for (layer, proj), rows in experts.items():
        if len(rows) != n:
            raise ConfigError(f"layers.{layer}.ffn.experts: {len(rows)} {proj} expert weights, "
                              f"but the config declares n_routed_experts={n!r} (mlx-lm raises)")
        parts = [rows[i] for i in sorted(rows)]
        name = f"model.layers.{layer}.mlp.experts.switch_mlp.{_V41_PROJ[proj]}"
        if any("weight" not in p for p in parts):
            raise ConfigError(f"layers.{layer}.ffn.experts: a {proj} expert has a scale and no "
                              "weight (mlx-lm's sanitize reads it)")
        value = stacked(f"{name}.weight", [p["weight"] for p in parts])
        if "scale" in parts[0]:
            if any("scale" not in p for p in parts):
                raise ConfigError(f"layers.{layer}.ffn.experts: some {proj} experts have no "
                                  "scale (mlx-lm's sanitize reads one for each)")
            scales = stacked(f"{name}.scales", [p["scale"] for p in parts])
            value, scales = _v41_repack(value, scales, f"{name}.weight")
            clean[f"{name}.scales"] = scales
        clean[f"{name}.weight"] = retag(value, name=f"{name}.weight")
    return clean


SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    "deepseek_v2": _deepseek_v2,
    "deepseek_v32": _v32("deepseek_v32"),
    "glm_moe_dsa": _v32("glm_moe_dsa"),
    "mistral4": _mistral4,
    "longcat_flash": longcat_flash,
    "bailing_moe_v3": _bailing_moe_v3,
    "kimi_k3": _kimi_k3,
    "deepseek_v41": _deepseek_v41,
}
