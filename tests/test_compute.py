"""Prefill FLOPs (estimate/compute.py) worked out by hand from real configs, TTFT's shape, and
the per-chip compute figures of the SKU table."""

from __future__ import annotations

from dataclasses import replace

import pytest
from st_helpers import config_dict, load_config

from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.compute import (
    SCAN_FLOPS,
    chip_compute,
    chunk_flops,
    cold_gpu_seconds,
    predicted_ttft,
    prefill_layers,
    prefill_seconds,
)
from mlxfit.estimate.memory import Run
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.hardware.skus import COMPUTE_KEYS, chip_compute_figures, load_sku_table
from mlxfit.model.inputs import MatmulParams, WeightsRead
from mlxfit.model.parse import parse_config
from mlxfit.verbs.edges import compute_for


def _run(prompt: int, step: int = 2048) -> Run:
    return Run(ctx=prompt, gen=0, prefill_step_size=step)


@pytest.mark.parametrize("prompt", [4097, 8193])
def test_dense_llama_chunk_flops(prompt):
    """Llama-3.1-8B: 32 layers, 32 q heads of 128 (fused, causal). A prompt of P tokens runs
    P-1 in 2048-token chunks; chunk n starts at offset (n-1) x 2048. Causal pairs of a chunk:
    L x offset + L(L+1)/2. Attention = 31 computed layers x 2 x 32 x pairs x (128 + 128).
    Matmul: (8,030,261,248 - 2 x 525,336,576 embedding/head) x 31/32 = 6,761,476,968
    parameters per token, x 2 x 2048 FLOPs."""
    cfg = load_config("meta-llama__Meta-Llama-3.1-8B")
    p = MatmulParams(total=8_030_261_248, embedding=525_336_576, lm_head=525_336_576,
                     fmt="affine4")
    last = (prompt - 1) // 2048
    f = chunk_flops(cfg, p, _run(prompt), last)
    offset = (last - 1) * 2048
    pairs = 2048 * offset + 2048 * 2049 // 2
    assert f.attn_fused == 31 * 2 * 32 * pairs * 256
    assert f.attn_unfused == 0
    assert f.dense == pytest.approx(2 * 6_761_476_968 * 2048)
    assert f.experts == 0


@pytest.mark.parametrize("prompt", [2049, 6145])
def test_moe_qwen3_30b_routed_experts(prompt):
    """Qwen3-30B-A3B: 128 experts, top 8, every one of its 48 layers MoE. Routed parameters a
    token multiplies: 28,990,000,000 x 8/128 x 47/48 (the last layer is not computed) =
    1,774,088,541.67; dense: (30,500,000,000 - 28,990,000,000 - 2 x 311,164,928) x 47/48."""
    cfg = load_config("Qwen__Qwen3-30B-A3B")
    p = MatmulParams(total=30_500_000_000, experts=28_990_000_000, embedding=311_164_928,
                     lm_head=311_164_928)
    f = chunk_flops(cfg, p, _run(prompt), 1)
    assert f.experts == pytest.approx(2 * 28_990_000_000 * 8 / 128 * 47 / 48 * 2048)
    assert f.dense == pytest.approx(2 * (30_500_000_000 - 28_990_000_000 - 622_329_856)
                                    * 47 / 48 * 2048)


@pytest.mark.parametrize("prompt", [2049, 4097])
def test_mla_deepseek_v3_rebuilds_kv(prompt):
    """DeepSeek-V3 (MLA: 128 heads, nope 128, rope 64, v 128, kv_lora_rank 512; 60 of 61
    layers computed). The last chunk (size 2048) sees K = all tokens so far: attention over
    the rectangle 2 x 128 x 2048 x K x (128 + 64 + 128), plus K/V rebuilt from the latent for
    every key: 2 x K x 128 x 512 x (128 + 128)."""
    cfg = load_config("deepseek-ai__DeepSeek-V3")
    assert all(a.mla is not None for a in cfg.attention_layers)
    n = (prompt - 1) // 2048
    keys = n * 2048
    f = chunk_flops(cfg, MatmulParams(total=1), _run(prompt), n)
    per_layer = 2 * 128 * 2048 * keys * 320 + 2 * keys * 128 * 512 * 256
    assert f.attn_unfused == 60 * per_layer
    assert f.attn_fused == 0


