"""Mixture-of-experts families whose sanitize stacks per-expert tensors: mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_moe.py).

Families: deepseek, qwen2_moe, olmoe, phixtral, phimoe, Klear, granitemoe, dots1, solar_open, afmoe, ernie4_5_moe, exaone_moe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_ops import (
    Tensors,
    drop,
    halves,
    model_arg,
    stacked,
    tie,
)
from mlxfit.model.tensors import TensorInfo

# The suffixes most of these sanitizes stack: a float checkpoint's weight, an MLX-quantized
# one's scales and biases.
_QKEYS = ("weight", "scales", "biases")




def _count(cfg: dict[str, Any], family: str, key: str) -> int:
    v = model_arg(cfg, family, key)
    if not isinstance(v, int):
        raise ConfigError(f"config.json: {key} is {v!r}, not an integer; mlx-lm's {family} "
                          "sanitize counts layers and experts with it")
    return v


def _join(ts: Tensors, family: str, names: list[str], target: str) -> None:
    """``weights[target] = mx.stack([weights.pop(n) for n in names])``, in place."""
    members = []
    for name in names:
        if name not in ts:
            raise ConfigError(f"{name} is missing: mlx-lm's {family} sanitize stacks every "
                              f"expert's tensor into {target}")
        members.append(ts.pop(name))
    ts[target] = stacked(target, members)


def _stack_experts(ts: Tensors, cfg: dict[str, Any], family: str, layers: Iterable[int],
                   experts: str, projs: Iterable[tuple[str, str]], src: str, dst: str,
                   keys: Iterable[str] = _QKEYS, need_last: bool = False) -> None:
    """The loop these sanitizes share: for each layer, projection (source name, stacked name)
    and suffix, where expert 0's tensor is present (and, ``need_last``, expert E-1's), the
    tensors ``src`` of experts 0..E-1 (E = config ``experts``) popped and stacked at ``dst``
    (format fields l, e, m, k; d is the stacked projection name)."""
    for l in layers:
        for m, d in projs:
            for k in keys:
                if src.format(l=l, e=0, m=m, k=k) not in ts:
                    continue
                n = _count(cfg, family, experts)
                if need_last and src.format(l=l, e=n - 1, m=m, k=k) not in ts:
                    continue
                _join(ts, family, [src.format(l=l, e=e, m=m, k=k) for e in range(n)],
                      dst.format(l=l, d=d, k=k))


_SAME = (("gate_proj", "gate_proj"), ("down_proj", "down_proj"), ("up_proj", "up_proj"))
_UDG = (("up_proj", "up_proj"), ("down_proj", "down_proj"), ("gate_proj", "gate_proj"))
_W123 = (("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj"))
_MLP_EXPERT = "model.layers.{l}.mlp.experts.{e}.{m}.{k}"
_SWITCH = "model.layers.{l}.mlp.switch_mlp.{d}.{k}"


def _deepseek(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """deepseek.py: every layer's experts stacked into switch_mlp (no early return)."""
    ts = dict(ts)
    _stack_experts(ts, cfg, "deepseek", range(_count(cfg, "deepseek", "num_hidden_layers")),
                   "n_routed_experts", _SAME, _MLP_EXPERT, _SWITCH)
    return ts


