"""config.json against the tensors that carry its dimensions (issue 13, class 7).

The cache plan is sized from the config alone; mlx-lm builds the model from the config and then
loads the tensors into it, and refuses any whose shape differs. So a config that disagrees with
its own weights (``num_key_value_heads: 10^9`` over a 2-head ``k_proj``; ``hidden_size: 5120``
over 4096-wide tensors) is a model mlx-lm cannot load, not one to size: the first disagreement
is a one-line ConfigError naming the field.

Checked only where the tensor is unambiguous, so that no real model is refused:
- ``hidden_size`` against the token embedding's width (``embed_tokens.weight``; a packed U32
  embedding is unpacked with its quantization bits, as ``model.weights`` does);
- per attention layer ``i`` with separate ``q_proj``/``k_proj``/``v_proj`` (not fused, not
  MLA): the output features (``shape[0]``, never packed) of ``k_proj`` = kv heads x key width,
  ``v_proj`` = kv heads x value width, ``q_proj`` = heads x head width (x 2 with an output gate);
- routed experts: every stacked expert weight (``switch_mlp.*`` / ``experts.*``, 3-D) has
  ``num_experts`` as its first dimension;
- the depth: when tensors are named by layer (``layers.<i>.``), every layer the config has
  holds some (a 30-layer config over 2 layers of tensors was sized as 30 layers and "FITS";
  mlx-lm could not load it). Extra layers (DeepSeek-V3's multi-token-prediction layer 61) are
  what mlx-lm drops, not a contradiction.
Vision towers are skipped (their own config block sizes them)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.config import Attn, ModelConfig
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import is_expert, is_vision, parse_quantization

_PROJ = r"(?:^|\.)layers\.(\d+)\.(?:self_attn|attention|attn)\.([qkv])_proj\.weight$"
_LAYER = r"(?:^|\.)layers\.(\d{1,6})\."


def _embedding_width(t: TensorInfo, by_name: dict[str, TensorInfo],
                     config: dict[str, Any]) -> int | None:
    if len(t.shape) != 2:
        return None
    width = t.shape[1]
    module = t.name[: -len(".weight")]
    if t.dtype == "U32" and module + ".scales" in by_name:
        q = parse_quantization(config)
        if q is None:
            return None  # summarize_weights names that problem
        bits = q.overrides.get(module, {}).get("bits", q.bits)
        if (width * 32) % bits:
            return None
        width = width * 32 // bits
    return width


def _expected(a: Attn, cfg: ModelConfig, which: str) -> tuple[int, str]:
    if which == "k":
        return a.kv_heads * a.k_dim, f"num_key_value_heads {a.kv_heads} x head_dim {a.k_dim}"
    if which == "v":
        return a.kv_heads * a.v_dim, f"num_key_value_heads {a.kv_heads} x head_dim {a.v_dim}"
    gate = 2 if cfg.gated_q else 1
    return (a.q_heads * a.head_dim * gate,
            f"num_attention_heads {a.q_heads} x head_dim {a.head_dim}"
            + (" x 2 (output gate)" if gate == 2 else ""))


def _culprit(a: Attn, cfg: ModelConfig, which: str, t: TensorInfo,
             by_name: dict[str, TensorInfo]) -> str:
    """The field to name: head_dim when q_proj and k_proj agree on a head width other than
    the config's (both head counts then hold), else the head count of this projection."""
    heads_field = "num_attention_heads" if which == "q" else "num_key_value_heads"
    q, k = (by_name.get(t.name[:-len("x_proj.weight")] + f"{p}_proj.weight") for p in "qk")
    if q is None or k is None or a.mla is not None:
        return heads_field
    gate = 2 if cfg.gated_q else 1
    q_out, k_out = q.shape[0], k.shape[0]
    if (q_out % (a.q_heads * gate) == 0 and k_out % a.kv_heads == 0
            and q_out // (a.q_heads * gate) == k_out // a.kv_heads != a.head_dim):
        return "head_dim"
    return heads_field


def check_dims(cfg: ModelConfig, tensors: Iterable[TensorInfo], config: dict[str, Any],
               where: str) -> None:
    """Raise ConfigError naming the first config field its tensors contradict."""
    tensors = [t for t in tensors if not is_vision(t.name)]
    by_name = {t.name: t for t in tensors}

    def fail(field: str, said: str, t: TensorInfo, got: str) -> ConfigError:
        return ConfigError(f"{where}: {field} disagrees with the weights: the config says "
                           f"{said}, but {t.name!r} has {got} (mlx-lm could not load it)")

    for t in tensors:
        if t.name.endswith("embed_tokens.weight") and "per_layer" not in t.name:
            w = _embedding_width(t, by_name, config)
            if w is not None and w != cfg.hidden:
                raise fail("hidden_size", f"hidden_size {cfg.hidden}", t, f"width {w}")
    for t in tensors:
        m = re.search(_PROJ, t.name)
        if m is None or len(t.shape) != 2:
            continue
        i = int(m.group(1))
        a = cfg.layers[i].attn if i < len(cfg.layers) else None
        if a is None or a.mla is not None:
            continue
        want, said = _expected(a, cfg, m.group(2))
        if t.shape[0] != want:
            field = _culprit(a, cfg, m.group(2), t, by_name)
            raise fail(field, f"{said} = {want} for layer {i}", t,
                       f"{t.shape[0]} output features")
    depth = {int(m.group(1)) for t in tensors if (m := re.search(_LAYER, t.name))}
    if depth:
        missing = [i for i in range(cfg.num_layers) if i not in depth]
        if missing:
            held = len(depth & set(range(cfg.num_layers)))
            raise ConfigError(f"{where}: num_hidden_layers disagrees with the weights: the "
                              f"config has {cfg.num_layers} layers, but the tensors hold "
                              f"{held} of them (none for layer {missing[0]}; mlx-lm could not "
                              "load it)")
    if cfg.num_experts:
        for t in tensors:
            if (is_expert(t.name) and t.name.endswith(".weight") and len(t.shape) == 3
                    and t.shape[0] != cfg.num_experts):
                raise fail("num_experts", f"{cfg.num_experts} routed experts", t,
                           f"{t.shape[0]} stacked")
