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
from mlxfit.model.sanitize_mla import longcat_flash
from mlxfit.model.sanitize_ops import (
    Tensors,
    broadcast_shape,
    family_tie,
    halves,
    model_arg,
    popped,
    retag,
    split_kv_b,
    stacked,
)
from mlxfit.model.tensors import TensorInfo

# ------------------------------------------------------------------ shared pieces




def _int_arg(cfg: dict[str, Any], family: str, key: str) -> int:
    v = model_arg(cfg, family, key)
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










def _stack_experts(ts: Tensors, experts: str, tail: str, dst: str, count: int) -> None:
    """``weights[dst] = mx.stack([weights.pop(f"{experts}.{e}.{tail}") for e in
    range(count)])`` (in place)."""
    ts[dst] = stacked(dst, [popped(ts, f"{experts}.{e}.{tail}") for e in range(count)])


def _stack_mlp_experts(ts: Tensors, prefix: str, count: int) -> None:
    """The Bailing / LongCat loop: ``for m in gate/down/up_proj, for k in weight/scales/biases:
    if <prefix>.mlp.experts.0.<m>.<k> in weights``, all ``count`` experts stacked into
    ``<prefix>.mlp.switch_mlp.<m>.<k>`` (appended)."""
    for m in ("gate_proj", "down_proj", "up_proj"):
        for kind in ("weight", "scales", "biases"):
            if f"{prefix}.mlp.experts.0.{m}.{kind}" in ts:
                _stack_experts(ts, f"{prefix}.mlp.experts", f"{m}.{kind}",
                               f"{prefix}.mlp.switch_mlp.{m}.{kind}", count)


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
    ts = family_tie(ts, cfg, "olmo_hybrid")
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
                members = [popped(out, f"{prefix}.feed_forward.experts.{e}.{n}.weight")
                           for e in range(n_experts)]
                out[name] = stacked(name, members)
    return out


