"""Batched generation (estimate/batched.py) and the serve plan (verbs/serve_plan.py).

The batched rules, from mlx-lm 0.32.2 (docs/serving.md): B prompts prefill a chunk as one
(B, L) tensor, so their activations are activations_term at B x L tokens (the device floor once);
scores, keys copy and growth copy are per prompt; BatchKVCache holds every sequence's cache;
base allocations exist once. Worked by hand below from the model's dimensions and the
calibration constants (read from calibration.toml, never pasted)."""

from __future__ import annotations

import ast
import importlib.util
import json
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
from st_helpers import invoke, load_config

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.batched import (
    batched_decode_phase,
    batched_peak_phase,
    batched_prefill_phase,
    batched_step,
    compute_seconds,
    decode_flops,
)
from mlxfit.estimate.compute import format_efficiency
from mlxfit.estimate.memory import Run, activations_term, prefill_phase, scores_term
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.model.inputs import model_inputs
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.edges import compute_for

CAL = load_calibration()
METAL = CAL.backend("metal")
Q8B = "mlx-community/Qwen3-8B-4bit"
PRO48 = "M4 Pro 48GB"
# Qwen3-8B: 36 layers x 8 KV heads x (128 + 128) x bf16 per token.
Q8B_KV_PER_TOKEN = 36 * 8 * 256 * 2


def _terms(ph):
    return {t.name: t.bytes for t in ph.terms}


def test_qwen3_8b_prefill_of_four_prompts_by_hand():
    """Qwen3-8B, 8192-token prompts in 2048-token chunks, 4 prompts together, last chunk
    (mlx-lm prefills all but the last prompt token: chunks of 2048, 2048, 2048, 2047):
    - caches: 4 x 8192 (8191 in 256-token steps) x 147,456 B;
    - activations: 4 x 2047 tokens x 2 B x (act_hidden x 4096 + act_q x 4096) (the MLP
      and MoE widths have zero weight on Metal), or the floor if larger - once, not 4 times;
    - scores: head_dim 128 is fused on Metal: none; keys copy: act_kv = 0 on Metal;
    - growth copy: 4 x 0.88 x one layer's 6144 cached tokens (8 heads x 256 x 2 B each);
    - base once."""
    cfg = load_config("Qwen__Qwen3-8B")
    run = Run(ctx=8192)
    ph = batched_prefill_phase(cfg, run, METAL, 4, 4)
    t = _terms(ph)
    assert ph.kv_bytes == 4 * 8192 * Q8B_KV_PER_TOKEN
    per_tok = 2.0 * (METAL.act_hidden * 4096 + METAL.act_q * 4096)
    assert t["activations"] == int(max(4 * 2047 * per_tok, METAL.act_floor))
    assert t["attention_scores"] == 0 and t["kv_keys_copy"] == 0
    assert t["kv_growth_copy"] == 4 * int(METAL.growth_copy_layers * 6144 * 8 * 256 * 2)
    assert t["base"] == int(METAL.base_bytes)
    one = _terms(prefill_phase(cfg, run, METAL, 4))
    # Not the single prompt's transient x 4: the activation floor is shared.
    assert t["activations"] < 4 * one["activations"]


def test_gemma3_prefill_of_two_prompts_by_hand():
    """Gemma 3 4B (8 heads of 256: unfused attention on Metal; 29 sliding layers of 1024 and 5
    global ones), 4096 tokens in chunks of 2048 and 2047, 2 prompts, last chunk. The scores
    are one score matrix per prompt, the global layers' being the largest: 2 x (8 heads x 2047
    queries x 4095 keys x 2 B + the bool mask 2047 x 4095); the activations of 2 x 2047 tokens
    are one tensor; the caches count twice."""
    cfg = load_config("Creekside__gemma-3-4b-text__variant")
    run = Run(ctx=4096)
    ph = batched_prefill_phase(cfg, run, METAL, 2, 2)
    one = prefill_phase(cfg, run, METAL, 2)
    t, o = _terms(ph), _terms(one)
    sc = scores_term(cfg, run, 2, METAL, False)
    assert (sc.inputs["keys"], sc.inputs["chunk"], sc.inputs["unfused"]) == (4095, 2047, True)
    assert t["attention_scores"] == 2 * int(METAL.score_arrays * 8 * 2047 * 4095 * 2
                                            + 2047 * 4095)
    assert t["activations"] == activations_term(cfg, 2 * 2047, METAL).bytes
    assert ph.kv_bytes == 2 * one.kv_bytes
    assert t["base"] == o["base"]


