"""State-space, recurrent and linear-attention hybrids (conv1d layouts, A_log, mixers): mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_recurrent.py).

Families: mamba, mamba2, plamo2, recurrent_gemma, rwkv7, lfm2, olmo_hybrid, jamba, falcon_h1, granitemoehybrid, bailing_hybrid, kimi_linear, lfm2_moe, bailing_moe_linear, longcat_flash_ngram.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.mlx_lm_args import MODEL_ARGS
from mlxfit.model.sanitize_ops import Tensors, retag
from mlxfit.model.tensors import TensorInfo

# ------------------------------------------------------------------ shared pieces


def _arg(cfg: dict[str, Any], family: str, key: str) -> Any:
    """``self.args.<key>``: the config's value, else the family's ModelArgs default."""
    if key in cfg:
        return cfg[key]
    return MODEL_ARGS.get(family, {}).get("defaults", {}).get(key)


def _int_arg(cfg: dict[str, Any], family: str, key: str) -> int:
    v = _arg(cfg, family, key)
    if type(v) is not int:
        raise ConfigError(f"config.json: {key}={v!r} is not an integer; mlx-lm's {family} "
                          "sanitize needs it")
    return v


def _last(k: str, t: TensorInfo, axis: int = -1) -> int:
    """``v.shape[axis]``, which raises in mlx-lm on a tensor with too few axes."""
    if not -len(t.shape) <= axis < len(t.shape):
        raise ConfigError(f"{k}: shape {list(t.shape)} has no axis {axis}; mlx-lm's sanitize "
                          "cannot read it as a convolution weight")
    return t.shape[axis]


def _moveaxis21(k: str, t: TensorInfo) -> TensorInfo:
    """``v.moveaxis(2, 1)``: HF's conv1d (C, 1, K) becomes MLX's (C, K, 1)."""
    if len(t.shape) < 3:
        raise ConfigError(f"{k}: shape {list(t.shape)} has no axis 2 for mlx-lm's sanitize to "
                          "move (a conv1d weight is (channels, 1, kernel))")
    s = list(t.shape)
    s.insert(1, s.pop(2))
    return retag(t, shape=tuple(s))


def _transpose021(k: str, t: TensorInfo) -> TensorInfo:
    """``param.transpose(0, 2, 1)``, which needs exactly 3 axes."""
    if len(t.shape) != 3:
        raise ConfigError(f"{k}: shape {list(t.shape)} is not 3-D; mlx-lm's sanitize "
                          "transposes it as a (channels, 1, kernel) conv weight")
    return retag(t, shape=(t.shape[0], t.shape[2], t.shape[1]))


def _conv_moveaxis(ts: Tensors, needle: str = "conv1d.weight") -> Tensors:
    """``if "<needle>" in k and v.shape[-1] != 1: weights[k] = v.moveaxis(2, 1)``."""
    out = dict(ts)
    for k, v in ts.items():
        if needle in k and _last(k, v) != 1:
            out[k] = _moveaxis21(k, v)
    return out


def _pop_tied(ts: Tensors, tied: Any) -> Tensors:
    """``if self.args.tie_word_embeddings: weights.pop("lm_head.weight", None)``."""
    if tied:
        ts = dict(ts)
        ts.pop("lm_head.weight", None)
    return ts


def _pop(ts: Tensors, k: str, family: str) -> TensorInfo:
    """``weights.pop(k)``: a KeyError in mlx-lm when the checkpoint lacks it."""
    if k not in ts:
        raise ConfigError(f"{k} is missing; mlx-lm's {family} sanitize needs it")
    return ts.pop(k)


_PROMOTE = {frozenset({"F16", "BF16"}): "F32"}


def _stack(name: str, members: list[TensorInfo]) -> TensorInfo:
    """``mx.stack(members)`` under ``name``: equal shapes, dtypes promoted as mlx does."""
    if not members:
        raise ConfigError(f"{name}: no tensors to stack (mx.stack of an empty list raises)")
    first = members[0]
    if any(t.shape != first.shape for t in members):
        raise ConfigError(f"{name}: the tensors mlx-lm stacks into it differ in shape")
    dtypes = frozenset(t.dtype for t in members)
    if len(dtypes) == 1:
        dtype = first.dtype
    elif dtypes <= {"F16", "BF16", "F32"}:
        dtype = _PROMOTE.get(dtypes, "F32")
    else:
        raise ConfigError(f"{name}: the tensors mlx-lm stacks into it mix dtypes "
                          f"{sorted(dtypes)}; not modelled")
    return TensorInfo.of(name, dtype, (len(members), *first.shape))


# ------------------------------------------------------------------ families


def _mamba(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """mamba.py, mamba2.py, plamo2.py: HF conv1d weights moved to MLX's layout."""
    return _conv_moveaxis(ts)


