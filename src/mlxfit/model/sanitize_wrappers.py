"""Multimodal and text-config wrappers (towers dropped, language_model prefixes): mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_wrappers.py).

Families: gemma3n, lfm2-vl, pixtral, qwen2_vl, qwen3_vl, qwen3_vl_moe, kimi_vl, kimi_k25, minimax_m3_vl, gemma4, gemma4_text, llama4, muse_spark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.mlx_lm_args import MODEL_ARGS
from mlxfit.model.sanitize_ops import (
    Tensors,
    flatten,
    pop_subtree,
    retag,
    subtree,
    unflatten,
)
from mlxfit.model.tensors import TensorInfo


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    text = cfg.get("text_config")
    return text if isinstance(text, dict) else {}


def _arg(section: dict[str, Any], args: str, field: str) -> Any:
    """``field`` as the ModelArgs named ``args`` (mlx_lm_args.py) reads it from ``section``."""
    if field in section:
        return section[field]
    return MODEL_ARGS.get(args, {}).get("defaults", {}).get(field)


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


SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    "pixtral": _pop_towers("vision_tower", "multi_modal_projector"),
    "lfm2-vl": _pop_towers("vision_tower", "multi_modal_projector"),
    "gemma3n": _gemma3n,
    "qwen2_vl": _qwen_vl,
    "qwen3_vl": _qwen_vl,
}
