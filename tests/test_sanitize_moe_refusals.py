"""Checkpoints mlx-lm's own sanitize refuses (a missing expert, experts that do not stack, a
fused projection that does not split, a layer index that is no number) are refused by the
moe replays too, as one-line ConfigErrors; mixed expert dtypes stack as mx.stack promotes them.
Each layout is a valid case of tests/sanitize_cases_moe.py with one tensor changed."""

from __future__ import annotations

import pytest
import sanitize_cases_moe
from sanitize_oracle import build

from mlxfit.errors import ConfigError
from mlxfit.model.convert_rules import sanitized
from mlxfit.model.tensors import MLX_TO_SAFETENSORS, SAFETENSORS_TO_MLX, TensorInfo

mx = pytest.importorskip("mlx.core")


def _mlx_sanitize(config, layout):
    """mlx-lm's sanitize alone (no strict load): what it returns, or what it raises."""
    weights = {k: mx.zeros(shape, dtype=getattr(mx, SAFETENSORS_TO_MLX[dt]))
               for k, (dt, shape) in layout.items()}
    out = build(config).sanitize(weights)
    return {k: (MLX_TO_SAFETENSORS[str(v.dtype).rsplit(".", 1)[-1]], tuple(v.shape))
            for k, v in out.items()}


def _ours(config, layout, family):
    got, _ = sanitized([TensorInfo.of(k, dt, s) for k, (dt, s) in layout.items()], config, family)
    return {k: (t.dtype, tuple(t.shape)) for k, t in got.items()}


def _first(family):
    return sanitize_cases_moe.CASES[family]()[0]


def _without(layout, name):
    assert name in layout
    return {k: v for k, v in layout.items() if k != name}


def _changed(layout, name, dtype=None, shape=None):
    dt, sh = layout[name]
    return {**layout, name: (dtype or dt, shape if shape is not None else sh)}


def _refusals():
    cfg, hf = _first("deepseek")
    yield "deepseek", cfg, _without(hf, "model.layers.2.mlp.experts.3.up_proj.weight")
    cfg, hf = _first("qwen2_moe")
    yield "qwen2_moe", cfg, _changed(hf, "model.layers.1.mlp.experts.2.down_proj.weight",
                                     shape=(64, 32))
    cfg, hf = _first("granitemoe")
    name = "model.layers.1.block_sparse_moe.input_linear.weight"
    e, rows, h = hf[name][1]
    yield "granitemoe", cfg, _changed(hf, name, shape=(e, rows + 1, h))
    yield "granitemoe", cfg, _without(hf, name)
    cfg, hf = _first("Klear")
    yield "Klear", cfg, {**hf, "model.layers.x.mlp.experts.0.gate_proj.weight": ("BF16", (8, 8))}
    cfg, hf = _first("phixtral")
    yield "phixtral", cfg, _without(hf, "transformer.h.1.moe.mlp.2.fc2.bias")


@pytest.mark.parametrize("family,config,layout", list(_refusals()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_refused_as_mlx_lm_refuses(family, config, layout):
    with pytest.raises(Exception):  # noqa: B017 - KeyError, ValueError: whatever mlx-lm raises
        _mlx_sanitize(config, layout)
    with pytest.raises(ConfigError) as err:
        _ours(config, layout, family)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("other", ["F32", "F16"])
def test_mixed_expert_dtypes_stack_as_mx_stack_promotes(other):
    cfg, hf = _first("olmoe")
    layout = _changed(hf, "model.layers.0.mlp.experts.1.gate_proj.weight", dtype=other)
    want = _mlx_sanitize(cfg, layout)
    assert want["model.layers.0.mlp.switch_mlp.gate_proj.weight"][0] != "BF16"
    assert _ours(cfg, layout, "olmoe") == want