def _recurrent_gemma(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """recurrent_gemma.py: conv_1d moved; without lm_head.weight the model drops its lm_head
    (tied), which changes no tensor."""
    return _conv_moveaxis(ts, "conv_1d.weight")


def _rwkv7(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """rwkv7.py: k_k, k_a and g_norm (any name containing them) reshaped to
    (hidden // head_dim, head_dim)."""
    hidden = _int_arg(cfg, "rwkv7", "hidden_size")
    head = _int_arg(cfg, "rwkv7", "head_dim")
    if head == 0:
        raise ConfigError("config.json: head_dim=0; mlx-lm's rwkv7 sanitize divides by it")
    shape = (hidden // head, head)
    out = dict(ts)
    for k, v in ts.items():
        if "k_k" in k or "k_a" in k or "g_norm" in k:
            if math.prod(v.shape) != shape[0] * shape[1]:
                raise ConfigError(f"{k}: shape {list(v.shape)} does not reshape to "
                                  f"{list(shape)} (hidden_size // head_dim, head_dim)")
            out[k] = retag(v, shape=shape)
    return out


def _lfm2_conv(k: str, v: TensorInfo) -> TensorInfo:
    """``if "conv.weight" in name and param.shape[-1] > param.shape[1]: transpose(0, 2, 1)``"""
    if "conv.weight" in k and _last(k, v) > _last(k, v, 1):
        return _transpose021(k, v)
    return v


def _lfm2(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """lfm2.py: the short conv weights (C, 1, K) transposed to (C, K, 1)."""
    return {k: _lfm2_conv(k, v) for k, v in ts.items()}


def _olmo_hybrid(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """olmo_hybrid.py: lm_head dropped when tied; 3-D conv1d weights moved to MLX's layout."""
    ts = _pop_tied(ts, _arg(cfg, "olmo_hybrid", "tie_word_embeddings"))
    out: Tensors = {}
    for k, v in ts.items():
        if "conv1d.weight" in k and len(v.shape) == 3 and v.shape[-1] != 1:
            v = _moveaxis21(k, v)
        out[k] = v
    return out


_LFM2_W = {"w1.weight": "gate_proj.weight", "w2.weight": "down_proj.weight",
           "w3.weight": "up_proj.weight"}


def _lfm2_moe(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """lfm2_moe.py: conv weights as lfm2's, w1/w2/w3 renamed gate/down/up_proj, then each MoE
    layer's experts stacked into switch_mlp (appended)."""
    out: Tensors = {}
    for k, v in ts.items():
        v = _lfm2_conv(k, v)
        for old, new in _LFM2_W.items():
            if old in k:
                k = k.replace(old, new)
        out[k] = retag(v, name=k)
    n_experts = _int_arg(cfg, "lfm2_moe", "num_experts")
    for layer in range(_int_arg(cfg, "lfm2_moe", "num_hidden_layers")):
        prefix = f"model.layers.{layer}"
        for n in ("gate_proj", "down_proj", "up_proj"):
            if f"{prefix}.feed_forward.experts.0.{n}.weight" in out:
                name = f"{prefix}.feed_forward.switch_mlp.{n}.weight"
                members = [_pop(out, f"{prefix}.feed_forward.experts.{e}.{n}.weight",
                                "lfm2_moe") for e in range(n_experts)]
                out[name] = _stack(name, members)
    return out


def _jamba(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """jamba.py: conv1d moved, lm_head dropped when tied (its default), then each layer's
    experts (whatever indices below the tensor count exist) stacked into switch_mlp."""
    ts = _conv_moveaxis(ts)
    ts = _pop_tied(ts, _arg(cfg, "jamba", "tie_word_embeddings"))
    for layer in range(_int_arg(cfg, "jamba", "num_hidden_layers")):
        base = f"model.layers.{layer}.feed_forward"
        if not any(k.startswith(f"{base}.experts.") for k in ts):
            continue
        for proj in ("gate_proj", "down_proj", "up_proj"):
            for kind in ("weight", "bias", "scales", "biases"):
                count = len(ts)
                members = [ts.pop(f"{base}.experts.{e}.{proj}.{kind}") for e in range(count)
                           if f"{base}.experts.{e}.{proj}.{kind}" in ts]
                if members:
                    name = f"{base}.switch_mlp.{proj}.{kind}"
                    ts[name] = _stack(name, members)
    return ts


def _granitemoehybrid(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """granitemoehybrid.py: conv1d moved; with experts (num_local_experts truthy) the fused
    input_linear (E, 2I, H) split into switch_mlp gate/up and output_linear renamed down;
    without, shared_mlp's input_linear (2I, H) split into mlp gate/up and output_linear
    renamed down (each only when layer 0 has it, then every layer must); lm_head dropped when
    tied."""
    fam = "granitemoehybrid"
    ts = _conv_moveaxis(ts)
    use_moe = bool(_arg(cfg, fam, "num_local_experts"))
    if use_moe and "model.layers.0.block_sparse_moe.input_linear.weight" in ts:
        for layer in range(_int_arg(cfg, fam, "num_hidden_layers")):
            prefix = f"model.layers.{layer}.block_sparse_moe"
            k = f"{prefix}.input_linear.weight"
            w = _pop(ts, k, fam)
            if len(w.shape) != 3:
                raise ConfigError(f"{k}: shape {list(w.shape)} is not (experts, 2 x "
                                  "intermediate, hidden) as mlx-lm's sanitize unpacks it")
            e, two_i, h = w.shape
            for part, rows in (("gate_proj", two_i // 2), ("up_proj", two_i - two_i // 2)):
                name = f"{prefix}.switch_mlp.{part}.weight"
                ts[name] = TensorInfo.of(name, w.dtype, (e, rows, h))
            name = f"{prefix}.switch_mlp.down_proj.weight"
            ts[name] = retag(_pop(ts, f"{prefix}.output_linear.weight", fam), name=name)
    elif not use_moe and "model.layers.0.shared_mlp.input_linear.weight" in ts:
        for layer in range(_int_arg(cfg, fam, "num_hidden_layers")):
            prefix = f"model.layers.{layer}.shared_mlp"
            k = f"{prefix}.input_linear.weight"
            w = _pop(ts, k, fam)
            if not w.shape or w.shape[0] % 2:
                raise ConfigError(f"{k}: shape {list(w.shape)} does not split in two along "
                                  "axis 0 (gate and up) as mlx-lm's sanitize does")
            half = (w.shape[0] // 2, *w.shape[1:])
            for part in ("gate_proj", "up_proj"):
                name = f"model.layers.{layer}.mlp.{part}.weight"
                ts[name] = TensorInfo.of(name, w.dtype, half)
            name = f"model.layers.{layer}.mlp.down_proj.weight"
            ts[name] = retag(_pop(ts, f"{prefix}.output_linear.weight", fam), name=name)
    return _pop_tied(ts, _arg(cfg, fam, "tie_word_embeddings"))


SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    "mamba": _mamba,
    "mamba2": _mamba,
    "plamo2": _mamba,
    "recurrent_gemma": _recurrent_gemma,
    "rwkv7": _rwkv7,
    "lfm2": _lfm2,
    "olmo_hybrid": _olmo_hybrid,
    "lfm2_moe": _lfm2_moe,
    "jamba": _jamba,
    "granitemoehybrid": _granitemoehybrid,
}
