"""fit sizes the weights mlx-lm holds after its load, not the bytes a checkpoint stores: mlx-lm's
loader runs the family's sanitize on every checkpoint, so an HF-layout one loses its MTP layers,
rotary buffers and towers and has its FP8 blocks dequantized to bfloat16. Checked against
mlx-lm's own sanitize, run lazily on the same checkpoint (tests/sanitize_oracle.py)."""

from __future__ import annotations

import pytest
from convert_helpers import mlx_params, to_hf, write_checkpoint
from sanitize_oracle import mlx_sanitize
from test_quantize import FAMILIES

import mlxfit
from mlxfit.model.tensors import DTYPE_BYTES


def _bytes(layout) -> int:
    total = 0
    for dtype, shape in layout.values():
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        total += n
    return total


# FP8 experts with scales and an MTP layer; an MTP layer; a vision tower and MTP head; rotary
# buffers.
CASES = ("deepseek_v3", "glm4_moe", "qwen3_5", "llama")


@pytest.mark.parametrize("family", CASES)
def test_fit_sizes_what_mlx_lm_holds(family, tmp_path):
    pytest.importorskip("mlx_lm")
    config = FAMILIES[family]
    layout = to_hf(family, config, mlx_params(config))
    folder = write_checkpoint(tmp_path / family, config, layout)
    # mx.load reads F8_E4M3 as uint8, which is what the family's sanitize receives
    held, _ = mlx_sanitize(config, {k: ("U8" if dt.startswith("F8") else dt, s)
                                    for k, (dt, s) in layout.items()})
    assert _bytes(held) != _bytes(layout)  # the checkpoint is not already as mlx-lm holds it
    r = mlxfit.fit(str(folder), 1024, machine="M4 Max 64GB")
    assert r.weights_bytes == _bytes(held)


def test_towers_asked_for_are_sized_as_stored(tmp_path):
    """--with-vision (another loader keeps the towers): the tensors as the checkpoint stores
    them, towers included."""
    config = FAMILIES["qwen3_5"]
    layout = to_hf("qwen3_5", config, mlx_params(config))
    folder = write_checkpoint(tmp_path / "q", config, layout)
    r = mlxfit.fit(str(folder), 1024, machine="M4 Max 64GB", with_vision=True)
    assert r.weights_bytes == _bytes(layout)
