"""Decode and prefill speed as sums of per-op costs (issue 25): the bytes each step reads by
kernel path, the union of experts a chunk routes to, and --explain's per-op seconds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from st_helpers import config_dict, invoke, load_config

from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.compute import chunk_read_bytes
from mlxfit.estimate.memory import Run
from mlxfit.estimate.speed import (
    decode_time_terms,
    experts_touched,
    kv_read_parts,
    predicted_decode_seconds,
    predicted_decode_terms,
    unfused_decode_flops,
)
from mlxfit.model.inputs import WeightsRead
from mlxfit.model.parse import parse_config

METAL_FUSED = (64, 96, 128, 256)


def test_experts_touched_is_the_expected_union():
    # one token: exactly k; many tokens: nearly all E; in between the uniform-routing union
    assert experts_touched(512, 10, 1) == pytest.approx(10)
    assert experts_touched(512, 10, 16) == pytest.approx(512 * (1 - (502 / 512) ** 16))
    assert experts_touched(128, 8, 2048) == pytest.approx(128, rel=1e-9)
    assert experts_touched(512, 10, 16) < experts_touched(512, 10, 128) < 512


def test_a_chunk_reads_the_dense_weights_and_the_experts_its_tokens_touch():
    """Not every expert (the old 'chunk_read_passes x all weights') and not top_k: a 16-token
    chunk of an 80B-A3B (512 experts, top 10) reads 27 % of its experts."""
    cfg = load_config("Qwen__Qwen3-Next-80B-A3B-Thinking")
    raw = config_dict("Qwen__Qwen3-Next-80B-A3B-Thinking")
    e, k = raw["num_experts"], raw["num_experts_per_tok"]
    w = WeightsRead(total_bytes=45_000_000_000, expert_bytes=42_000_000_000,
                    embedding_bytes=300_000_000, tied_embeddings=False)
    dense = 45_000_000_000 - 42_000_000_000 - 300_000_000
    for tokens in (1, 16, 128, 2048):
        share = 1 - (1 - k / e) ** tokens
        assert chunk_read_bytes(cfg, w, tokens) == pytest.approx(dense + 42e9 * share, rel=1e-9)
    assert chunk_read_bytes(cfg, w, 16) < 0.35 * 45e9


def test_mla_decode_reads_the_latent_twice_and_the_scores():
    """mlx-lm's MLA at one query (deepseek_v3.py): q_nope absorbed into the latent, then SDPA
    with the latent as K and V (head dim kv_lora_rank: no fused kernel) and pe_scores as an
    array mask: the latent read by both matmuls, k_pe once, the score array's crossings."""
    cfg = load_config("deepseek-ai__DeepSeek-V3")
    raw = config_dict("deepseek-ai__DeepSeek-V3")
    n = 4096
    fused, unfused = kv_read_parts(cfg, Run(ctx=n), fused_decode=METAL_FUSED)
    per_layer = (n * (2 * raw["kv_lora_rank"] + raw["qk_rope_head_dim"]) * 2
                 + (4 + 2) * raw["num_attention_heads"] * n * 2)
    assert fused == 0
    assert unfused == pytest.approx(raw["num_hidden_layers"] * per_layer)


def test_fused_decode_reads_the_cache_once():
    cfg = load_config("meta-llama__Meta-Llama-3.1-8B")
    raw = config_dict("meta-llama__Meta-Llama-3.1-8B")
    n = 8192
    fused, unfused = kv_read_parts(cfg, Run(ctx=n), fused_decode=METAL_FUSED)
    head = raw["hidden_size"] // raw["num_attention_heads"]
    assert unfused == 0
    assert fused == raw["num_hidden_layers"] * 2 * raw["num_key_value_heads"] * head * 2 * n


