"""The building blocks of mlx-lm's ``Model.sanitize`` replays (model/convert_rules.py and the
per-kind replay modules model/sanitize_*.py): pure functions on tensor descriptors (names, dtypes,
shapes), never on tensor data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mlxfit.errors import ConfigError
from mlxfit.model.mlx_lm_args import MODEL_ARGS
from mlxfit.model.tensors import FLOAT_DTYPES, TensorInfo

Tensors = dict[str, TensorInfo]  # name -> descriptor, in the order sanitize leaves them

# mlx_lm/models/deepseek_v3.py sanitize: FP8 blocks of 128x128 dequantized to bfloat16.
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})


@dataclass(frozen=True)
class Rules:
    """One mlx-lm family's convert-time facts."""

    sanitize: Callable[[Tensors, dict[str, Any]], Tensors]
    # Module-path suffixes whose ".weight" is a plain parameter of a class without
    # to_quantized (DeepSeek's MoEGate), so nn.quantize leaves them alone.
    not_quantizable: tuple[str, ...] = ()
    # Substrings of parameter names the family's cast_predicate keeps out of --dtype.
    keep_dtype: tuple[str, ...] = ()
    # The family's quant_predicate: module-path suffixes -> to_quantized kwargs.
    predicate: tuple[tuple[str, dict[str, int]], ...] = ()
    # When the predicate applies (Qwen3.5's only with experts); None: always.
    predicate_if: Callable[[dict[str, Any]], bool] | None = None
    # The sanitize is checked against the real mlx_lm.convert in the tests; the quantization
    # facts above are checked for every family listed (against quantize_model).
    verified: bool = True
    # Module paths the quant_predicate leaves in float on some layers only (path, config).
    skip: Callable[[str, dict[str, Any]], bool] | None = None

    def family_predicate(self, cfg: dict[str, Any]) -> dict[str, dict[str, int]]:
        if self.predicate_if is not None and not self.predicate_if(cfg):
            return {}
        return dict(self.predicate)


def model_arg(cfg: dict[str, Any], family: str, key: str) -> Any:
    """``self.args.<key>`` as the family's sanitize reads it: the config's value, else the
    family's ModelArgs default (model/mlx_lm_args.py)."""
    if key in cfg:
        return cfg[key]
    return MODEL_ARGS.get(family, {}).get("defaults", {}).get(key)


def popped(ts: Tensors, key: str) -> TensorInfo:
    """``weights.pop(key)``: mlx-lm's KeyError on a checkpoint without it, as one line."""
    if key not in ts:
        raise ConfigError(f"{key}: missing; mlx-lm's sanitize reads it (KeyError)")
    return ts.pop(key)


def stacked(name: str, members: list[TensorInfo]) -> TensorInfo:
    """``mx.stack(members)`` under ``name``: one (len, *shape) tensor of equal shapes; mixed
    float dtypes promote to float32 as mx.stack does (mixed with a non-float: not modelled)."""
    if not members:
        raise ConfigError(f"{name}: nothing to stack (mx.stack of an empty list raises)")
    first = members[0]
    if any(t.shape != first.shape for t in members):
        raise ConfigError(f"{name}: the tensors mlx-lm stacks into it differ in shape")
    dtypes = {t.dtype for t in members}
    if len(dtypes) > 1 and not dtypes <= set(FLOAT_DTYPES):
        raise ConfigError(f"{name}: the tensors mlx-lm stacks into it mix dtypes "
                          f"{sorted(dtypes)}; mlxfit does not model that promotion")
    return TensorInfo.of(name, first.dtype if len(dtypes) == 1 else "F32",
                         (len(members), *first.shape))


def retag(t: TensorInfo, name: str | None = None, shape: tuple[int, ...] | None = None,
        dtype: str | None = None) -> TensorInfo:
    return TensorInfo.of(name or t.name, dtype or t.dtype, shape if shape is not None else t.shape)


def drop(ts: Tensors, keep: Callable[[str], bool]) -> Tensors:
    return {k: v for k, v in ts.items() if keep(k)}


def tie(ts: Tensors, cfg: dict[str, Any], default: bool) -> Tensors:
    """``if self.args.tie_word_embeddings: weights.pop("lm_head.weight", None)``."""
    if cfg.get("tie_word_embeddings", default):
        ts = dict(ts)
        ts.pop("lm_head.weight", None)
    return ts