def _qwen_stack(family: str) -> Callable[[Tensors, dict[str, Any]], Tensors]:
    """qwen2_moe.py and olmoe.py (the same sanitize): nothing unless layer 0's expert 0 has an
    up_proj.weight, then every layer's experts stacked into switch_mlp."""
    def sanitize(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
        if "model.layers.0.mlp.experts.0.up_proj.weight" not in ts:
            return ts
        ts = dict(ts)
        _stack_experts(ts, cfg, family, range(_count(cfg, family, "num_hidden_layers")),
                       "num_experts", _UDG, _MLP_EXPERT, _SWITCH)
        return ts
    return sanitize


def _phixtral(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """phixtral.py: moe.mlp.<e>.fc1|fc2 (weights and biases) stacked into moe.switch_mlp."""
    if "transformer.h.0.moe.mlp.0.fc1.weight" not in ts:
        return ts
    ts = dict(ts)
    _stack_experts(ts, cfg, "phixtral", range(_count(cfg, "phixtral", "num_layers")),
                   "num_local_experts", (("fc1", "fc1"), ("fc2", "fc2")),
                   "transformer.h.{l}.moe.mlp.{e}.{m}.{k}",
                   "transformer.h.{l}.moe.switch_mlp.{d}.{k}", keys=(*_QKEYS, "bias"))
    return ts


def _phimoe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """phimoe.py: block_sparse_moe.experts.<e>.w1|w2|w3 stacked into switch_mlp's gate, down
    and up projections."""
    if "model.layers.0.block_sparse_moe.experts.0.w1.weight" not in ts:
        return ts
    ts = dict(ts)
    _stack_experts(ts, cfg, "phimoe", range(_count(cfg, "phimoe", "num_hidden_layers")),
                   "num_local_experts", _W123,
                   "model.layers.{l}.block_sparse_moe.experts.{e}.{m}.{k}",
                   "model.layers.{l}.block_sparse_moe.switch_mlp.{d}.{k}")
    return ts


def _klear(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """Klear.py: the layers with an experts.0.gate_proj.weight (found by name, sorted) have
    every expert's gate, up and down weights stacked into mlp.experts.<proj>.weight."""
    ts = dict(ts)
    layers = []
    for k in ts:
        if k.startswith("model.layers.") and k.endswith(".mlp.experts.0.gate_proj.weight"):
            try:
                layers.append(int(k.split(".")[2]))
            except ValueError:
                raise ConfigError(f"{k}: its layer index is not a number (int() fails in "
                                  "mlx-lm's Klear sanitize)") from None
    for l in sorted(layers):
        prefix = f"model.layers.{l}.mlp.experts"
        for name in ("gate_proj", "up_proj", "down_proj"):
            n = _count(cfg, "Klear", "num_experts")
            _join(ts, "Klear", [f"{prefix}.{e}.{name}.weight" for e in range(n)],
                  f"{prefix}.{name}.weight")
    return ts


def _granitemoe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """granitemoe.py: block_sparse_moe.input_linear (E, 2I, H) split in halves on axis 1 into
    switch_mlp's gate and up, output_linear renamed switch_mlp.down_proj; lm_head dropped when
    tied (default: tied)."""
    if "model.layers.0.block_sparse_moe.input_linear.weight" not in ts:
        return ts
    ts = dict(ts)
    for l in range(_count(cfg, "granitemoe", "num_hidden_layers")):
        prefix = f"model.layers.{l}.block_sparse_moe"
        key = f"{prefix}.input_linear.weight"
        if key not in ts:
            raise ConfigError(f"{key} is missing: mlx-lm's granitemoe sanitize splits every "
                              "layer's input_linear")
        v = ts.pop(key)
        half = halves(key, v.shape, 1)
        for part in ("gate_proj", "up_proj"):
            name = key.replace("input_linear", f"switch_mlp.{part}")
            ts[name] = TensorInfo.of(name, v.dtype, half)
        key = f"{prefix}.output_linear.weight"
        if key not in ts:
            raise ConfigError(f"{key} is missing: mlx-lm's granitemoe sanitize renames every "
                              "layer's output_linear")
        name = key.replace("output_linear", "switch_mlp.down_proj")
        v = ts.pop(key)
        ts[name] = TensorInfo.of(name, v.dtype, v.shape)
    return tie(ts, cfg, True)


def _dots1(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """dots1.py: lm_head dropped when tied; from layer first_k_dense_replace on, experts
    stacked into mlp.experts.<proj>; rotary frequencies dropped."""
    ts = dict(tie(ts, cfg, False))
    n = _count(cfg, "dots1", "num_hidden_layers")
    first = model_arg(cfg, "dots1", "first_k_dense_replace")
    if n > 0 and not isinstance(first, int | float):
        raise ConfigError(f"config.json: first_k_dense_replace is {first!r}, not a number "
                          "(mlx-lm's dots1 sanitize compares layer indices with it)")
    # The tuple's first names (w1, w2, w3) are unused: the checkpoint names are the second.
    _stack_experts(ts, cfg, "dots1", [l for l in range(n) if l >= first],
                   "n_routed_experts", _SAME, _MLP_EXPERT, "model.layers.{l}.mlp.experts.{d}.{k}")
    return drop(ts, lambda k: "rotary_emb.inv_freq" not in k)


def _solar_open(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """solar_open.py uses glm4_moe.py's Model: experts stacked into switch_mlp, then every name
    starting with model.layers.<num_hidden_layers> (the MTP layer, matched as a prefix)
    dropped."""
    ts = dict(ts)
    n = _count(cfg, "solar_open", "num_hidden_layers")
    _stack_experts(ts, cfg, "solar_open", range(n), "n_routed_experts", _SAME, _MLP_EXPERT,
                   _SWITCH)
    return drop(ts, lambda k: not k.startswith(f"model.layers.{n}"))


def _afmoe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """afmoe.py: rotary frequencies dropped, lm_head dropped when tied, experts of the layers
    from num_dense_layers on stacked into mlp.experts.<proj>."""
    ts = dict(tie(drop(ts, lambda k: "rotary_emb.inv_freq" not in k), cfg, False))
    n = _count(cfg, "afmoe", "num_hidden_layers")
    dense = model_arg(cfg, "afmoe", "num_dense_layers")
    if n > 0 and not isinstance(dense, int | float):
        raise ConfigError(f"config.json: num_dense_layers is {dense!r}, not a number "
                          "(mlx-lm's afmoe sanitize compares layer indices with it)")
    _stack_experts(ts, cfg, "afmoe", [l for l in range(n) if not l < dense], "num_experts",
                   _UDG, _MLP_EXPERT, "model.layers.{l}.mlp.experts.{d}.{k}")
    return ts


_ERNIE_DROPPED = ("mtp_block.", "mtp_linear_proj.", "mtp_hidden_norm.", "mtp_emb_norm.",
                  "e_score_correction_bias")


def _ernie4_5_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """ernie4_5_moe.py: the MTP block and every e_score_correction_bias dropped, the experts'
    weights (no scales) stacked into switch_mlp."""
    ts = drop(ts, lambda k: not any(p in k for p in _ERNIE_DROPPED))
    _stack_experts(ts, cfg, "ernie4_5_moe",
                   range(_count(cfg, "ernie4_5_moe", "num_hidden_layers")), "moe_num_experts",
                   _SAME, _MLP_EXPERT, _SWITCH, keys=("weight",))
    return ts


def _exaone_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """exaone_moe.py: the MTP module dropped; on each is_moe_layer layer the router bias moved
    under mlp.gate and the experts stacked into switch_mlp (only when expert 0's and expert
    E-1's tensors are both there); lm_head dropped when tied."""
    ts = drop(ts, lambda k: not k.startswith("mtp."))
    moe = model_arg(cfg, "exaone_moe", "is_moe_layer")
    n = _count(cfg, "exaone_moe", "num_hidden_layers")
    if n > 0 and (not isinstance(moe, list) or len(moe) < n):
        raise ConfigError(f"config.json: is_moe_layer must list all {n} layers (mlx-lm's "
                          "exaone_moe sanitize indexes it by layer)")
    for l in range(n):
        if not moe[l]:
            continue
        prefix = f"model.layers.{l}"
        bias = f"{prefix}.mlp.e_score_correction_bias"
        if bias in ts:
            name = f"{prefix}.mlp.gate.e_score_correction_bias"
            v = ts.pop(bias)
            ts[name] = TensorInfo.of(name, v.dtype, v.shape)
        _stack_experts(ts, cfg, "exaone_moe", (l,), "num_experts", _SAME, _MLP_EXPERT, _SWITCH,
                       need_last=True)
    return tie(ts, cfg, False)


SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    "deepseek": _deepseek,
    "qwen2_moe": _qwen_stack("qwen2_moe"),
    "olmoe": _qwen_stack("olmoe"),
    "phixtral": _phixtral,
    "phimoe": _phimoe,
    "Klear": _klear,
    "granitemoe": _granitemoe,
    "dots1": _dots1,
    "solar_open": _solar_open,
    "afmoe": _afmoe,
    "ernie4_5_moe": _ernie4_5_moe,
    "exaone_moe": _exaone_moe,
}
