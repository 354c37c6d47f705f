"""The one FP8 block dequantization (model/sanitize_ops.fp8_dequantized) on the FP8 dtypes a
checkpoint may store: which of them mx.load reads as the uint8 mx.from_fp8 takes (a real file
each), and the replays against mlx-lm's own sanitize on what mx.load gives for them."""

from __future__ import annotations

import json
import struct

import pytest
from sanitize_oracle import Layout, build, fixture

from mlxfit.errors import ConfigError
from mlxfit.model.convert_rules import sanitized
from mlxfit.model.sanitize_ops import FP8_AS_U8
from mlxfit.model.tensors import MLX_TO_SAFETENSORS, SAFETENSORS_TO_MLX, TensorInfo

STORED = ("U8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I8")


def _write(path, dtype: str) -> None:
    """A one-tensor safetensors file (2 x 4 of ``dtype``, one byte each), header by hand:
    numpy has no FP8 types for the safetensors library to write."""
    header = json.dumps({"w": {"dtype": dtype, "shape": [2, 4], "data_offsets": [0, 8]}})
    raw = header.encode() + b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8))


@pytest.mark.parametrize("dtype", STORED)
def test_fp8_as_u8_is_what_mx_load_reads_as_uint8(dtype, tmp_path):
    mx = pytest.importorskip("mlx.core")
    path = tmp_path / "w.safetensors"
    _write(path, dtype)
    if dtype == "F8_E5M2":
        with pytest.raises((ValueError, RuntimeError), match="F8_E5M2"):
            mx.load(str(path))
        assert dtype not in FP8_AS_U8
        return
    assert (mx.load(str(path))["w"].dtype == mx.uint8) == (dtype in FP8_AS_U8)


def _mlx(config, layout: Layout) -> Layout:
    import mlx.core as mx  # heavy, optional: only the converter tests

    # what mx.load gives for each stored dtype: FP8 bytes as uint8
    weights = {k: mx.zeros(s, dtype=mx.uint8 if dt in FP8_AS_U8 else
                           getattr(mx, SAFETENSORS_TO_MLX[dt])) for k, (dt, s) in layout.items()}
    out = build(config).sanitize(weights)
    return {k: (MLX_TO_SAFETENSORS[str(v.dtype).rsplit(".", 1)[-1]], tuple(v.shape))
            for k, v in out.items()}


def _ours(config, layout: Layout, family: str) -> Layout:
    got, _ = sanitized([TensorInfo.of(k, dt, s) for k, (dt, s) in layout.items()], config,
                       family)
    return {k: (t.dtype, tuple(t.shape)) for k, t in got.items()}


def _kimi_k25():
    cfg = fixture("kimi_k25")
    return {**cfg, "text_config": {**cfg["text_config"], "num_hidden_layers": 2}}


# (family, config, weight prefix): every family whose sanitize dequantizes 128x128 FP8 blocks
FAMILIES = [
    ("deepseek_v32", lambda: fixture("deepseek_v32", num_hidden_layers=2), "model."),
    ("mistral4", lambda: fixture("mistral4", num_hidden_layers=2), "model."),
    ("minimax", lambda: fixture("minimax", num_hidden_layers=2), "model."),
    ("mimo_v2_flash", lambda: fixture("mimo_v2_flash", num_hidden_layers=2), "model."),
    ("kimi_k25", _kimi_k25, "language_model.model."),
]


def _fp8(prefix: str, dtype: str) -> Layout:
    w = f"{prefix}layers.0.self_attn.o_proj.weight"
    return {w: (dtype, (200, 130)), w + "_scale_inv": ("F32", (2, 2)),
            f"{prefix}norm.weight": ("BF16", (64,))}


@pytest.mark.parametrize(("family", "config", "prefix"), FAMILIES,
                         ids=[f[0] for f in FAMILIES])
def test_e8m0_weight_dequantized_as_mlx_lm_does(family, config, prefix):
    """mx.load reads F8_E8M0 as uint8, so mlx-lm's from_fp8 dequantizes it like F8_E4M3."""
    pytest.importorskip("mlx_lm")
    cfg, layout = config(), _fp8(prefix, "F8_E8M0")
    want = _mlx(cfg, layout)
    assert want[f"{prefix}layers.0.self_attn.o_proj.weight"] == ("BF16", (200, 130))
    assert _ours(cfg, layout, family) == want


@pytest.mark.parametrize(("family", "config", "prefix"), FAMILIES,
                         ids=[f[0] for f in FAMILIES])
def test_e5m2_weight_is_refused(family, config, prefix):
    """mx.load cannot read F8_E5M2 (test_fp8_as_u8_is_what_mx_load_reads_as_uint8), so
    mlx_lm.convert never reaches the dequantization: the replay refuses, naming the weight."""
    with pytest.raises(ConfigError) as err:
        _ours(config(), _fp8(prefix, "F8_E5M2"), family)
    assert "o_proj.weight: F8_E5M2" in str(err.value) and "\n" not in str(err.value)
