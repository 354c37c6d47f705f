"""Decode's fixed cost per layer whose attention runs MLX's unfused fallback (issue 25, round 4).

A fused layer dispatches one sdpa_vector; MLA's absorbed attention (head dim kv_lora_rank with
an array mask), Gemma 2's softcapped attention and head dims without a fused kernel dispatch the
score matmul, softmax and value matmul separately. ``per_unfused_layer_s`` prices that per
layer; ``unfused_decode_layers`` counts the layers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from st_helpers import load_config

from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.memory import Run, attn_groups
from mlxfit.estimate.speed import (
    decode_time_terms,
    layer_seconds,
    unfused_decode_flops,
    unfused_decode_layers,
)
from mlxfit.model.inputs import MatmulParams, WeightsRead

FUSED = (64, 96, 128, 256)  # sdpa_vector's head dims (the shipped Metal backend's list)


def _weights() -> WeightsRead:
    p = MatmulParams(total=1_000_000_000, embedding=0, lm_head=0, fmt="affine4")
    return WeightsRead(total_bytes=1_000_000_000, expert_bytes=0, embedding_bytes=0,
                       tied_embeddings=False, params=p)


@pytest.mark.parametrize(("name", "unfused"), [
    ("meta-llama__Meta-Llama-3.1-8B", 0),  # head dim 128: every layer fused
    ("deepseek-ai__DeepSeek-V3", "all"),  # MLA: absorbed latent attention, unfused
    ("google__gemma-2-9b-it", "all"),  # softcapped attention: hand-written, unfused
])
def test_unfused_layers_are_counted_and_priced(name, unfused):
    cfg = load_config(name)
    run = Run(ctx=4096, backend="metal")
    n = unfused_decode_layers(cfg, run, FUSED)
    assert n == (cfg.num_layers if unfused == "all" else 0)
    cal = load_calibration().decode
    terms = {t.name: t for t in decode_time_terms(cfg, run, _weights(), 400.0, cal,
                                                  fused_decode=FUSED)}
    fixed = terms["decode_fixed_seconds"]
    assert fixed.inputs["unfused_layers"] == n
    assert fixed.seconds == pytest.approx(
        layer_seconds(cfg.num_layers, cfg.moe_layers, cal) + cal.per_unfused_layer_s * n)
    # the term moves with the constant exactly where layers run unfused
    more = replace(cal, per_unfused_layer_s=cal.per_unfused_layer_s + 1e-3)
    terms2 = {t.name: t for t in decode_time_terms(cfg, run, _weights(), 400.0, more,
                                                   fused_decode=FUSED)}
    assert terms2["decode_fixed_seconds"].seconds - fixed.seconds == pytest.approx(1e-3 * n)


def test_a_head_dim_without_a_fused_kernel_is_unfused():
    """The same Llama with 128 taken out of the fused list: every layer falls back."""
    cfg = load_config("meta-llama__Meta-Llama-3.1-8B")
    run = Run(ctx=4096, backend="metal")
    assert unfused_decode_layers(cfg, run, (64, 96, 256)) == cfg.num_layers


def test_unfused_attention_flops_join_the_decode_time_on_a_chip():
    """MLA's absorbed attention does 2 x heads x (2 x kv_lora_rank + rope) FLOPs per attended
    key per layer (its latent is both key and value); a fused Llama none. With the chip's
    matmul peak the unfused term grows by those FLOPs over unfused_flops_eff x the peak; without
    it (no compute figures) the term is the bytes alone."""
    cal = load_calibration().decode
    run = Run(ctx=8192, backend="metal")
    llama = load_config("meta-llama__Meta-Llama-3.1-8B")
    assert unfused_decode_flops(llama, run, FUSED) == 0
    mla = load_config("deepseek-ai__DeepSeek-V3")
    (a, count), = attn_groups(mla, run)  # one MLA layout for every layer
    assert a.mla is not None and count == mla.num_layers
    keys = a.cache.decode_keys(run.ctx)
    want = count * 2 * a.mla.heads * (2 * a.mla.kv_lora_rank + a.mla.qk_rope) * keys
    assert unfused_decode_flops(mla, run, FUSED) == want
    peak = 20e12

    def unfused_s(flops):
        terms = decode_time_terms(mla, run, _weights(), 400.0, cal, fused_decode=FUSED,
                                  matmul_flops=flops)
        return next(t for t in terms if t.name == "decode_attention_unfused_seconds").seconds

    assert unfused_s(peak) - unfused_s(None) == pytest.approx(
        want / (cal.unfused_flops_eff * peak))
