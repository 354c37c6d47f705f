"""Checkpoint layouts for the wrappers families' sanitize replays (model/sanitize_wrappers.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sanitize_oracle import Layout, model_layout, rename, unstack, with_extra

FIXTURES = Path(__file__).parent / "fixtures" / "families"

Case = tuple[dict[str, Any], Layout]


def fixture(family: str, **changes: Any) -> dict[str, Any]:
    """The family's fixture config (tests/fixtures/families), with ``changes``."""
    return {**json.loads((FIXTURES / f"{family}.json").read_text()), **changes}


def text_fixture(family: str, top: dict[str, Any] | None = None, **text: Any) -> dict[str, Any]:
    """The family's fixture with ``text`` changed in its text_config (and ``top`` at the top)."""
    cfg = fixture(family, **(top or {}))
    return {**cfg, "text_config": {**cfg["text_config"], **text}}


def tower(*prefixes: str) -> Layout:
    """A few tensors under each prefix, standing for a vision or audio tower mlx-lm drops."""
    out: Layout = {}
    for p in prefixes:
        out[f"{p}.layers.0.attn.q_proj.weight"] = ("BF16", (16, 16))
        out[f"{p}.norm.weight"] = ("F32", (16,))
    return out


def _pop_towers(family: str) -> list[Case]:
    cfg = text_fixture(family, hidden_size=64, intermediate_size=128, vocab_size=256,
                       num_hidden_layers=2, torch_dtype="bfloat16")
    if family == "lfm2-vl":
        cfg["text_config"].update(block_dim=64, block_ff_dim=128, layer_types=[
            "full_attention", "conv"])
    hf = model_layout(cfg)
    return [(cfg, with_extra(hf, tower("vision_tower", "multi_modal_projector"))),
            (cfg, with_extra(tower("multi_modal_projector"), hf))]


def _gemma3n() -> list[Case]:
    cfg = text_fixture("gemma3n", torch_dtype="bfloat16")
    hf = model_layout(cfg)
    towers = tower("model.vision_tower", "model.audio_tower", "model.embed_audio",
                   "model.embed_vision")
    return [(cfg, with_extra(hf, towers)), (cfg, with_extra(tower("model.audio_tower"), hf))]


def _qwen_vl(family: str) -> list[Case]:
    cfg = text_fixture(family, torch_dtype="bfloat16", num_hidden_layers=2)
    mlx = model_layout(cfg)
    # Newer HF: model.language_model.* and model.visual.*, lm_head at the top.
    new = rename(mlx, lambda k: k.replace("language_model.model.", "model.language_model.")
                 .replace("language_model.lm_head", "lm_head"))
    old = rename(mlx, lambda k: k.removeprefix("language_model."))
    tied = text_fixture(family, torch_dtype="bfloat16", num_hidden_layers=2,
                        tie_word_embeddings=True)
    old_tied = rename(model_layout(tied), lambda k: k.removeprefix("language_model."))
    return [(cfg, with_extra(new, tower("model.visual"))),
            (cfg, with_extra(tower("visual"), old)),
            (tied, with_extra(old_tied, tower("vision_tower"))),
            (cfg, mlx)]


CASES: dict[str, Callable[[], list[Case]]] = {
    "pixtral": lambda: _pop_towers("pixtral"),
    "lfm2-vl": lambda: _pop_towers("lfm2-vl"),
    "gemma3n": _gemma3n,
    "qwen2_vl": lambda: _qwen_vl("qwen2_vl"),
    "qwen3_vl": lambda: _qwen_vl("qwen3_vl"),
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {}