@pytest.mark.parametrize("prompt", [2049, 8193])
def test_hybrid_qwen3_next_scan_and_unfused_attention(prompt):
    """Qwen3-Next-80B-A3B: 36 gated-delta layers (state 32 x 128 x 128 float32 + conv 49,152 B
    = 2,146,304 B each), 12 full-attention layers of head dim 256 (unfused: the L x keys
    rectangle), the last of which is not computed: 11 x 2 x 16 x 2048 x keys x 512; scan:
    7 x 36 x 2,146,304 / 4 x 2048."""
    cfg = load_config("Qwen__Qwen3-Next-80B-A3B-Thinking")
    n = (prompt - 1) // 2048
    f = chunk_flops(cfg, MatmulParams(total=1), _run(prompt), n)
    assert f.scan == SCAN_FLOPS * 36 * 2_146_304 / 4 * 2048
    assert f.attn_unfused == 11 * 2 * 16 * 2048 * (n * 2048) * 512
    assert f.attn_fused == 0


@pytest.mark.parametrize("prompt", [2049, 6145])
def test_sliding_window_gemma3_keys_capped(prompt):
    """Gemma 3 4B: 28 computed sliding layers (window 1024) and 5 global ones, 8 q heads of
    head dim 256 (unfused). A sliding layer's chunk n sees min(offset, 1023) + 2048 keys; a
    global one every token so far. Attention = 2 x 8 x 2048 x keys x 512 per layer."""
    cfg = load_config("Creekside__gemma-3-4b-text__variant")
    n = (prompt - 1) // 2048
    offset = (n - 1) * 2048
    f = chunk_flops(cfg, MatmulParams(total=1), _run(prompt), n)
    sliding = min(offset, 1023) + 2048
    full = offset + 2048
    assert f.attn_unfused == 2 * 8 * 2048 * 512 * (28 * sliding + 5 * full)


def _llama_ttft(prompt: int, step: int = 2048, machine: str = "M4 Max 128GB") -> float:
    cfg = load_config("meta-llama__Meta-Llama-3.1-8B")
    p = MatmulParams(total=8_030_261_248, embedding=525_336_576, lm_head=525_336_576,
                     fmt="affine4")
    w = WeightsRead(total_bytes=4_500_000_000, expert_bytes=0, embedding_bytes=300_000_000,
                    tied_embeddings=False, params=p)
    m = resolve_machine(machine)
    out = predicted_ttft(cfg, _run(prompt, step), w, m.bandwidth_gbs, compute_for(m),
                         load_calibration(), m.name)
    assert out is not None
    return out.ttft_s


def _llama_prompt(prompt: int, cal, *, cold_gpu: bool, total_bytes: int = 4_500_000_000):
    cfg = load_config("meta-llama__Meta-Llama-3.1-8B")
    p = MatmulParams(total=8_030_261_248, embedding=525_336_576, lm_head=525_336_576,
                     fmt="affine4")
    w = WeightsRead(total_bytes=total_bytes, expert_bytes=0, embedding_bytes=300_000_000,
                    tied_embeddings=False, params=p)
    m = resolve_machine("M5 Max 128GB")
    out = predicted_ttft(cfg, _run(prompt), w, m.bandwidth_gbs, compute_for(m), cal, m.name,
                         cold_gpu=cold_gpu)
    assert out is not None
    return out