def stack(ts: Tensors, pattern: str, target: Callable[[re.Match], str]) -> Tensors:
    """Per-expert tensors matching ``pattern`` (group "e" is the expert index) stacked into
    one (E, *shape) tensor, put where the family's sanitize puts it: at the end, in the
    order of first appearance."""
    groups: dict[str, list[TensorInfo]] = {}
    out: Tensors = {}
    for k, v in ts.items():
        m = re.fullmatch(pattern, k)
        if m is None:
            out[k] = v
            continue
        groups.setdefault(target(m), []).append(v)
    for name, members in groups.items():
        first = members[0]
        if any(t.shape != first.shape or t.dtype != first.dtype for t in members):
            raise ConfigError(f"{name}: experts differ in shape or dtype; mlx-lm cannot stack them")
        out[name] = TensorInfo.of(name, first.dtype, (len(members), *first.shape))
    return out


def family_tie(ts: Tensors, cfg: dict[str, Any], family: str) -> Tensors:
    """``tie`` at the family's own ModelArgs default for tie_word_embeddings."""
    return tie(ts, cfg, bool(model_arg({}, family, "tie_word_embeddings")))


def fp8_left(ts: Tensors, family: str) -> None:
    left = [k for k, v in ts.items() if v.dtype in FP8_DTYPES]
    if left:
        raise ConfigError(f"{left[0]} is FP8 and mlx-lm's {family} sanitize does not dequantize it "
                          "(only DeepSeek-V3 style weight_scale_inv checkpoints are)")


# What mx.load reads as uint8, the one dtype mx.from_fp8 takes (F8_E5M2 it does not read).
FP8_AS_U8 = frozenset({"U8", "F8_E4M3", "F8_E8M0"})
FP8_BLOCK = 128  # the DeepSeek-V3 family's dequant block (bs = 128)


def scale_inv_applied(ts: Tensors, family: str,
                      apply: Callable[[TensorInfo, TensorInfo], TensorInfo],
                      is_scale: Callable[[str], bool] = lambda k: "weight_scale_inv" in k,
                      skip: Callable[[str], bool] = lambda k: False) -> Tensors:
    """mlx-lm's loop over ``*_scale_inv`` tensors: each scale's weight (its name without
    ``_scale_inv``) becomes ``apply(weight, scale)``, kept where it or its scale came first
    (``elif k not in new_weights``); the scales, and names ``skip`` matches, dropped."""
    out: Tensors = {}
    for k, v in ts.items():
        if is_scale(k):
            wk = k.replace("_scale_inv", "")
            if wk not in ts:
                raise ConfigError(f"{k}: its weight {wk} is missing (mlx-lm's {family} "
                                  "sanitize reads it: KeyError)")
            out[wk] = retag(apply(ts[wk], v), name=wk)
        elif skip(k):
            continue
        elif k not in out:
            out[k] = v
    return out