def _jamba(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """jamba.py: conv1d moved, lm_head dropped when tied (its default), then each layer's
    experts (whatever indices below the tensor count exist) stacked into switch_mlp."""
    ts = _conv_moveaxis(ts)
    ts = family_tie(ts, cfg, "jamba")
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
                    ts[name] = stacked(name, members)
    return ts


def _granitemoehybrid(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """granitemoehybrid.py: conv1d moved; with experts (num_local_experts truthy) the fused
    input_linear (E, 2I, H) split into switch_mlp gate/up and output_linear renamed down;
    without, shared_mlp's input_linear (2I, H) split into mlp gate/up and output_linear
    renamed down (each only when layer 0 has it, then every layer must); lm_head dropped when
    tied."""
    fam = "granitemoehybrid"
    ts = _conv_moveaxis(ts)
    use_moe = bool(model_arg(cfg, fam, "num_local_experts"))
    if use_moe and "model.layers.0.block_sparse_moe.input_linear.weight" in ts:
        for layer in range(_int_arg(cfg, fam, "num_hidden_layers")):
            prefix = f"model.layers.{layer}.block_sparse_moe"
            k = f"{prefix}.input_linear.weight"
            w = popped(ts, k)
            if len(w.shape) != 3:
                raise ConfigError(f"{k}: shape {list(w.shape)} is not (experts, 2 x "
                                  "intermediate, hidden) as mlx-lm's sanitize unpacks it")
            e, two_i, h = w.shape
            for part, rows in (("gate_proj", two_i // 2), ("up_proj", two_i - two_i // 2)):
                name = f"{prefix}.switch_mlp.{part}.weight"
                ts[name] = TensorInfo.of(name, w.dtype, (e, rows, h))
            name = f"{prefix}.switch_mlp.down_proj.weight"
            ts[name] = retag(popped(ts, f"{prefix}.output_linear.weight"), name=name)
    elif not use_moe and "model.layers.0.shared_mlp.input_linear.weight" in ts:
        for layer in range(_int_arg(cfg, fam, "num_hidden_layers")):
            prefix = f"model.layers.{layer}.shared_mlp"
            k = f"{prefix}.input_linear.weight"
            w = popped(ts, k)
            half = halves(k, w.shape, 0)
            for part in ("gate_proj", "up_proj"):
                name = f"model.layers.{layer}.mlp.{part}.weight"
                ts[name] = TensorInfo.of(name, w.dtype, half)
            name = f"model.layers.{layer}.mlp.down_proj.weight"
            ts[name] = retag(popped(ts, f"{prefix}.output_linear.weight"), name=name)
    return family_tie(ts, cfg, fam)


def _bailing_moe_linear(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """bailing_moe_linear.py: lm_head dropped when tied; with norm_head, lm_head normalized
    in place (same dtype and shape; a KeyError in mlx-lm when absent); from layer
    first_k_dense_replace on, experts stacked into switch_mlp and gate renamed gate.gate_proj
    (each appended)."""
    fam = "bailing_moe_linear"
    ts = family_tie(dict(ts), cfg, fam)
    if model_arg(cfg, fam, "norm_head"):
        w = ts.get("lm_head.weight")
        if w is None or not w.shape:
            raise ConfigError("lm_head.weight is missing (or 0-d) and config.json's norm_head "
                              "asks mlx-lm's bailing_moe_linear sanitize to normalize it")
    n_experts = _int_arg(cfg, fam, "num_experts")
    first = _int_arg(cfg, fam, "first_k_dense_replace")
    for layer in range(_int_arg(cfg, fam, "num_hidden_layers")):
        prefix = f"model.layers.{layer}"
        if layer < first:
            continue
        _stack_mlp_experts(ts, prefix, n_experts)
        for kind in ("weight", "bias"):
            if f"{prefix}.mlp.gate.{kind}" in ts:
                name = f"{prefix}.mlp.gate.gate_proj.{kind}"
                ts[name] = retag(ts.pop(f"{prefix}.mlp.gate.{kind}"), name=name)
    return ts


def _layer_index(k: str) -> int | None:
    parts = k.split(".")
    if k.startswith("model.layers.") and parts[2].isdigit():
        return int(parts[2])
    return None


def _bailing_hybrid(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """bailing_hybrid.py: lm_head dropped when tied; per layer, experts stacked into
    switch_mlp, gate renamed gate.gate_proj, the MLA kv_b_proj split into embed_q /
    unembed_out (each appended); then the MTP layers (index >= num_hidden_layers) dropped."""
    fam = "bailing_hybrid"
    n_layers = _int_arg(cfg, fam, "num_hidden_layers")
    ts = family_tie(dict(ts), cfg, fam)
    n_experts = _int_arg(cfg, fam, "num_experts")
    for layer in range(n_layers):
        prefix = f"model.layers.{layer}"
        _stack_mlp_experts(ts, prefix, n_experts)
        if f"{prefix}.mlp.gate.weight" in ts:
            name = f"{prefix}.mlp.gate.gate_proj.weight"
            ts[name] = retag(ts.pop(f"{prefix}.mlp.gate.weight"), name=name)
        # no quantized branch in mlx-lm's: a kv_b_proj.scales stays (the strict load refuses it)
        split_kv_b(ts, f"{prefix}.attention", cfg, fam, quantized="as_stored")
    return {k: v for k, v in ts.items()
            if (i := _layer_index(k)) is None or i < n_layers}


def _kimi_linear(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """kimi_linear.py: model.mtp* dropped, lm_head dropped when tied; per layer: on MoE
    layers block_sparse_moe's experts stacked (w1/w2/w3 -> gate/down/up) and its shared
    experts, gate and e_score_correction_bias moved under mlp; on KDA layers q/k/v_conv1d
    moved to q/k/v_conv.conv (3-D ones' axes 2 -> 1) and a multi-axis dt_bias flattened; any
    layer's kv_b_proj split into embed_q / unembed_out."""
    fam = "kimi_linear"
    ts = {k: v for k, v in ts.items() if not k.startswith("model.mtp")}
    ts = family_tie(ts, cfg, fam)
    lin = model_arg(cfg, fam, "linear_attn_config")
    kda = lin.get("kda_layers") if isinstance(lin, dict) else None
    if not isinstance(kda, list | tuple):
        raise ConfigError("config.json: linear_attn_config.kda_layers is needed (a list of "
                          "1-based layer numbers)")
    n_experts = _int_arg(cfg, fam, "num_experts")
    first = _int_arg(cfg, fam, "first_k_dense_replace")
    freq = _int_arg(cfg, fam, "moe_layer_freq")
    if freq == 0:
        raise ConfigError("config.json: moe_layer_freq=0; mlx-lm's kimi_linear divides by it")
    head = model_arg(cfg, fam, "head_dim")
    nope = model_arg(cfg, fam, "qk_nope_head_dim") or head
    vdim = model_arg(cfg, fam, "v_head_dim") or head
    for layer in range(_int_arg(cfg, fam, "num_hidden_layers")):
        prefix = f"model.layers.{layer}"
        if n_experts > 0 and layer >= first and layer % freq == 0:
            src, dst = f"{prefix}.block_sparse_moe", f"{prefix}.mlp"
            for w, proj in (("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj")):
                if f"{src}.experts.0.{w}.weight" in ts:
                    _stack_experts(ts, f"{src}.experts", f"{w}.weight",
                                   f"{dst}.switch_mlp.{proj}.weight", n_experts)
            moves = [(f"{src}.shared_experts.{n}.weight", f"{dst}.shared_experts.{n}.weight")
                     for n in ("gate_proj", "up_proj", "down_proj")]
            moves += [(f"{src}.gate.weight", f"{dst}.gate.weight"),
                      (f"{src}.gate.e_score_correction_bias", f"{dst}.e_score_correction_bias")]
            for old, new in moves:
                if old in ts:
                    ts[new] = retag(ts.pop(old), name=new)
        attn = f"{prefix}.self_attn"
        if (layer + 1) in kda:
            for old, new in (("q_conv1d", "q_conv"), ("k_conv1d", "k_conv"),
                             ("v_conv1d", "v_conv")):
                if f"{attn}.{old}.weight" in ts:
                    w = ts.pop(f"{attn}.{old}.weight")
                    if len(w.shape) == 3:
                        w = _moveaxis21(f"{attn}.{old}.weight", w)
                    name = f"{attn}.{new}.conv.weight"
                    ts[name] = retag(w, name=name)
            dt = ts.get(f"{attn}.dt_bias")
            if dt is not None and len(dt.shape) > 1:
                ts[f"{attn}.dt_bias"] = retag(dt, shape=(math.prod(dt.shape),))
        split_kv_b(ts, attn, cfg, fam, head_dims=(nope, vdim))
    return ts


def _longcat_flash_ngram(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """longcat_flash_ngram.py: longcat_flash's sanitize, then embed_tokens moved (appended) to
    the n-gram embedding's word_embeddings."""
    ts = longcat_flash(ts, cfg, "longcat_flash_ngram")
    if "model.embed_tokens.weight" in ts:
        name = "model.ngram_embeddings.word_embeddings.weight"
        ts[name] = retag(ts.pop("model.embed_tokens.weight"), name=name)
    return ts


def _broadcast(k: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of ``a * b`` under numpy broadcasting (mlx's), or ConfigError."""
    out = broadcast_shape(a, b)
    if out is None:
        raise ConfigError(f"{k}: shape {list(a)} does not broadcast with {list(b)} as "
                          "mlx-lm's sanitize multiplies them")
    return out


# Names falcon_h1's sanitize multiplies before it reaches the conv1d branch (an elif chain).
_FALCON_SCALED = ("embed_tokens.weight", "lm_head.weight", "q_proj.weight", "k_proj.weight",
                  "key_proj.weight", "o_proj.weight", "out_proj.weight", "gate_proj.weight",
                  "down_proj.weight", "in_proj.weight")


def _mup_size(cfg: dict[str, Any]) -> int:
    """len(compute_mup_vector(args)): d_ssm, d_ssm, groups x state, groups x state, heads,
    zip-truncated to the ssm_multipliers given."""
    fam = "falcon_h1"
    d_ssm = _int_arg(cfg, fam, "mamba_d_ssm")
    gs = _int_arg(cfg, fam, "mamba_n_groups") * _int_arg(cfg, fam, "mamba_d_state")
    sizes = [d_ssm, d_ssm, gs, gs, _int_arg(cfg, fam, "mamba_n_heads")]
    mults = model_arg(cfg, fam, "ssm_multipliers")
    if not isinstance(mults, list | tuple):
        raise ConfigError(f"config.json: ssm_multipliers={mults!r} is not a list")
    return sum(sizes[:len(mults)])


def _falcon_h1(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """falcon_h1.py: only when layer 0's conv1d is HF's (C, 1, K) (K > 1): the muP multipliers
    folded in (same dtype; in_proj broadcast against the (M, 1) muP vector) and every conv1d
    weight transposed; an MLX-layout checkpoint passes through untouched."""
    key = "model.layers.0.mamba.conv1d.weight"
    if key not in ts:
        raise ConfigError(f"{key} is missing; mlx-lm's falcon_h1 sanitize reads it first")
    c1d = ts[key]
    if _last(key, c1d) <= _last(key, c1d, 1):
        return ts
    out: Tensors = {}
    for k, v in ts.items():
        if k.endswith("in_proj.weight"):
            v = retag(v, shape=_broadcast(k, v.shape, (_mup_size(cfg), 1)))
        elif "conv1d.weight" in k and not k.endswith(_FALCON_SCALED):
            v = _transpose021(k, v)
        out[k] = v
    return out


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
    "bailing_moe_linear": _bailing_moe_linear,
    "bailing_hybrid": _bailing_hybrid,
    "kimi_linear": _kimi_linear,
    "longcat_flash_ngram": _longcat_flash_ngram,
    "falcon_h1": _falcon_h1,
}
