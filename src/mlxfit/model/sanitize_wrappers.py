"""Multimodal and text-config wrappers (towers dropped, language_model prefixes): mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_wrappers.py).

Families: gemma3n, lfm2-vl, pixtral, qwen2_vl, qwen3_vl, qwen3_vl_moe, kimi_vl, kimi_k25, minimax_m3_vl, gemma4, gemma4_text, llama4, muse_spark.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_ops import (
    FP8_DTYPES,
    KV_B_BY_KIND,
    Tensors,
    flatten,
    fp8_dequantized,
    halves,
    model_arg,
    pop_subtree,
    popped,
    retag,
    scale_inv_applied,
    split_kv_b,
    subtree,
    unflatten,
)
from mlxfit.model.tensors import DTYPE_BYTES, TensorInfo


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    text = cfg.get("text_config")
    return text if isinstance(text, dict) else {}




def _count(value: Any, what: str) -> int:
    """A ``range()`` bound mlx-lm's sanitize loops over."""
    if type(value) is not int:
        raise ConfigError(f"config.json: {what} is {value!r}; mlx-lm's sanitize loops over it")
    return value


def _pop_towers(*towers: str) -> Callable[[Tensors, dict[str, Any]], Tensors]:
    """pixtral.py, lfm2-vl.py: tree_unflatten, the top-level towers popped, tree_flatten (the
    text model's own sanitize is not called)."""
    def sanitize(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
        tree = unflatten(ts)
        for k in towers:
            pop_subtree(tree, k, "checkpoint")
        return flatten(tree)
    return sanitize


def _lfm2_vl(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """lfm2-vl.py: the towers popped, and nothing else: unlike lfm2.py it does not move a
    PyTorch conv weight (C, 1, K) to MLX's (C, K, 1), so mlx_lm.convert's strict load refuses
    such a checkpoint (checked in tests/test_sanitize_wrappers_unloadable.py)."""
    out = _pop_towers("vision_tower", "multi_modal_projector")(ts, cfg)
    for k, v in out.items():
        if "conv.weight" in k and len(v.shape) == 3 and v.shape[-1] > v.shape[1]:
            raise ConfigError(f"{k}: shape {list(v.shape)} is PyTorch's conv layout; mlx-lm's "
                              "lfm2-vl sanitize keeps it and its strict load refuses it")
    return out


def _gemma3n(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """gemma3n.py: the towers and their embedders popped from under ``model``."""
    tree = unflatten(ts)
    model = subtree(tree, "model", "model.*")
    for k in ("vision_tower", "audio_tower", "embed_audio", "embed_vision"):
        pop_subtree(model, k, "model.*")
    return flatten(tree)


def _renamed(ts: Tensors, fn: Callable[[str], str]) -> Tensors:
    """``{fn(k): v}`` as mlx-lm's loops build it (a later name that collides keeps the first's
    place and takes its value)."""
    out: Tensors = {}
    for k, v in ts.items():
        out[fn(k)] = retag(v, name=fn(k))
    return out


def _lm_prefixed(k: str) -> str:
    return k if k.startswith("language_model.") else "language_model." + k


def _qwen_vl(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """qwen2_vl.py / qwen3_vl.py: towers popped; a ``model.language_model`` subtree replaces
    all of ``model``; every name not under ``language_model.`` put there."""
    tree = unflatten(ts)
    pop_subtree(tree, "visual", "checkpoint")
    pop_subtree(tree, "vision_tower", "checkpoint")
    model = tree.get("model", {})
    if not isinstance(model, dict):
        raise ConfigError("model.*: tensor names are list indices where mlx-lm's sanitize "
                          "expects model.language_model")
    lm = model.get("language_model")
    if isinstance(lm, TensorInfo):
        raise ConfigError("model.language_model: a tensor where mlx-lm's sanitize expects the "
                          "language model's subtree")
    if lm:
        tree["model"] = lm
    return _renamed(flatten(tree), _lm_prefixed)


def _swapped(k: str, shape: tuple[int, ...], a: int, b: int) -> tuple[int, ...]:
    """``swapaxes(a, b)``, which raises on an array with too few axes."""
    n = len(shape)
    if not (-n <= a < n and -n <= b < n):
        raise ConfigError(f"{k}: shape {list(shape)} has no axes {a} and {b} to swap as mlx-lm's "
                          "sanitize does")
    out = list(shape)
    out[a], out[b] = out[b], out[a]
    return tuple(out)


def _put(out: Tensors, name: str, dtype: str, shape: tuple[int, ...]) -> None:
    out[name] = TensorInfo.of(name, dtype, shape)




def _stack_experts(ts: Tensors, prefix: str, names: tuple[tuple[str, str], ...], n: Any,
                   parts: tuple[str, ...] = ("weight", "scales", "biases")) -> None:
    """The DeepSeek-style expert stacking in place: for each (source, target) name and part,
    if expert 0 is there, experts 0..n-1 popped and stacked into ``switch_mlp.<target>``
    (appended)."""
    for src, dst in names:
        for part in parts:
            if f"{prefix}.experts.0.{src}.{part}" not in ts:
                continue
            members = [popped(ts, f"{prefix}.experts.{e}.{src}.{part}")
                       for e in range(_count(n, "the number of routed experts"))]
            first = members[0]
            if any(t.shape != first.shape or t.dtype != first.dtype for t in members):
                raise ConfigError(f"{prefix}.experts.*.{src}.{part}: experts differ in shape or "
                                  "dtype; mlx-lm's sanitize cannot stack them")
            _put(ts, f"{prefix}.switch_mlp.{dst}.{part}", first.dtype, (len(members), *first.shape))


def _llama4(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """llama4.py: vision weights dropped; the fused experts (E, H, 2I) split into gate and up
    and transposed to SwitchGLU's (E, I, H), down (E, I, H) transposed; all appended."""
    ts = {k: v for k, v in ts.items() if "vision_model" not in k
          and "multi_modal_projector" not in k}
    n = _count(model_arg(_text(cfg), "llama4:text", "num_hidden_layers"), "num_hidden_layers")
    for layer in range(n):
        prefix = f"language_model.model.layers.{layer}.feed_forward.experts"
        if f"{prefix}.gate_up_proj" in ts:
            k = f"{prefix}.gate_up_proj"
            v = ts.pop(k)
            half = _swapped(k, halves(k, v.shape, -1), 1, 2)
            _put(ts, f"{prefix}.gate_proj.weight", v.dtype, half)
            _put(ts, f"{prefix}.up_proj.weight", v.dtype, half)
        if f"{prefix}.down_proj" in ts:
            k = f"{prefix}.down_proj"
            v = ts.pop(k)
            _put(ts, f"{prefix}.down_proj.weight", v.dtype, _swapped(k, v.shape, 1, 2))
    return ts


def _kimi_vl(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """kimi_vl.py: towers and rotary buffers dropped, experts stacked (DeepSeek-V3's text
    sanitize is not called: kv_b_proj is not split, FP8 not dequantized)."""
    ts = {k: v for k, v in ts.items() if "vision_tower" not in k and "rotary_emb" not in k
          and "multi_modal_projector" not in k}
    text = _text(cfg)
    n = _count(model_arg(text, "kimi_vl:text", "num_hidden_layers"), "text_config.num_hidden_layers")
    experts = model_arg(text, "kimi_vl:text", "n_routed_experts")
    names = (("gate_proj", "gate_proj"), ("down_proj", "down_proj"), ("up_proj", "up_proj"))
    for layer in range(n):
        _stack_experts(ts, f"language_model.model.layers.{layer}.mlp", names, experts)
    for k in ts:
        if k.endswith("self_attn.kv_b_proj.weight"):
            raise ConfigError(f"{k}: mlx-lm's kimi_vl sanitize does not split it into embed_q / "
                              "unembed_out, and its strict load refuses it")
    return ts


def _qwen3_vl_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """qwen3_vl_moe.py: only language_model.model and lm_head kept (from the newer
    model.language_model + lm_head or the older language_model.{model,lm_head}); the fused
    experts (E, H, 2I) split into switch_mlp's gate and up (E, I, H), down transposed."""
    tree = unflatten(ts)
    pop_subtree(tree, "visual", "checkpoint")
    model = tree.get("model", {}) if isinstance(tree, dict) else None
    if not isinstance(model, dict):
        raise ConfigError("checkpoint: tensor names are list indices where mlx-lm's sanitize "
                          "expects model.language_model")
    lm = model.get("language_model")
    if isinstance(lm, TensorInfo):
        raise ConfigError("model.language_model: a tensor where mlx-lm's sanitize expects the "
                          "language model's subtree")
    if lm:
        head = subtree(tree, "lm_head", "lm_head.*")
    else:
        old = subtree(tree, "language_model", "language_model.*")
        lm = subtree(old, "model", "language_model.model.*")
        head = subtree(old, "lm_head", "language_model.lm_head.*")
    ts = flatten({"language_model": {"model": lm, "lm_head": head}})
    n = _count(model_arg(_text(cfg), "qwen3_moe", "num_hidden_layers"), "num_hidden_layers")
    for layer in range(n):
        prefix = f"language_model.model.layers.{layer}.mlp"
        k = f"{prefix}.experts.gate_up_proj"
        if k in ts:
            v = ts.pop(k)
            if not v.shape:
                raise ConfigError(f"{k}: a scalar; mlx-lm's sanitize splits its last axis")
            mid = v.shape[-1] // 2
            for part, width in (("gate_proj", mid), ("up_proj", v.shape[-1] - mid)):
                shape = _swapped(k, (*v.shape[:-1], width), -2, -1)
                _put(ts, f"{prefix}.switch_mlp.{part}.weight", v.dtype, shape)
            down = popped(ts, f"{prefix}.experts.down_proj")
            _put(ts, f"{prefix}.switch_mlp.down_proj.weight", down.dtype,
                 _swapped(down.name, down.shape, -2, -1))
    return ts


_GEMMA4_DROP = ("self_attn.rotary_emb", "input_max", "input_min", "output_max", "output_min")
_GEMMA4_KV = (".self_attn.k_proj", ".self_attn.v_proj", ".self_attn.k_norm")


def _gemma4_text_sanitize(ts: Tensors, text: dict[str, Any]) -> Tensors:
    """gemma4_text.py: rotary buffers and activation ranges dropped, K/V projections of the
    KV-shared layers dropped, the fused experts split into switch_glu's gate and up."""
    n = model_arg(text, "gemma4_text", "num_hidden_layers")
    shared = model_arg(text, "gemma4_text", "num_kv_shared_layers")
    if type(n) is not int or type(shared) is not int:
        raise ConfigError("config.json: num_hidden_layers and num_kv_shared_layers must be "
                          "integers for mlx-lm's gemma4 sanitize")
    first_kv_shared = n - shared
    out: Tensors = {}
    for k, v in ts.items():
        if any(s in k for s in _GEMMA4_DROP):
            continue
        if any(s in k for s in _GEMMA4_KV):
            try:
                if int(k.split("layers.")[1].split(".")[0]) >= first_kv_shared:
                    continue
            except (IndexError, ValueError):
                pass
        if k.endswith(".experts.gate_up_proj"):
            base = k.removesuffix(".gate_up_proj")
            half = halves(k, v.shape, -2)
            _put(out, f"{base}.switch_glu.gate_proj.weight", v.dtype, half)
            _put(out, f"{base}.switch_glu.up_proj.weight", v.dtype, half)
            continue
        if k.endswith(".experts.down_proj"):
            _put(out, f"{k.removesuffix('.down_proj')}.switch_glu.down_proj.weight", v.dtype,
                 v.shape)
            continue
        out[k] = v
    return out


def _gemma4_text(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    return _gemma4_text_sanitize(ts, cfg)


_GEMMA4_TOWERS = ("vision_tower", "multi_modal_projector", "audio_tower", "embed_audio",
                  "embed_vision", "vision_embedder")


def _gemma4(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """gemma4.py: ``model.`` stripped, towers dropped, ``model.language_model.`` moved to
    ``language_model.model.``, then gemma4_text's sanitize with the text config."""
    out: Tensors = {}
    for k, v in ts.items():
        starts_w_model = k.startswith("model.")
        k = k.removeprefix("model.")
        if k.startswith(_GEMMA4_TOWERS):
            continue
        if starts_w_model and k.startswith("language_model"):
            k = k.replace("language_model.", "language_model.model.")
        out[k] = retag(v, name=k)
    return _gemma4_text_sanitize(out, _text(cfg))


def _view_u32(k: str, t: TensorInfo) -> tuple[int, ...]:
    """The shape of ``v.view(mx.uint32)``: the last axis rescaled by the itemsize ratio."""
    size = DTYPE_BYTES[t.dtype]
    if size == 4:
        return t.shape
    if not t.shape or (t.shape[-1] * size) % 4:
        raise ConfigError(f"{k}: shape {list(t.shape)} of {t.dtype} cannot be viewed as uint32 "
                          "as mlx-lm's sanitize does")
    return (*t.shape[:-1], t.shape[-1] * size // 4)


def deepseek_v3_text(ts: Tensors, text: dict[str, Any]) -> Tensors:
    """deepseek_v3.py Model.sanitize (as kimi_k25 calls it on its language model): int4
    compressed-tensors remapped to MLX's quantized triple, FP8 (uint8 + weight_scale_inv)
    dequantized to bfloat16, experts stacked, kv_b_proj split into embed_q / unembed_out (re-
    quantized when it came quantized), layer 61 (the MTP layer) and rotary buffers dropped."""
    def arg(field: str) -> Any:
        return model_arg(text, "deepseek_v3", field)

    out: Tensors = {}
    for k, v in ts.items():
        if k.endswith("weight_shape"):
            base = k.replace("weight_shape", "")
            packed = ts.get(base + "weight_packed")
            scale = ts.get(base + "weight_scale")
            if packed is None or scale is None:
                raise ConfigError(f"{k}: no {base}weight_packed and weight_scale beside it; "
                                  "mlx-lm's sanitize needs both")
            if scale.dtype.startswith("U") or scale.dtype == "BOOL":
                raise ConfigError(f"{base}weight_scale: {scale.dtype}; mlx-lm's sanitize "
                                  "negates it")
            _put(out, base + "weight", "U32", _view_u32(base + "weight_packed", packed))
            _put(out, base + "scales", scale.dtype, scale.shape)
            _put(out, base + "biases", scale.dtype, scale.shape)
        elif not k.endswith(("weight_scale", "weight_packed")):
            out[k] = v
    ts = scale_inv_applied(out, "deepseek_v3", fp8_dequantized)
    names = (("gate_proj", "gate_proj"), ("down_proj", "down_proj"), ("up_proj", "up_proj"))
    for layer in range(_count(arg("num_hidden_layers"), "num_hidden_layers")):
        _stack_experts(ts, f"model.layers.{layer}.mlp", names, arg("n_routed_experts"))
        split_kv_b(ts, f"model.layers.{layer}.self_attn", text, "deepseek_v3",
                   order=KV_B_BY_KIND)
    return {k: v for k, v in ts.items()
            if not k.startswith("model.layers.61") and "rotary_emb.inv_freq" not in k}


def _kimi_k25(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """kimi_k25.py: towers popped, DeepSeek-V3's sanitize on the language_model subtree."""
    tree = unflatten(ts)
    for k in ("vision_tower", "vision_model", "multi_modal_projector", "mm_projector"):
        pop_subtree(tree, k, "checkpoint")
    lm = flatten(subtree(tree, "language_model", "language_model.*"))
    tree["language_model"] = unflatten(deepseek_v3_text(lm, _text(cfg)))
    return flatten(tree)


_PARTS = ("weight", "scales", "biases")


def _minimax_m3_vl(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """minimax_m3_vl.py: towers dropped, a tied lm_head dropped, MXFP8 scales renamed (weights
    viewed as uint32), a dense MLP stored under block_sparse_moe moved to mlp, a shared expert
    folded in as expert n split out, fused gate_up split, per-expert w1/w2/w3 stacked."""
    text = _text(cfg)

    def arg(field: str) -> Any:
        return model_arg(text, "minimax_m3_vl:text", field)

    out = {k: v for k, v in ts.items()
           if not k.startswith(("vision_tower.", "multi_modal_projector.", "patch_merge_mlp."))}
    if arg("tie_word_embeddings"):
        out.pop("language_model.lm_head.weight", None)
    for k in [k for k in out if k.endswith(".weight_scale_inv")]:
        base = k[: -len(".weight_scale_inv")]
        out[f"{base}.scales"] = retag(out.pop(k), name=f"{base}.scales")
        w = out.get(f"{base}.weight")
        if w is None:
            raise ConfigError(f"{k}: no {base}.weight beside it; mlx-lm's sanitize needs it")
        _put(out, f"{base}.weight", "U32", _view_u32(w.name, w))
    n = arg("num_local_experts")
    experts = (("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj"))
    for i in range(_count(arg("num_hidden_layers"), "text_config.num_hidden_layers")):
        moe = f"language_model.model.layers.{i}.block_sparse_moe"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            if f"{moe}.{proj}.weight" not in out:
                continue
            mlp = f"language_model.model.layers.{i}.mlp"
            for part in _PARTS:
                v = out.pop(f"{moe}.{proj}.{part}", None)
                if v is not None:
                    out[f"{mlp}.{proj}.{part}"] = retag(v, name=f"{mlp}.{proj}.{part}")
        for proj in ("gate_up_proj", "gate_proj", "up_proj", "down_proj"):
            w = out.get(f"{moe}.switch_mlp.{proj}.weight")
            if w is None:
                continue
            if not w.shape or type(n) is not int:
                raise ConfigError(f"{w.name}: no expert count to compare (shape "
                                  f"{list(w.shape)}, num_local_experts {n!r})")
            if w.shape[0] != n + 1:
                continue
            for part in _PARTS:
                v = out.pop(f"{moe}.switch_mlp.{proj}.{part}", None)
                if v is None:
                    continue
                if not v.shape or v.shape[0] < n + 1:
                    raise ConfigError(f"{v.name}: shape {list(v.shape)} has no expert {n} to "
                                      "split out as mlx-lm's sanitize does")
                _put(out, f"{moe}.switch_mlp.{proj}.{part}", v.dtype, (n, *v.shape[1:]))
                _put(out, f"{moe}.shared_experts.{proj}.{part}", v.dtype, v.shape[1:])
        for owner in (f"{moe}.switch_mlp", f"{moe}.shared_experts"):
            for part in _PARTS:
                fused = out.pop(f"{owner}.gate_up_proj.{part}", None)
                if fused is None:
                    continue
                half = halves(fused.name, fused.shape, -2)
                _put(out, f"{owner}.gate_proj.{part}", fused.dtype, half)
                _put(out, f"{owner}.up_proj.{part}", fused.dtype, half)
        if f"{moe}.experts.0.w1.weight" not in out:
            continue
        for src, dst in experts:
            for part in _PARTS:
                if f"{moe}.experts.0.{src}.{part}" not in out:
                    continue
                members = [popped(out, f"{moe}.experts.{e}.{src}.{part}")
                           for e in range(_count(n, "text_config.num_local_experts"))]
                if any(t.shape != members[0].shape for t in members):
                    raise ConfigError(f"{moe}.experts.*.{src}.{part}: experts differ in shape; "
                                      "mlx-lm's sanitize cannot stack them")
                if any(t.dtype != members[0].dtype for t in members):
                    raise ConfigError(f"{moe}.experts.*.{src}.{part}: experts differ in dtype "
                                      "(mlx-lm would promote them; not modelled)")
                _put(out, f"{moe}.switch_mlp.{dst}.{part}", members[0].dtype,
                     (len(members), *members[0].shape))
    return out


_MUSE_GATES = {"post_attention_residual_gate.gate": "add_attn",
               "post_feedforward_residual_gate.gate": "add_ffn"}
_MUSE_LAYER = re.compile(r"^(model\.language_model\.layers\.\d+\.)(.+)$")
# muse_spark.py _ZERO_CENTERED_NORMS: stored as their gain, in bfloat16.
_MUSE_NORMS = ("input_layernorm.weight", "pre_feedforward_layernorm.weight",
               "post_feedforward_layernorm.weight", "mlp.pre_expert_norm.weight",
               "mlp.experts.post_expert_norm.weight")
_MUSE_UNUSED = ("mlp.experts.gate_up_proj_input_scale", "mlp.experts.down_proj_input_scale")


def _u8_as_u32(k: str, dtype: str, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """``v.view(mx.uint32) if v.dtype == mx.uint8 else v`` (mlx reads FP8/FP4 bytes as uint8)."""
    if dtype not in ("U8", *FP8_DTYPES):
        return dtype, shape
    return "U32", _view_u32(k, TensorInfo.of(k, "U8", shape))


def _times_float(dtype: str) -> str:
    """The dtype of ``v * <python float>``: a float array keeps its dtype, others go float32."""
    return dtype if dtype in ("F16", "BF16", "F32", "F64") else "F32"


def _interleaved(k: str, shape: tuple[int, ...], head_dim: Any) -> None:
    """``interleave_rope_rows`` keeps the shape, but its reshape needs whole heads."""
    if (type(head_dim) is not int or head_dim < 2 or not shape
            or shape[0] % (2 * (head_dim // 2))):
        raise ConfigError(f"{k}: {shape[0] if shape else 0} rows are not whole heads of "
                          f"{head_dim!r} for mlx-lm's RoPE row interleave")


def _concat_rows(name: str, parts: list[TensorInfo]) -> TensorInfo:
    first = parts[0]
    if any(len(t.shape) != len(first.shape) or t.shape[1:] != first.shape[1:] or not t.shape
           for t in parts):
        raise ConfigError(f"{name}: {', '.join(t.name for t in parts)} differ past their rows; "
                          "mlx-lm cannot concatenate them")
    if any(t.dtype != first.dtype for t in parts):
        raise ConfigError(f"{name}: {', '.join(t.name for t in parts)} differ in dtype (mlx-lm "
                          "would promote them; not modelled)")
    return TensorInfo.of(name, first.dtype, (sum(t.shape[0] for t in parts), *first.shape[1:]))


def _muse_spark(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """muse_spark.py: audio (and, without a vision_config, vision) dropped; residual gates
    turned into float32 alpha/beta, zero-centred norms into bfloat16 gains, fused and NVFP4
    experts split and renamed (uint8 packs viewed as uint32), activation scales dropped (all
    unless the checkpoint is already converted: an ``*_alpha`` name); q, k, v and the output
    gate concatenated into qkvg_proj, the vision q, k, v into qkv_proj."""
    text = _text(cfg)
    vision = cfg.get("vision_config")
    drop = ("model.audio_tower.",)
    if not vision:
        drop += ("model.vision_tower.", "model.vision_adapter.", "model.vision_projection.")
    converted = any(k.endswith("_alpha") for k in ts)
    out: Tensors = {}
    for k, v in ts.items():
        if k.startswith(drop):
            continue
        m = _MUSE_LAYER.match(k)
        if m is None or converted:
            out[k] = v
            continue
        prefix, suffix = m.groups()
        experts = prefix + "mlp.experts."
        if suffix in _MUSE_GATES:
            for coef in ("_alpha", "_beta"):
                _put(out, prefix + _MUSE_GATES[suffix] + coef, "F32", v.shape)
        elif suffix in _MUSE_NORMS:
            _put(out, k, "BF16", v.shape)
        elif suffix == "mlp.experts.gate_up_proj":
            dtype, half = _u8_as_u32(k, v.dtype, halves(k, v.shape, 1))
            _put(out, experts + "gate_proj.weight", dtype, half)
            _put(out, experts + "up_proj.weight", dtype, half)
        elif suffix == "mlp.experts.gate_up_proj_weight_scale":
            half = halves(k, v.shape, 1)
            _put(out, experts + "gate_proj.scales", v.dtype, half)
            _put(out, experts + "up_proj.scales", v.dtype, half)
        elif suffix == "mlp.experts.gate_up_proj_weight_scale_2":
            if len(v.shape) < 2 or v.shape[1] < 2:
                raise ConfigError(f"{k}: shape {list(v.shape)} has no gate and up columns")
            for part in ("gate_proj", "up_proj"):
                _put(out, experts + part + ".global_scale", _times_float(v.dtype),
                     (v.shape[0], *v.shape[2:]))
        elif suffix == "mlp.experts.down_proj":
            _put(out, experts + "down_proj.weight", *_u8_as_u32(k, v.dtype, v.shape))
        elif suffix == "mlp.experts.down_proj_weight_scale":
            _put(out, experts + "down_proj.scales", v.dtype, v.shape)
        elif suffix == "mlp.experts.down_proj_weight_scale_2":
            _put(out, experts + "down_proj.global_scale", _times_float(v.dtype), v.shape)
        elif suffix in _MUSE_UNUSED:
            continue
        else:
            out[k] = v
    head_dim = model_arg(text, "muse_spark:text", "head_dim")
    for k in [k for k in out if k.endswith("self_attn.q_proj.weight")]:
        attn = k[: -len("q_proj.weight")]
        for param in _PARTS:
            keys = [f"{attn}{p}.{param}" for p in ("q_proj", "k_proj", "v_proj", "gate_proj")]
            if all(key in out for key in keys):
                parts = [out.pop(key) for key in keys]
                for t in parts[:2]:
                    _interleaved(t.name, t.shape, head_dim)
                name = f"{attn}qkvg_proj.{param}"
                out[name] = _concat_rows(name, parts)
    if isinstance(vision, dict):
        vh, vn = vision.get("hidden_size", 1536), vision.get("num_attention_heads", 16)
        vision_head = vh // vn if type(vh) is int and type(vn) is int and vn else None
    else:
        vision_head = None
    for k in [k for k in out if k.startswith("model.vision_tower.")
              and k.endswith(".attn.q_proj.weight")]:
        attn = k[: -len("q_proj.weight")]
        for param in ("weight", "bias"):
            parts = [popped(out, f"{attn}{p}_proj.{param}") for p in "qkv"]
            for t in parts[:2]:
                _interleaved(t.name, t.shape, vision_head)
            name = f"{attn}qkv_proj.{param}"
            out[name] = _concat_rows(name, parts)
    return out


SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    "pixtral": _pop_towers("vision_tower", "multi_modal_projector"),
    "lfm2-vl": _lfm2_vl,
    "gemma3n": _gemma3n,
    "qwen2_vl": _qwen_vl,
    "qwen3_vl": _qwen_vl,
    "llama4": _llama4,
    "kimi_vl": _kimi_vl,
    "qwen3_vl_moe": _qwen3_vl_moe,
    "gemma4_text": _gemma4_text,
    "gemma4": _gemma4,
    "kimi_k25": _kimi_k25,
    "minimax_m3_vl": _minimax_m3_vl,
    "muse_spark": _muse_spark,
}
