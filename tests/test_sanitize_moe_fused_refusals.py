"""Checkpoints mlx-lm's own sanitize refuses (moe_fused families): the replay refuses them too,
in one ConfigError line naming the tensor, never a silently different layout. mlx-lm's side is
run here on lazy zeros, so each case is shown to fail inside its sanitize (not at load)."""

from __future__ import annotations

from typing import Any

import pytest
from sanitize_cases_moe_fused import CASES, hunyuan_fused
from sanitize_oracle import Layout, build

from mlxfit.errors import ConfigError
from mlxfit.model.sanitize_moe_fused import SANITIZE
from mlxfit.model.tensors import SAFETENSORS_TO_MLX, TensorInfo


def _config(family: str, **changes: Any) -> dict[str, Any]:
    return {**CASES[family]()[0][0], **changes}


def _fp8(name: str, shape: tuple[int, int], scale: tuple[int, ...]) -> Layout:
    return {name: ("U8", shape), name + "_scale_inv": ("F32", scale)}


Q = "model.layers.0.self_attn.q_proj.weight"
REFUSED: list[tuple[str, dict[str, Any], Layout, str]] = [
    # (family, config changes, layout, a word the message names)
    ("bailing_moe", {"norm_head": True, "tie_word_embeddings": True},
     {"lm_head.weight": ("BF16", (256, 64))}, "lm_head.weight"),
    ("bailing_moe", {"norm_head": True}, {"model.norm.weight": ("BF16", (64,))},
     "lm_head.weight"),
    ("laguna", {}, {f"model.layers.1.mlp.experts.{e}.up_proj.weight": ("BF16", (128, 64))
                    for e in range(3)}, "experts.3.up_proj"),
    ("hunyuan", {}, {f"model.layers.0.mlp.experts.{e}.up_proj.weight": ("BF16", (128, 64 + e))
                     for e in range(2)}, "switch_mlp.up_proj"),
    ("hunyuan", {"num_experts": 1},
     {"model.layers.0.mlp.gate_and_up_proj.weight": ("BF16", (256, 64)),
      "model.layers.0.self_attn.qkv_proj.weight": ("BF16", (100, 5))}, "qkv_proj"),
    ("hunyuan", {"num_experts": 1},
     {"model.layers.0.mlp.gate_and_up_proj.weight": ("BF16", (255, 64))}, "gate_and_up_proj"),
    ("minimax", {}, {Q + "_scale_inv": ("F32", (1, 1))}, "weight_scale_inv"),
    ("minimax", {}, _fp8(Q, (64, 64), (2, 1)), "weight_scale_inv"),
    ("minimax", {}, {Q: ("BF16", (64, 64)), Q + "_scale_inv": ("F32", (1, 1))}, Q),
    ("minimax", {}, _fp8(Q, (64, 64), (1,)), "weight_scale_inv"),
    ("mimo_v2_flash", {}, _fp8(Q, (256, 64), (1, 1)), "weight_scale_inv"),
    ("gpt_oss", {}, {"model.layers.0.mlp.experts.gate_up_proj.weight": ("BF16", (128,))},
     "gate_up_proj"),
    ("gpt_oss", {}, {"model.layers.0.mlp.experts.down_proj_blocks": ("U8", (4, 64, 3))},
     "down_proj_blocks"),
]


@pytest.mark.parametrize(("family", "changes", "layout", "named"), REFUSED,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(REFUSED)])
def test_replay_refuses_what_mlx_lm_refuses(family, changes, layout, named):
    mx = pytest.importorskip("mlx.core")
    config = _config(family, **changes)
    model = build(config)
    weights = {k: mx.zeros(s, dtype=getattr(mx, SAFETENSORS_TO_MLX[dt]))
               for k, (dt, s) in layout.items()}
    with pytest.raises(Exception):  # noqa: B017 - mlx-lm raises KeyError/ValueError/IndexError
        model.sanitize(weights)
    with pytest.raises(ConfigError) as err:
        SANITIZE[family]({k: TensorInfo.of(k, dt, s) for k, (dt, s) in layout.items()}, config)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_fused_hunyuan_bias_is_refused_as_convert_fails_on_it():
    """mlx-lm's hunyuan sanitize reshapes a fused qkv_proj bias (rows,) to (rows, 1) q/k/v
    parts without raising; the strict load then refuses them, so convert fails: so do we."""
    mx = pytest.importorskip("mlx.core")
    config = _config("hunyuan", num_experts=1, attention_bias=True)
    layout = hunyuan_fused(config)
    assert layout["model.layers.0.self_attn.qkv_proj.bias"] == ("BF16", (128,))
    model = build(config)
    out = model.sanitize({k: mx.zeros(s) for k, (_, s) in layout.items()})
    assert out["model.layers.0.self_attn.q_proj.bias"].shape == (64, 1)
    with pytest.raises(ValueError, match="q_proj.bias"):
        model.load_weights(list(out.items()), strict=True)
    with pytest.raises(ConfigError, match="qkv_proj.bias"):
        SANITIZE["hunyuan"]({k: TensorInfo.of(k, dt, s) for k, (dt, s) in layout.items()},
                            config)
