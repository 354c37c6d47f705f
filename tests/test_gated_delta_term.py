"""Issue 26: the Metal prefill transient of gated-delta layers (Qwen3.5/3.6, Qwen3-Next) is sized
by the arrays one layer writes per token on the kernel path: the packed q/k/v projection (its
width set by the key heads as well as the value heads), z, the conv window, the norms."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.memory import Run, activations_term
from mlxfit.model.mlx_extra import mlx_missing_reason
from mlxfit.model.parse import parse_config

CHUNK = 2048
FAMILY_DIR = Path(__file__).parent / "fixtures" / "families"


def _qwen35(hk: int, hv: int, hidden: int = 1024) -> dict:
    """A Qwen3.5 text config (qwen3_5.py TextModelArgs' field names) at the given head counts."""
    return {"model_type": "qwen3_5", "tie_word_embeddings": True, "text_config": {
        "model_type": "qwen3_5_text", "hidden_size": hidden, "num_hidden_layers": 8,
        "intermediate_size": 3 * hidden, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 256, "linear_num_key_heads": hk, "linear_num_value_heads": hv,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "full_attention_interval": 4, "vocab_size": 248320, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 262144, "tie_word_embeddings": True}}


def _gated_delta_bytes(config: dict, act_bytes: int = 2) -> int:
    cfg = parse_config(config, act_bytes=act_bytes, where="test")
    be = load_calibration().backend("metal")
    run = Run(ctx=8 * CHUNK, prefill_step_size=CHUNK, backend="metal", gpu_class="d")
    return activations_term(cfg, CHUNK, be, run).inputs["gated_delta"]


def test_key_heads_are_read_from_the_config() -> None:
    cfg = parse_config(_qwen35(hk=16, hv=32), act_bytes=2, where="test")
    assert (cfg.linear_k_heads, cfg.linear_v_heads) == (16, 32)


def test_the_term_grows_with_the_key_heads_at_the_same_value_width() -> None:
    """The 0.8B's layers (16 key heads, 16 value heads) and a layer with half the key heads
    have the same value width: the old term (Hv x Dv copies) sized them alike; in_proj_qkv and
    the q/k norms are 2 x Hk x Dk wider per token, so the narrow-key layer holds less."""
    assert _gated_delta_bytes(_qwen35(hk=16, hv=16)) > _gated_delta_bytes(_qwen35(hk=8, hv=16))


def test_the_term_is_what_one_layer_writes_times_the_fitted_layers() -> None:
    """act_linear x chunk x (4 x conv_dim + 4 x Hk x Dk + 3 x Hv x Dv) x dtype bytes, with
    conv_dim = 2 x Hk x Dk + Hv x Dv (qwen3_5.py GatedDeltaNet.conv_dim), for the 0.8B's and
    the 4B's head counts, in bf16 and float32 activations."""
    act_linear = load_calibration().backend("metal").act_linear
    for hk, hv in ((16, 16), (16, 32), (16, 48)):
        key, value = hk * 128, hv * 128
        elems = 4 * (2 * key + value) + 4 * key + 3 * value
        for act_bytes in (2, 4):
            want = act_linear * CHUNK * elems * act_bytes
            assert abs(_gated_delta_bytes(_qwen35(hk, hv), act_bytes) - want) <= 1


def test_no_term_without_gated_delta_layers() -> None:
    cfg = parse_config(_qwen35(hk=16, hv=16), act_bytes=2, where="test")
    plain = replace(cfg, linear_scan="")
    be = load_calibration().backend("metal")
    run = Run(ctx=4 * CHUNK, prefill_step_size=CHUNK, backend="metal", gpu_class="d")
    assert activations_term(plain, CHUNK, be, run).inputs["gated_delta"] == 0


@pytest.mark.skipif(mlx_missing_reason() is not None, reason="mlx/mlx-lm not importable")
def test_the_plan_read_from_mlx_lm_finds_the_key_heads_in_the_conv_state() -> None:
    """A model the family table lacks gets its gated-delta widths from mlx-lm's own caches:
    the key heads from the conv state's width (2 x Hk x Dk + Hv x Dv), here fewer than the
    value heads, as qwen3_next.py builds them."""
    from mlxfit.model.oracle import derive_layers, derive_mixer

    config = json.loads((FAMILY_DIR / "qwen3_next.json").read_text())
    config.update(linear_num_key_heads=2, linear_num_value_heads=4)
    _, run = derive_layers(config, 4)
    mixer = derive_mixer(run)
    assert (mixer["linear_k_heads"], mixer["linear_v_heads"]) == (2, 4)