def test_decode_phase_counts_every_sequence_and_base_once():
    cfg = load_config("Qwen__Qwen3-8B")
    run = Run(ctx=8192)
    one, five = batched_decode_phase(cfg, run, METAL, 1), batched_decode_phase(cfg, run, METAL, 5)
    o, f = _terms(one), _terms(five)
    assert five.kv_bytes == 5 * 8192 * Q8B_KV_PER_TOKEN == 5 * one.kv_bytes
    assert f["logits"] == 5 * cfg.vocab * 4 * 2 and f["kv_growth_copy"] == 5 * o["kv_growth_copy"]
    assert f["base"] == o["base"]


def test_peak_holds_the_other_sequences_caches_while_a_batch_prefills():
    """12 sequences, 8 prefilled together: a prefill candidate carries the 4 others' caches."""
    cfg = load_config("Qwen__Qwen3-8B")
    run = Run(ctx=8192)
    peak = batched_peak_phase(cfg, run, METAL, 12, 8)
    pre = batched_prefill_phase(cfg, run, METAL, 4, 8)
    assert peak.total_over_weights >= pre.total_over_weights + 4 * 8192 * Q8B_KV_PER_TOKEN
    assert peak.total_over_weights >= batched_decode_phase(cfg, run, METAL, 12).total_over_weights


def test_fit_parallel_adds_exactly_the_batched_peak():
    """fit --parallel N: total = weights + one sequence's peak + (N-1) caches + the batched
    transient, which together are the batched peak phase."""
    one = mlxfit.fit(Q8B, 8192, machine="M4 Max 128GB")
    r = mlxfit.fit(Q8B, 8192, machine="M4 Max 128GB", parallel=4, prompt_cache=0)
    cfg = load_config("Qwen__Qwen3-8B")
    peak = batched_peak_phase(cfg, r.run, METAL, 4, 4)
    assert r.total_bytes == one.weights_bytes + peak.total_over_weights
    terms = {t.name: t.bytes for t in r.extra_terms}
    assert terms["parallel_kv"] == 3 * 8192 * Q8B_KV_PER_TOKEN


# --------------------------------------------------------------------------- speed


@pytest.fixture(scope="module")
def q8b():
    return model_inputs(resolve_model(Q8B))