@pytest.mark.parametrize("prompt", [128, 16384])
@pytest.mark.parametrize("lost", [100.0, 0.002])
def test_cold_gpu_start_slows_a_short_prefill_and_caps_a_long_one(prompt, lost):
    """A prefill that starts on an idle GPU (a harness that sleeps between trials) runs
    ``cold_gpu_slowdown`` times slower until the ramp has cost ``cold_gpu_lost_s``: with a
    slowdown of 3, a warm TTFT of t becomes 3t while 2t < the cap (every prefill here under a
    100 s cap), t + the cap after (a 2 ms cap). The re-read term is made negligible here
    (``cold_read_eta`` huge); it has its own test below."""
    base = load_calibration()
    cal = replace(base, prefill=replace(base.prefill, cold_gpu_slowdown=3.0,
                                        cold_gpu_lost_s=lost, cold_read_eta=1e12))
    warm = _llama_prompt(prompt, cal, cold_gpu=False)
    cold = _llama_prompt(prompt, cal, cold_gpu=True)
    t = warm.ttft_s
    assert 2 * t < 100.0 and 2 * t > 0.002
    assert cold.ttft_s == pytest.approx(3 * t if lost == 100.0 else t + 0.002)
    assert cold_gpu_seconds(t, 3.0, lost) == pytest.approx(cold.ttft_s - t)
    terms = {x.name: x.seconds for x in cold.terms}
    assert terms["cold_gpu_seconds"] == pytest.approx(cold.ttft_s - t)
    assert "cold_gpu_seconds" not in {x.name for x in warm.terms}  # mlxfit's own TTFT: warm


@pytest.mark.parametrize("prompt", [128, 16384])
def test_cold_gpu_rereads_the_first_chunks_weights(prompt):
    """After an idle spell the first chunk's weights stream at ``cold_read_eta`` of the
    bandwidth: with no clock ramp (slowdown 1) the cold start is exactly the first chunk's read
    bytes over that, the bytes ``--explain`` names, and it grows with the weights' size (the
    ax-engine intercept that tracks the bits), while the warm TTFT's part of it does not move
    by as much."""
    base = load_calibration()
    cal = replace(base, prefill=replace(base.prefill, cold_gpu_slowdown=1.0, cold_read_eta=0.25))
    extra = []
    for total in (4_500_000_000, 9_000_000_000):
        warm = _llama_prompt(prompt, cal, cold_gpu=False, total_bytes=total)
        cold = _llama_prompt(prompt, cal, cold_gpu=True, total_bytes=total)
        term = next(x for x in cold.terms if x.name == "cold_gpu_seconds")
        read = term.inputs["first_chunk_read_bytes"]
        bw = resolve_machine("M5 Max 128GB").bandwidth_gbs * 1e9
        assert cold.ttft_s - warm.ttft_s == pytest.approx(read / (0.25 * bw))
        assert term.seconds == pytest.approx(read / (0.25 * bw))
        extra.append(term.seconds)
    assert extra[1] > 1.5 * extra[0]  # the dense weights doubled, the embedding did not


def test_ttft_monotone_in_context_and_chunks():
    ttfts = [_llama_ttft(p) for p in (512, 2048, 4096, 16384, 65536)]
    assert ttfts == sorted(ttfts) and len(set(ttfts)) == len(ttfts)
    # more, smaller chunks for the same prompt: never faster
    by_step = [_llama_ttft(16384, s) for s in (4096, 2048, 512, 128)]
    assert by_step == sorted(by_step)


def test_every_sku_has_compute_figures():
    table = load_sku_table()
    for chip, entry in table["chips"].items():
        figs = chip_compute_figures(chip, table)
        assert set(figs) >= {"gpu_clock_mhz", "gpu_flops_per_core_cycle"}, chip
        assert set(figs) <= set(COMPUTE_KEYS)
        assert ("neural_accel_flops_per_core_cycle" in figs) == (entry["family"] == "M5"), chip
        for v in entry["variants"]:
            c = chip_compute(v["gpu_cores"], figs, 26, chip)
            assert c is not None and c.gpu_flops > 1e12


def test_neural_accelerators_only_from_macos_26():
    figs = chip_compute_figures("M5 Max")
    new, old = chip_compute(40, figs, 26, "M5 Max"), chip_compute(40, figs, 15, "M5 Max")
    assert new.neural_accel and not old.neural_accel
    assert new.matmul_flops == 4 * old.matmul_flops