def test_decode_terms_are_the_prediction_and_each_names_its_efficiency():
    cfg = load_config("Qwen__Qwen3-30B-A3B")
    cal = load_calibration()
    w = WeightsRead(total_bytes=17_000_000_000, expert_bytes=16_000_000_000,
                    embedding_bytes=170_000_000, tied_embeddings=False)
    run = Run(ctx=4096)
    secs, _ = predicted_decode_seconds(cfg, run, w, 546.0, cal, "M4 Max")
    terms = predicted_decode_terms(cfg, run, w, 546.0, cal, "M4 Max")
    assert sum(t.seconds for t in terms) == pytest.approx(secs)
    by = {t.name: t.seconds for t in terms}
    slower = replace(cal.decode, expert_eta=cal.decode.expert_eta / 2)
    by2 = {t.name: t.seconds for t in decode_time_terms(cfg, run, w, 546.0, slower,
                                                        fused_decode=METAL_FUSED)}
    assert by2["decode_expert_weights_seconds"] == pytest.approx(
        2 * by["decode_expert_weights_seconds"])
    assert {k: v for k, v in by2.items() if k != "decode_expert_weights_seconds"} == \
        pytest.approx({k: v for k, v in by.items() if k != "decode_expert_weights_seconds"})
    routed = 16e9 * 8 / 128
    assert by["decode_expert_weights_seconds"] == pytest.approx(
        routed / (cal.decode.expert_eta * 546e9), rel=1e-6)


def test_explain_shows_the_decode_terms():
    r = invoke("fit", "mlx-community/Qwen3-30B-A3B-4bit", "--machine", "M4 Max 64GB",
               "--ctx", "8192", "--explain")
    assert r.exit_code == 0, r.output
    assert "decode time per token" in r.output
    for name in ("decode_dense_weights_seconds", "decode_expert_weights_seconds",
                 "decode_attention_fused_seconds", "decode_fixed_seconds"):
        assert name in r.output


def test_unfused_decode_reads_each_kv_head_once_per_query_head_sharing_it():
    """MLX's fallback and mlx-lm's Gemma 2 attention broadcast K and V over the query heads of
    a group: one-row matvecs per query head, each streaming its K/V head (16 query heads on 8
    KV heads: twice). With one KV head MLX folds the broadcast into the rows: read once."""
    raw = config_dict("google__gemma-2-9b-it")
    n = raw["sliding_window"]  # every layer attends n keys, windowed or not
    layers, heads, kv, dim = (raw["num_hidden_layers"], raw["num_attention_heads"],
                              raw["num_key_value_heads"], raw["head_dim"])
    scores = (4 + 2) * heads * n * 2  # QK^T, softmax read+write, PV; softcap's tanh read+write
    for kv_heads, rereads in ((kv, heads // kv), (1, 1)):
        cfg = parse_config({**raw, "num_key_value_heads": kv_heads}, act_bytes=2)
        fused, unfused = kv_read_parts(cfg, Run(ctx=n), fused_decode=METAL_FUSED)
        cache = 2 * kv_heads * dim * n * 2
        assert fused == 0
        assert unfused == pytest.approx(layers * (cache * rereads + scores))



GEMMA4 = json.loads((Path(__file__).parent / "fixtures" / "families" / "gemma4_text.json")
                    .read_text())


def _gemma4(**over):
    return parse_config({**GEMMA4, **over}, where="config.json")


@pytest.mark.parametrize("ctx", [6, 64, 4096])
def test_kv_shared_layers_read_the_cache_they_share(ctx):
    """Gemma 3n/4's last num_kv_shared_layers layers own no cache but run their attention over
    the last earlier cache of their type: a decode token reads, and the unfused ones multiply,
    what the same layers would if each owned that cache. Until issue 25's round 5 they were
    skipped: the fixture's 4 shared layers of 10 read nothing."""
    shared = _gemma4()
    owning = _gemma4(num_kv_shared_layers=0)
    assert sum(1 for ly in shared.layers if ly.attn and not ly.attn.cache.owns_memory) == 4
    run = Run(ctx=ctx, backend="metal")
    for dims in (METAL_FUSED, (32, 96, 128)):  # the global head dim (64) fused, then not
        got = kv_read_parts(shared, run, fused_decode=dims)
        assert got == pytest.approx(kv_read_parts(owning, run, fused_decode=dims))
        assert sum(got) > 0
        assert unfused_decode_flops(shared, run, dims) == pytest.approx(
            unfused_decode_flops(owning, run, dims))
    # more than the six cache owners alone read
    owners = _gemma4(num_kv_shared_layers=0, num_hidden_layers=6,
                     layer_types=GEMMA4["layer_types"][:6])
    assert (sum(kv_read_parts(shared, run, fused_decode=METAL_FUSED))
            > sum(kv_read_parts(owners, run, fused_decode=METAL_FUSED)))