def fp8_dequantized(w: TensorInfo, scale: TensorInfo, pad_to_scale: bool = False,
                    broadcast_ok: bool = False) -> TensorInfo:
    """The DeepSeek-V3 family's ``dequant(weight, scale_inv)``: mx.from_fp8 to bfloat16, then
    a scale that broadcasts to the weight multiplied as it is (mistral4 only:
    ``broadcast_ok``), else the 2-D weight padded to whole 128x128 blocks (mimo_v2_flash: to
    the scale's block count, ``pad_to_scale``), times ``scale[:, None, :, None]`` and reshaped
    back, which needs the scale to broadcast over the block grid."""
    if w.dtype not in FP8_AS_U8:
        raise ConfigError(f"{w.name}: {w.dtype} with a {scale.name}; mlx-lm's from_fp8 takes "
                          "only FP8 read as uint8 (U8, F8_E4M3, F8_E8M0)")
    if broadcast_ok and _broadcasts(scale.shape, w.shape):
        return retag(w, dtype="BF16")
    if len(w.shape) != 2:
        raise ConfigError(f"{w.name}: shape {list(w.shape)} is not a matrix; mlx-lm's FP8 "
                          "block dequantization needs one")
    if pad_to_scale:
        padded = tuple(FP8_BLOCK * s for s in scale.shape[:2])
    else:
        padded = tuple(-(-d // FP8_BLOCK) * FP8_BLOCK for d in w.shape)
    if len(scale.shape) < 2 or any(p < d for p, d in zip(padded, w.shape)) \
            or not _block_grid(scale.shape, padded):
        raise ConfigError(f"{scale.name}: shape {list(scale.shape)} is not a scale per "
                          f"{FP8_BLOCK}x{FP8_BLOCK} block of {w.name} {list(w.shape)} "
                          "(mlx-lm cannot dequantize it)")
    return retag(w, dtype="BF16")


def _block_grid(scale: tuple[int, ...], padded: tuple[int, ...]) -> bool:
    """``scale[:, None, :, None]`` times the (A, 128, B, 128) blocks of the padded weight
    broadcasts and reshapes back to it."""
    grid = (padded[0] // FP8_BLOCK, FP8_BLOCK, padded[1] // FP8_BLOCK, FP8_BLOCK)
    shape = broadcast_shape((scale[0], 1, scale[1], 1, *scale[2:]), grid)
    return shape is not None and math.prod(shape) == math.prod(grid)


def _broadcasts(scale: tuple[int, ...], weight: tuple[int, ...]) -> bool:
    """mistral4's ``broadcasts``: the scale, left-padded with 1s, is 1 or the weight's size on
    each axis."""
    if len(scale) > len(weight):
        return False
    pad = (1,) * (len(weight) - len(scale)) + tuple(scale)
    return all(s in (1, w) for s, w in zip(pad, weight))


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcast of two shapes (None where they do not broadcast)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return tuple(max(x, y) if 0 not in (x, y) else 0 for x, y in zip(a, b))


def halves(k: str, shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """The shape of each half of ``mx.split(v, 2, axis)`` (a fused gate/up or similar), which
    raises unless the array has that axis and it divides by two."""
    if not -len(shape) <= axis < len(shape) or shape[axis] % 2:
        raise ConfigError(f"{k}: shape {list(shape)} does not split in two along axis {axis} "
                          "as mlx-lm's sanitize splits it")
    out = list(shape)
    out[axis] //= 2
    return tuple(out)


def conv_moveaxis(ts: Tensors) -> Tensors:
    """HF conv1d weights (C, 1, K) become MLX's (C, K, 1)."""
    out: Tensors = {}
    for k, v in ts.items():
        if "conv1d.weight" in k and len(v.shape) == 3 and v.shape[-1] != 1:
            v = retag(v, shape=(v.shape[0], v.shape[2], v.shape[1]))
        out[k] = v
    return out


# The order a family's sanitize appends a re-quantized kv_b_proj's scales and biases in.
KV_B_BY_PART = (("embed_q", "scales"), ("embed_q", "biases"), ("unembed_out", "scales"),
                ("unembed_out", "biases"))  # kimi_linear, kimi_k3, longcat_flash, mistral4
KV_B_BY_KIND = (("embed_q", "scales"), ("unembed_out", "scales"), ("embed_q", "biases"),
                ("unembed_out", "biases"))  # deepseek_v3, deepseek_v32, glm4_moe_lite
# What mx.quantize takes (mlx 0.32; checked in tests/test_sanitize_kv_b.py).
QUANT_BITS = (1, 2, 3, 4, 5, 6, 8)
QUANT_GROUPS = (32, 64, 128)


def split_kv_b(ts: Tensors, attn: str, cfg: dict[str, Any], family: str,
               quantized: Literal["requantize", "refuse", "as_stored"] = "requantize",
               order: tuple[tuple[str, str], ...] = KV_B_BY_PART,
               head_dims: tuple[Any, Any] | None = None) -> None:
    """mlx-lm's MLA kv_b_proj absorption, in place: ``<attn>.kv_b_proj.weight`` popped,
    reshaped to (heads, nope + v, -1) and split into embed_q (H, rank, nope) and unembed_out
    (H, v, rank), both appended; nothing when the weight is absent. Sizes are the family's
    ModelArgs fields (``head_dims``: its own (nope, v) where it falls back to head_dim).
    ``quantized`` is what the family does when kv_b_proj.scales is beside it: "requantize"
    (dequantize at bits and group size inferred from kv_lora_rank, split, quantize both
    halves the same way; their scales and biases appended in ``order`` before the weights),
    "refuse" (it raises ValueError), "as_stored" (no such branch: the stored weight is split
    and the scales stay)."""
    key = f"{attn}.kv_b_proj.weight"
    if key not in ts:
        return
    heads = model_arg(cfg, family, "num_attention_heads")
    nope, vdim = head_dims or (model_arg(cfg, family, "qk_nope_head_dim"),
                               model_arg(cfg, family, "v_head_dim"))
    if not all(type(x) is int and x > 0 for x in (heads, nope, vdim)):
        raise ConfigError(f"config.json: num_attention_heads={heads!r}, qk_nope_head_dim="
                          f"{nope!r}, v_head_dim={vdim!r} do not let mlx-lm's {family} "
                          f"sanitize split {key}")
    requantize = quantized != "as_stored" and f"{attn}.kv_b_proj.scales" in ts
    if requantize and quantized == "refuse":
        raise ConfigError(f"{attn}.kv_b_proj.scales: mlx-lm's {family} sanitize does not "
                          "support a quantized kv_b_proj (ValueError)")
    w = ts.pop(key)
    shape, dtype = w.shape, w.dtype
    bits = group = 0
    if requantize:
        dims = model_arg(cfg, family, "kv_lora_rank")
        scales = popped(ts, f"{attn}.kv_b_proj.scales")
        popped(ts, f"{attn}.kv_b_proj.biases")
        if type(dims) is not int or dims < 1 or not shape or not scales.shape \
                or scales.shape[-1] < 1:
            raise ConfigError(f"{key}: quantized, but kv_lora_rank {dims!r} and its scales "
                              f"{list(scales.shape)} do not give the bits and group size "
                              f"mlx-lm's {family} sanitize infers")
        bits, group = shape[-1] * 32 // dims, dims // scales.shape[-1]
        if bits not in QUANT_BITS or group not in QUANT_GROUPS:
            raise ConfigError(f"{key}: quantized at an inferred {bits} bits, group size "
                              f"{group}, which mx.quantize refuses")
        if shape[-1] * 32 != bits * scales.shape[-1] * group or scales.shape[:-1] != shape[:-1]:
            raise ConfigError(f"{key}: shape {list(shape)} and its scales "
                              f"{list(scales.shape)} do not match at the inferred {bits} bits, "
                              f"group size {group} (mx.dequantize raises)")
        shape, dtype = (*shape[:-1], shape[-1] * 32 // bits), scales.dtype
    rows = heads * (nope + vdim)
    size = math.prod(shape)
    if size == 0 or size % rows:
        raise ConfigError(f"{key}: shape {list(w.shape)} does not reshape to "
                          f"num_attention_heads x (qk_nope_head_dim + v_head_dim) = {rows} rows "
                          f"as mlx-lm's {family} sanitize does")
    rank = size // rows
    halves = {"embed_q": (heads, rank, nope), "unembed_out": (heads, vdim, rank)}
    if requantize:
        for part, s in halves.items():
            if s[-1] % group:
                raise ConfigError(f"{attn}.{part}.weight: last axis {s[-1]} does not quantize "
                                  f"at {bits} bits, group size {group} (mx.quantize raises)")
        for part, extra in order:
            s = halves[part]
            name = f"{attn}.{part}.{extra}"
            ts[name] = TensorInfo.of(name, dtype, (*s[:-1], s[-1] // group))
        halves = {part: (*s[:-1], s[-1] * bits // 32) for part, s in halves.items()}
        dtype = "U32"
    for part, s in halves.items():
        ts[f"{attn}.{part}.weight"] = TensorInfo.of(f"{attn}.{part}.weight", dtype, s)


# --------------------------------------------------------------- wrappers group (issue 24)
# mlx.utils.tree_unflatten / tree_flatten on names: the round trip many wrapper sanitizes make
# to pop a subtree. It is not the identity: segments that are all integers become list
# indices (sorted, written back as str(int): "01" -> "1"), and subtrees come back grouped in
# first-appearance order.

Tree = Any  # dict[str, Tree] | list[Tree] | TensorInfo


def unflatten(ts: Tensors) -> Tree:
    return _unflatten(list(ts.items()))


def _unflatten(items: list[tuple[str, Any]]) -> Tree:
    if len(items) == 1 and items[0][0] == "":
        return items[0][1]
    children: dict[str, list[tuple[str, Any]]] = {}
    for key, value in items:
        head, _, rest = key.partition(".")
        children.setdefault(head, []).append((rest, value))
    try:
        index = {int(k): k for k in children}
        is_list = len(index) == len(children)
    except ValueError:
        is_list = False
    if not is_list:
        return {k: _unflatten(v) for k, v in children.items()}
    out: list[Tree] = []
    for i, k in sorted(index.items()):
        out.extend({} for _ in range(i - len(out)))  # gaps: empty subtrees, flattened to nothing
        out.append(_unflatten(children[k]))
    return out


def flatten(tree: Tree, prefix: str = "") -> Tensors:
    out: Tensors = {}
    if isinstance(tree, list):
        for i, sub in enumerate(tree):
            out.update(flatten(sub, f"{prefix}.{i}"))
    elif isinstance(tree, dict):
        for k, sub in tree.items():
            out.update(flatten(sub, f"{prefix}.{k}"))
    else:
        out[prefix[1:]] = TensorInfo.of(prefix[1:], tree.dtype, tree.shape)
    return out


def subtree(tree: Tree, key: str, what: str) -> Tree:
    """``tree[key]`` where mlx-lm indexes a dict: its KeyError or TypeError a ConfigError."""
    if not isinstance(tree, dict) or key not in tree:
        raise ConfigError(f"{what}: no tensors under it; mlx-lm's sanitize needs them")
    return tree[key]


def pop_subtree(tree: Tree, key: str, what: str) -> Tree | None:
    """``tree.pop(key, None)`` on a dict; on a list (all names numeric) mlx-lm raises."""
    if not isinstance(tree, dict):
        raise ConfigError(f"{what}: tensor names are list indices where mlx-lm's sanitize "
                          "expects named subtrees")
    return tree.pop(key, None)