def test_chunk_read_eta_charges_the_weights_a_chunk_reads():
    """A chunk's weight stream costs its bytes over chunk_read_eta x the bandwidth in the
    fixed part, nothing else: halving the efficiency doubles that part."""
    from dataclasses import replace

    from mlxfit.estimate.compute import chunk_parts

    cfg = load_config("meta-llama__Meta-Llama-3.1-8B")
    p = MatmulParams(total=8_030_261_248, embedding=525_336_576, lm_head=525_336_576,
                     fmt="affine4")
    cal = load_calibration()
    chip = compute_for(resolve_machine("M4 Max 64GB"))
    f = chunk_flops(cfg, p, _run(4097), 1)
    base = replace(cal.prefill, chunk_read_eta=0.5, per_layer_chunk_s=0.0)
    one = chunk_parts(f, chip, base, "affine4", 4.5e9, 31, bandwidth_bps=546e9)
    two = chunk_parts(f, chip, replace(base, chunk_read_eta=0.25), "affine4", 4.5e9, 31,
                      bandwidth_bps=546e9)
    assert one.fixed == pytest.approx(4.5e9 / (0.5 * 546e9))
    assert two.fixed == pytest.approx(2 * one.fixed)
    assert (two.matmul, two.attention, two.scan) == (one.matmul, one.attention, one.scan)


def test_prefill_multiplies_the_parameters_of_the_layers_it_computes():
    """Layers differ in size (Gemma-4 E2B's KV-shared layers, never computed in prefill, have
    double-wide MLPs): with each layer's dense parameters counted from the tensors, a chunk
    multiplies those of the layers it computes plus those outside the layers; without the
    counts, the uniform share computed / layers."""
    raw = config_dict("google__gemma-4-26B-A4B")
    text = {**raw["text_config"], "num_kv_shared_layers": 12}
    cfg = parse_config({**raw, "text_config": text}, act_bytes=2)
    layers = text["num_hidden_layers"]
    n = prefill_layers(cfg)
    assert n < layers - 12
    own = (100_000_000,) * (layers - 12) + (300_000_000,) * 12
    outside = 7_000_000
    p = MatmulParams(total=outside + sum(own), fmt="affine4", layer_dense=own)
    f = chunk_flops(cfg, p, _run(129), 1)
    assert f.dense == pytest.approx(2 * (outside + 100_000_000 * n) * 128)
    uniform = chunk_flops(cfg, replace(p, layer_dense=()), _run(129), 1)
    assert uniform.dense == pytest.approx(2 * (outside + sum(own)) * n / layers * 128)


def test_per_layer_chunk_cost_counts_every_layer_mlx_lm_builds():
    """mlx-lm builds every layer's graph for each prefill chunk (the GPU idle meanwhile) and
    evaluates only up to the last cache owner: Gemma-4's KV-shared layers are built, never
    computed. The per-layer chunk cost counts all of them."""
    raw = config_dict("google__gemma-4-26B-A4B")
    text = {**raw["text_config"], "num_kv_shared_layers": 12}
    cfg = parse_config({**raw, "text_config": text}, act_bytes=2)
    layers = text["num_hidden_layers"]
    assert prefill_layers(cfg) < layers - 12  # the shared layers are not computed
    cal = load_calibration()
    chip = compute_for(resolve_machine("M5 Max 128GB"))
    p = MatmulParams(total=4_000_000_000, fmt="affine4")
    run = _run(6145)  # 3 chunks

    def seconds(per_layer: float) -> float:
        c = replace(cal, prefill=replace(cal.prefill, per_layer_chunk_s=per_layer,
                                         per_expert_chunk_s=0.0))
        return prefill_seconds(cfg, p, run, chip, c, bandwidth_gbs=600.0,
                               read_bytes=1e9).seconds

    assert seconds(1.0) - seconds(0.0) == pytest.approx(3 * layers)
