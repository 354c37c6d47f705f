"""The context a model reads to, as mlx-lm's RoPE sets it up (mlx_lm/models/rope_utils.py,
initialize_rope): a config.json ``rope_scaling`` (or transformers 5's ``rope_parameters``) of
type yarn or dynamic stretches the positions the model was trained on by
``factor`` over ``original_max_position_embeddings``; mlx-lm applies it and never enforces
``max_position_embeddings`` itself. Pure: a dict in, a number and its reason out."""

from __future__ import annotations

from typing import Any

# initialize_rope's types that stretch the original length by `factor` at inference (YarnRoPE,
# DynamicNTKScalingRoPE). Not "linear" and "llama3": models are trained with those in place and
# their max_position_embeddings already is the scaled length (Gemma 3: linear x8 at 131,072;
# Llama 3.2: llama3 x32 at 131,072); nor longrope, whose max_position_embeddings is the long one.
SCALED_TYPES = ("yarn", "deepseek_yarn", "telechat3-yarn", "dynamic")


def rope_scaling_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """The rope_scaling object mlx-lm reads (rope_parameters when rope_scaling is absent)."""
    rs = config.get("rope_scaling")
    if rs is None:
        rs = config.get("rope_parameters")
    return rs if isinstance(rs, dict) else None


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 else None


def scaled_context(config: dict[str, Any], max_position: int | None) -> tuple[int | None, str]:
    """(the context limit, why): max_position_embeddings, or factor x the original length where
    a rope_scaling of a scaling type makes it longer ("" when it does not)."""
    rs = rope_scaling_of(config)
    if rs is None:
        return max_position, ""
    kind = rs.get("type") or rs.get("rope_type", "default")
    factor = _number(rs.get("factor"))
    if kind not in SCALED_TYPES or factor is None or factor <= 1:
        return max_position, ""
    original = _number(rs.get("original_max_position_embeddings")) or max_position
    if not original:
        return max_position, ""
    extended = int(factor * original)
    if max_position and extended <= max_position:
        return max_position, ""
    return extended, (f"rope_scaling {kind} x{factor:g} over {int(original):,} tokens (mlx-lm "
                      "applies it)")