def test_throughput_is_monotone_and_saturates(q8b):
    m = resolve_machine("M4 Max 128GB")
    chip = compute_for(m)
    run = Run(ctx=4096)
    steps = [batched_step(q8b.cfg, run, q8b.weights, m.bandwidth_gbs, CAL, m.name, n,
                          compute=chip) for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    agg = [s.aggregate_tps for s in steps]
    per = [s.per_sequence_tps for s in steps]
    assert all(b >= a for a, b in pairwise(agg))
    assert all(b <= a for a, b in pairwise(per))
    # The ceiling: each further sequence costs one token's matmul FLOPs over the peak at the
    # fitted efficiency, plus its attention (memory-bound at this context: its KV read).
    mm, at = compute_seconds(q8b.cfg, run, q8b.weights, chip, CAL, 1)
    assert at < steps[0].kv_seconds
    ceiling = 1.0 / (mm + steps[0].kv_seconds)
    assert all(a < ceiling for a in agg)
    assert agg[-1] > 0.9 * ceiling and steps[-1].bound == "compute"
    assert steps[0].bound == "memory"
    # One sequence is fit's decode estimate.
    r = mlxfit.fit(Q8B, 4096, machine="M4 Max 128GB")
    assert steps[0].aggregate_tps == pytest.approx(r.predicted_decode_tps, rel=1e-12)


def test_batched_step_by_hand(q8b):
    """Qwen3-8B (dense) at 2,000 tokens, 6 sequences on an M4 Pro: the weights once, six KV
    reads (longer than their attention FLOPs here), the fixed per-layer costs, five tokens'
    matmul FLOPs and the batched path's per-layer cost (calibration.toml [decode]
    batch_per_layer_s x 36 layers); one sequence pays neither."""
    m = resolve_machine(PRO48)
    chip = compute_for(m)
    run = Run(ctx=2000)
    one = batched_step(q8b.cfg, run, q8b.weights, m.bandwidth_gbs, CAL, m.name, 1, compute=chip)
    six = batched_step(q8b.cfg, run, q8b.weights, m.bandwidth_gbs, CAL, m.name, 6, compute=chip)
    mm, at = compute_seconds(q8b.cfg, run, q8b.weights, chip, CAL, 1)
    kv1 = one.kv_seconds
    assert 6 * at < 6 * kv1
    assert six.weights_seconds == one.weights_seconds  # dense: no expert union
    assert six.kv_seconds == pytest.approx(6 * kv1)
    assert six.batch_seconds == pytest.approx(36 * CAL.decode.batch_per_layer_s)
    assert one.batch_seconds == 0.0
    want = one.step_seconds + 5 * kv1 + 5 * mm + 36 * CAL.decode.batch_per_layer_s
    assert six.step_seconds == pytest.approx(want, rel=1e-9)
    # The constant moves the batched step and only it.
    cal2 = replace(CAL, decode=replace(CAL.decode, batch_per_layer_s=0.0))
    six0 = batched_step(q8b.cfg, run, q8b.weights, m.bandwidth_gbs, cal2, m.name, 6, compute=chip)
    one0 = batched_step(q8b.cfg, run, q8b.weights, m.bandwidth_gbs, cal2, m.name, 1, compute=chip)
    assert six0.step_seconds == pytest.approx(six.step_seconds - six.batch_seconds)
    assert one0.step_seconds == one.step_seconds


def test_moe_step_reads_the_union_of_routed_experts():
    """A MoE batch reads E x (1 - (1 - k/E)^B) distinct experts per layer: Qwen3-30B-A3B
    (128 experts, top 8) at 4 sequences reads the expert bytes x (1 - (120/128)^4), not x 8/128."""
    inp = model_inputs(resolve_model("mlx-community/Qwen3-30B-A3B-4bit"))
    m = resolve_machine(PRO48)
    run = Run(ctx=1000)
    one = batched_step(inp.cfg, run, inp.weights, m.bandwidth_gbs, CAL, m.name, 1)
    four = batched_step(inp.cfg, run, inp.weights, m.bandwidth_gbs, CAL, m.name, 4)
    e = inp.weights.expert_bytes
    assert inp.cfg.num_experts == 128 and inp.cfg.top_k == 8
    extra = four.weights_read_bytes - one.weights_read_bytes
    assert abs(extra - e * ((1 - (120 / 128) ** 4) - 8 / 128)) <= 1


def test_decode_flops_by_hand(q8b):
    """Qwen3-8B (untied): 2 x (parameters - embedding - lookup), the head included, and
    36 layers x 2 x 32 q heads x (128 + 128) x 1000 keys; over the peak at eff_affine4 and
    attn_eff, x sequences."""
    run = Run(ctx=1000)
    p = q8b.weights.params
    dense, routed, attn = decode_flops(q8b.cfg, run, q8b.weights)
    assert routed == 0
    assert dense == 2.0 * (p.total - p.embedding - p.lookup - p.experts)
    assert attn == 36 * 2.0 * 32 * 256 * 1000
    chip = compute_for(resolve_machine("M4 Max 128GB"))
    pc = CAL.prefill
    eff = format_efficiency(pc, p.fmt)
    assert p.fmt == "affine4"
    mm, at = compute_seconds(q8b.cfg, run, q8b.weights, chip, CAL, 3)
    assert mm == pytest.approx(3 * dense / eff / chip.tensor_peak(pc))
    assert at == pytest.approx(3 * attn / pc.attn_eff / chip.tensor_peak(pc))


# --------------------------------------------------------------------------- the plan


@pytest.fixture(scope="module")
def plan():
    return mlxfit.serve_plan(Q8B, 32768, machine=PRO48)


def test_plan_concurrency_fits_and_one_more_does_not(plan):
    n, k = plan.concurrency, plan.prompt_cache_size
    assert n >= 1
    at = mlxfit.fit(Q8B, 32768, machine=PRO48, parallel=n, prompt_cache=k)
    assert at.runs
    assert not mlxfit.fit(Q8B, 32768, machine=PRO48, parallel=n + 1, prompt_cache=0).runs
    assert n == plan.max_concurrency


def test_plan_numbers_are_fits_at_n(plan):
    n, k = plan.concurrency, plan.prompt_cache_size
    r = mlxfit.fit(Q8B, 32768, machine=PRO48, parallel=n, prompt_cache=k)
    assert plan.result.total_bytes == r.total_bytes
    assert plan.aggregate_tps == r.serving.batched_decode.aggregate_tps
    assert plan.per_user_tps == r.serving.batched_decode.per_sequence_tps
    for row in plan.rows:
        f = mlxfit.fit(Q8B, 32768, machine=PRO48, parallel=row.concurrency, prompt_cache=k)
        assert row.total_bytes == f.total_bytes and row.fits == f.runs
    # The cache left: k more sequences' caches did fit, k + 1 would not (or k is the default).
    head = plan.usable_bytes - mlxfit.fit(Q8B, 32768, machine=PRO48, parallel=n,
                                          prompt_cache=0).total_bytes
    assert k * plan.bytes_per_cached_prompt <= head
    assert k == 10 or (k + 1) * plan.bytes_per_cached_prompt > head
    assert plan.prompt_cache_bytes == (k + n) * plan.bytes_per_cached_prompt


def test_plan_with_users_plans_for_them():
    p = mlxfit.serve_plan(Q8B, 8192, machine=PRO48, users=3)
    assert p.concurrency == 3 and p.max_concurrency > 3
    assert "--decode-concurrency 3 --prompt-concurrency 3" in p.command
    over = mlxfit.serve_plan(Q8B, 32768, machine=PRO48, users=100)
    # the unmet --users is the headline and the exit code (ux-3 F14), no longer a warning
    assert over.concurrency < 100 and not over.fits


def _server_flags() -> set[str]:
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mlx-lm is not installed: no server source to compare with")
    src = Path(next(iter(spec.submodule_search_locations))) / "server.py"
    return {node.args[0].value for node in ast.walk(ast.parse(src.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument" and node.args
            and isinstance(node.args[0], ast.Constant)}


def test_plan_command_uses_only_flags_the_server_accepts(plan):
    words = plan.command.split()
    assert words[0] == "mlx_lm.server"
    flags = {w for w in words if w.startswith("--")}
    assert {"--decode-concurrency", "--prompt-concurrency", "--prompt-cache-size",
            "--prompt-cache-bytes"} <= flags
    assert flags <= _server_flags()


def test_plan_warns_where_the_server_does_not_bound_memory(plan):
    text = " ".join(plan.warnings)
    assert "--prompt-cache-bytes is enforced only when a request joins a running batch" in text
    assert "--draft-model" in text


def test_cli_serve_plan_json_and_text():
    r = invoke("serve-plan", Q8B, "--ctx", "32768", "--machine", PRO48, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["concurrency"] >= 1 and d["command"].startswith("mlx_lm.server")
    assert d["fit"]["total_bytes"] == d["total_bytes"]
    assert [row["concurrency"] for row in d["table"]][-1] == d["concurrency"] + 1
    t = invoke("serve-plan", Q8B, "--ctx", "32768", "--machine", PRO48)
    assert t.exit_code == 0, t.output
    assert "mlx_lm.server --model mlx-community/Qwen3-8B-4bit" in t.output
    assert "tok/s per user" in t.output


def test_cli_serve_plan_bad_users_is_one_line():
    r = invoke("serve-plan", Q8B, "--machine", PRO48, "--users", "0")
    assert r.exit_code == 2
    assert "--users must be between 1 and 4096" in r.output


def test_fit_warns_that_a_served_draft_model_has_no_byte_cap():
    r = mlxfit.fit(Q8B, 8192, machine="M4 Max 128GB", prompt_cache=2,
                   draft_model="mlx-community/Qwen3-4B-Instruct-2507-4bit")
    assert any("never applies --prompt-cache-bytes" in w for w in r.warnings)
    assert r.serving.batched is False


def test_plan_for_a_model_the_server_cannot_batch():
    """Llama 4's chunked attention (ChunkedKVCache) has no merge(): one request at a time."""
    p = mlxfit.serve_plan("mlx-community/Llama-4-Scout-17B-16E-Instruct-4bit", 16384,
                          machine="M4 Max 128GB", users=4)
    assert not p.batched and p.concurrency == 1 and p.prompt_cache_bytes is None
    assert "--prompt-cache-bytes" not in p.command
    assert "one request at a time" in p.warnings[0]
