"""The one MLA kv_b_proj split (model/sanitize_ops.split_kv_b) on quantized inputs, which
tests/test_sanitize_replay.py cannot check (the oracle's model is unquantized, so its strict load
refuses embed_q.scales): compared with mlx-lm's own sanitize run lazily on zeros, unloaded,
names, dtypes, shapes and order; and refused where mlx-lm's sanitize raises."""

from __future__ import annotations

from typing import Any

import pytest
from sanitize_oracle import Layout, build, fixture

from mlxfit.errors import ConfigError
from mlxfit.model.convert_rules import sanitized
from mlxfit.model.sanitize_ops import QUANT_BITS, QUANT_GROUPS
from mlxfit.model.tensors import MLX_TO_SAFETENSORS, SAFETENSORS_TO_MLX, TensorInfo

# Small MLA sizes every family below accepts: 2 heads, nope = v = 64, kv_lora_rank 64.
MLA = {"num_attention_heads": 2, "qk_nope_head_dim": 64, "v_head_dim": 64, "kv_lora_rank": 64,
       "num_hidden_layers": 2, "vocab_size": 128}
ROWS = 2 * (64 + 64)


def _config(family: str, **changes: Any) -> dict[str, Any]:
    return fixture(family, **{**MLA, **changes})


def _mlx(config: dict[str, Any], layout: Layout) -> Layout:
    import mlx.core as mx  # heavy, optional: only the converter tests

    weights = {k: mx.zeros(shape, dtype=getattr(mx, SAFETENSORS_TO_MLX[dt]))
               for k, (dt, shape) in layout.items()}
    out = build(config).sanitize(weights)
    return {k: (MLX_TO_SAFETENSORS[str(v.dtype).rsplit(".", 1)[-1]], tuple(v.shape))
            for k, v in out.items()}


def _ours(config: dict[str, Any], layout: Layout, family: str) -> Layout:
    got, _ = sanitized([TensorInfo.of(k, dt, s) for k, (dt, s) in layout.items()], config,
                       family)
    return {k: (t.dtype, tuple(t.shape)) for k, t in got.items()}


def _quantized_kv_b(attn: str, bits: int, group: int, rank: int = 64) -> Layout:
    """kv_b_proj as mlx quantizes a (ROWS, rank) weight: packed uint32, per-group scales."""
    return {f"{attn}.kv_b_proj.weight": ("U32", (ROWS, rank * bits // 32)),
            f"{attn}.kv_b_proj.scales": ("BF16", (ROWS, rank // group)),
            f"{attn}.kv_b_proj.biases": ("BF16", (ROWS, rank // group)),
            "model.norm.weight": ("BF16", (64,))}


def test_quant_sets_are_what_mx_quantize_takes():
    mx = pytest.importorskip("mlx.core")
    for bits in range(1, 9):
        for group in (16, 32, 64, 128):
            try:
                mx.quantize(mx.zeros((2, 128)), bits=bits, group_size=group)
                took = True
            except ValueError:
                took = False
            assert took == (bits in QUANT_BITS and group in QUANT_GROUPS), (bits, group)


# (family, attention prefix, bits, group size): each re-quantizes a quantized kv_b_proj,
# appending embed_q / unembed_out scales and biases in its own order.
REQUANTIZED = [
    ("glm4_moe_lite", "model.layers.0.self_attn", 4, 64),   # by kind; it ignored the scales
    ("kimi_linear", "model.layers.0.self_attn", 4, 32),     # by part; it refused
    ("deepseek_v32", "model.layers.1.self_attn", 1, 64),    # 1 bit: mx.quantize takes it
    ("longcat_flash", "model.layers.0.self_attn.1", 8, 32),
    ("mistral4", "model.layers.0.self_attn", 1, 32),
]


@pytest.mark.parametrize(("family", "attn", "bits", "group"), REQUANTIZED,
                         ids=[c[0] for c in REQUANTIZED])
def test_quantized_kv_b_is_requantized_as_mlx_lm_does(family, attn, bits, group):
    pytest.importorskip("mlx_lm")
    config = _config(family)
    layout = _quantized_kv_b(attn, bits, group)
    want = _mlx(config, layout)
    got = _ours(config, layout, family)
    assert got == want
    assert list(got) == list(want)  # the order the scales and biases are appended in
    assert want[f"{attn}.embed_q.weight"][0] == "U32"


def test_bailing_hybrid_splits_the_stored_weight_and_leaves_the_scales():
    """bailing_hybrid's sanitize has no quantized branch: it reshapes the packed weight as it
    is and keeps kv_b_proj.scales / .biases (mlx-lm's strict load then refuses them)."""
    pytest.importorskip("mlx_lm")
    config = _config("bailing_hybrid")
    layout = _quantized_kv_b("model.layers.0.attention", 4, 32)
    want = _mlx(config, layout)
    assert "model.layers.0.attention.kv_b_proj.scales" in want
    assert _ours(config, layout, "bailing_hybrid") == want


REFUSED = [
    # mlx-lm raises ValueError on any quantized kv_b_proj
    ("bailing_moe_v3", {}, _quantized_kv_b("model.layers.0.attention", 4, 32), "kv_b_proj"),
    # 9 packed columns at the inferred 4 bits, group 64: the scales do not match (dequantize)
    ("deepseek_v32", {}, {"model.layers.0.self_attn.kv_b_proj.weight": ("U32", (ROWS, 9)),
                          "model.layers.0.self_attn.kv_b_proj.scales": ("BF16", (ROWS, 1)),
                          "model.layers.0.self_attn.kv_b_proj.biases": ("BF16", (ROWS, 1))},
     "kv_b_proj.weight"),
    # rows that are not heads x (nope + v)
    ("glm4_moe_lite", {}, {"model.layers.0.self_attn.kv_b_proj.weight": ("BF16", (ROWS + 1, 64))},
     "kv_b_proj.weight"),
    # a re-quantization mx.quantize refuses: nope 48 is no multiple of the group size 64
    ("kimi_linear", {"qk_nope_head_dim": 48, "v_head_dim": 80},
     _quantized_kv_b("model.layers.0.self_attn", 4, 64), "embed_q.weight"),
]


@pytest.mark.parametrize(("family", "changes", "layout", "named"), REFUSED,
                         ids=[c[0] for c in REFUSED])
def test_refused_where_mlx_lms_sanitize_raises(family, changes, layout, named):
    pytest.importorskip("mlx_lm")
    config = _config(family, **changes)
    with pytest.raises(ValueError):
        _mlx(config, layout)
    with pytest.raises(ConfigError) as err:
        _ours(config, layout, family)
    assert named in str(err.value) and "\n" not in str(err.value)
