"""Checkpoint layouts for the dense families' sanitize replays (model/sanitize_dense.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sanitize_oracle import Layout, model_layout

FIXTURES = Path(__file__).parent / "fixtures" / "families"

Case = tuple[dict[str, Any], Layout]



def fixture(family: str, **changes: Any) -> dict[str, Any]:
    """The family's fixture config (tests/fixtures/families), with ``changes``."""
    return {**json.loads((FIXTURES / f"{family}.json").read_text()), **changes}


def _internlm2() -> list[Case]:
    cfg = fixture("internlm2", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                  vocab_size=256, torch_dtype="bfloat16")
    hf = model_layout(cfg)
    rope = {f"model.layers.{i}.attention.rope.inv_freq": ("F32", (8,)) for i in range(2)}
    return [(cfg, {**hf, **rope})]


CASES: dict[str, Callable[[], list[Case]]] = {
    "internlm2": _internlm2,
}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {}
