"""minimax_m3_vl without index_topk_blocks: mlx-lm builds the model, and its first forward call
fails in the sparse layers' _index_mask (None compared with the block count). mlxfit sizes it
(mlx-lm loads it) and says so in a warning, as with other fields only the forward pass reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxfit.model.oracle import build_model
from mlxfit.model.parse import parse_config

BASE = json.loads((Path(__file__).parent / "fixtures" / "families" / "minimax_m3_vl.json")
                  .read_text())


def _config(topk: bool) -> dict:
    tc = {k: v for k, v in BASE["text_config"].items() if topk or k != "index_topk_blocks"}
    return {**BASE, "text_config": tc}


@pytest.mark.parametrize("topk", [True, False])
def test_warned_exactly_when_the_first_call_fails(topk):
    pytest.importorskip("mlx_lm")
    import mlx.core as mx

    model, _ = build_model(_config(topk), dtype="float32")  # the CPU gather_mm: float32 only
    try:
        mx.eval(model(mx.array([[1, 2, 3]])))
        fails = False
    except TypeError:
        fails = True
    warned = any("index_topk_blocks" in w
                 for w in parse_config(_config(topk), where="config.json").warnings)
    assert fails == (not topk)
    assert warned == fails
