"""Serving budgets (--parallel, --prompt-cache, --draft-model) and the single-buffer check.

Every byte is checked against a plain fit of the same model (same core), or worked by hand from
the model's dimensions (Qwen3-8B: 36 layers x 8 KV heads x 128 head dim, bf16 cache)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest
from st_helpers import invoke, runner

import mlxfit
from mlxfit.cli.app import app
from mlxfit.errors import UsageError
from mlxfit.estimate.batched import batched_step
from mlxfit.estimate.serving import SERVER_PROMPT_CACHE_SIZE
from mlxfit.model.inputs import model_inputs, weight_buffers
from mlxfit.model.tensors import TensorInfo
from mlxfit.render.fit import fit_to_json

Q8B = "mlx-community/Qwen3-8B-4bit"
Q4B = "mlx-community/Qwen3-4B-Instruct-2507-4bit"
GEMMA = "mlx-community/gemma-3-27b-it-4bit"
QWEN35 = "mlx-community/Qwen3.5-9B-MLX-8bit"
BIG = "M4 Max 128GB"
Q8B_KV_PER_TOKEN = 36 * 8 * 128 * 2 * 2  # layers x kv heads x head dim x (K+V) x bf16


def _terms(r):
    return {t.name: t.bytes for t in r.extra_terms}


def _sum_ok(r):
    assert r.total_bytes == (r.weights_bytes + r.kv_bytes + r.state_bytes + r.transient_bytes
                             + sum(t.bytes for t in r.extra_terms))


def test_plain_run_has_no_serving_terms():
    r = mlxfit.fit(Q8B, 8192, machine=BIG)
    assert r.extra_terms == () and r.serving.mode is None
    assert r.serving.command.startswith("mlx_lm.generate --model mlx-community/Qwen3-8B-4bit")
    _sum_ok(r)


def test_parallel_kv_is_one_cache_per_sequence():
    one = mlxfit.fit(Q8B, 8192, machine=BIG)
    r = mlxfit.fit(Q8B, 8192, machine=BIG, parallel=4, prompt_cache=0)
    t = _terms(r)
    assert one.kv_bytes == 8192 * Q8B_KV_PER_TOKEN
    assert t["parallel_kv"] == 3 * one.kv_bytes
    assert "prompt_cache" not in t
    _sum_ok(r)
    assert r.serving.mode == "mlx_lm.server" and r.serving.batched is True
    assert "--decode-concurrency 4 --prompt-concurrency 4 --prompt-cache-size 0" in \
        r.serving.command


def test_prefill_batch_is_capped_by_prompt_concurrency():
    """The prefill batch is min(parallel, mlx_lm.server's --prompt-concurrency default 8); the
    batched transient's own arithmetic is worked by hand in test_batched.py."""
    r4 = mlxfit.fit(Q8B, 8192, machine=BIG, parallel=4, prompt_cache=0)
    r16 = mlxfit.fit(Q8B, 8192, machine=BIG, parallel=16, prompt_cache=0)
    assert r4.serving.prefill_batch == 4 and r16.serving.prefill_batch == 8
    assert _terms(r16)["batched_transient"] >= _terms(r4)["batched_transient"] > 0


def test_prompt_cache_default_is_mlx_lm_servers_ten():
    one = mlxfit.fit(Q8B, 8192, machine=BIG)
    r = mlxfit.fit(Q8B, 8192, machine=BIG, parallel=2)
    assert _terms(r)["prompt_cache"] == 10 * one.kv_bytes
    assert r.serving.prompt_cache_default is True
    r3 = mlxfit.fit(Q8B, 8192, machine=BIG, prompt_cache=3)  # a server with one sequence
    assert _terms(r3) == {"prompt_cache": 3 * one.kv_bytes}
    assert r3.serving.mode == "mlx_lm.server" and r3.serving.parallel == 1


def _mlx_lm_server_default(flag: str):
    """The argparse default of one flag of mlx_lm.server's main(), read from its source (the
    parser is built inside main(); importing mlx_lm would import mlx). Skips without mlx-lm."""
    spec = importlib.util.find_spec("mlx_lm")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mlx-lm is not installed: no server source to compare with")
    src = Path(next(iter(spec.submodule_search_locations))) / "server.py"
    for node in ast.walk(ast.parse(src.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == flag):
            return next(ast.literal_eval(k.value) for k in node.keywords if k.arg == "default")
    raise AssertionError(f"{src} has no {flag} argument")


def test_server_defaults_are_mlx_lm_servers():
    """SERVER_PROMPT_CACHE_SIZE and the prefill batch cap are mlx_lm.server's own defaults."""
    assert SERVER_PROMPT_CACHE_SIZE == _mlx_lm_server_default("--prompt-cache-size")
    r16 = mlxfit.fit(Q8B, 8192, machine=BIG, parallel=16, prompt_cache=0)
    assert r16.serving.prefill_batch == _mlx_lm_server_default("--prompt-concurrency")


def test_serving_max_context_is_solved_with_the_serving_terms():
    r = mlxfit.fit(Q8B, 32768, machine="M4 Pro 24GB", parallel=2, prompt_cache=1)
    n = r.max_safe_context
    assert 0 < n < mlxfit.fit(Q8B, 32768, machine="M4 Pro 24GB").max_safe_context
    at = mlxfit.fit(Q8B, n, machine="M4 Pro 24GB", parallel=2, prompt_cache=1)
    over = mlxfit.fit(Q8B, n + 1, machine="M4 Pro 24GB", parallel=2, prompt_cache=1)
    # the largest safe context is where the upper peak bound fits (issue 27)
    assert at.verdict == "fits" and over.verdict != "fits"


def test_draft_adds_its_weights_and_kv():
    main = mlxfit.fit(Q8B, 16384, machine=BIG)
    draft = mlxfit.fit(Q4B, 16384, machine=BIG)
    r = mlxfit.fit(Q8B, 16384, machine=BIG, draft_model=Q4B)
    t = _terms(r)
    assert t["draft_weights"] == draft.weights_bytes
    assert t["draft_kv_cache"] == draft.kv_bytes + draft.state_bytes
    assert t["draft_prefill"] == 0  # the main model's peak (+ the draft's cache) is higher
    assert r.total_bytes == main.total_bytes + draft.weights_bytes + draft.kv_bytes
    assert "--draft-model mlx-community/Qwen3-4B-Instruct-2507-4bit" in r.serving.command
    assert r.serving.mode == "mlx_lm.generate"
    assert any("speculative speed-up" in w for w in r.warnings)


def test_draft_drops_max_kv_size_like_mlx_lm():
    r = mlxfit.fit(Q8B, 16384, machine=BIG, draft_model=Q4B, max_kv_size=4096)
    assert r.run.max_kv_size is None
    assert r.kv_bytes == 16384 * Q8B_KV_PER_TOKEN
    assert any("--max-kv-size is dropped" in w for w in r.warnings)


def test_draft_warns_for_sliding_window_models():
    r = mlxfit.fit(GEMMA, 8192, machine=BIG, draft_model=GEMMA)
    assert any("no longer trimmable" in w for w in r.warnings)


@pytest.mark.parametrize("kw, needle", [
    ({"model": QWEN35, "draft_model": Q4B}, "trimmable"),
    ({"parallel": 2, "kv_bits": 8}, "one at a time when kv_bits is set"),
    ({"parallel": 2, "draft_model": Q4B}, "one at a time when a draft model is loaded"),
    ({"parallel": 2, "max_kv_size": 4096}, "mlx_lm.server has no such flag"),
    ({"prompt_cache": 2, "max_kv_size": 4096}, "mlx_lm.server has no such flag"),
    ({"parallel": 0}, "parallel must be"),
    ({"prompt_cache": -1}, "prompt_cache must be"),
])
def test_impossible_serving_setups_are_usage_errors(kw, needle):
    model = kw.pop("model", Q8B)
    with pytest.raises(UsageError, match=needle):
        mlxfit.fit(model, 8192, machine=BIG, **kw)


def test_batched_decode_estimate():
    r = mlxfit.fit(Q8B, 8192, machine=BIG)
    from mlxfit.calibration.load import load_calibration
    from mlxfit.sources.resolve import resolve_model

    src = resolve_model(Q8B)
    inp = model_inputs(src)
    from mlxfit.verbs.edges import compute_for, machine_for

    cal = load_calibration()
    chip = compute_for(machine_for(BIG))  # fit passes the chip's compute: FLOPs add per sequence
    one = batched_step(inp.cfg, r.run, inp.weights, r.bandwidth_gbs, cal, r.machine_name, 1,
                         compute=chip)
    assert one.per_sequence_tps == pytest.approx(r.predicted_decode_tps, rel=1e-12)
    four = batched_step(inp.cfg, r.run, inp.weights, r.bandwidth_gbs, cal, r.machine_name, 4,
                          compute=chip)
    assert four.per_sequence_tps < one.per_sequence_tps
    assert four.aggregate_tps == pytest.approx(4 * four.per_sequence_tps)
    # Weights are read once per step for all four (dense: no expert union): at 8K tokens the
    # four KV reads, three tokens' FLOPs and the batched path still leave ~2x the single stream.
    assert four.weights_seconds == one.weights_seconds
    assert four.aggregate_tps > 1.9 * one.per_sequence_tps
    served = mlxfit.fit(Q8B, 8192, machine=BIG, parallel=4, prompt_cache=0)
    assert served.serving.batched_decode.aggregate_tps == pytest.approx(
        four.aggregate_tps)


def test_one_batched_sequence_is_fits_decode_on_an_ultra_with_wide_gqa():
    """The batched estimate shares fit's decode factors: Qwen2.5-7B (28 q / 4 kv heads, gqa 7)
    on an M3 Ultra takes the Ultra efficiency and the gqa > 4 KV-read penalty in both."""
    model, machine = "mlx-community/Qwen2.5-7B-Instruct-4bit", "M3 Ultra 512GB"
    r = mlxfit.fit(model, 32768, machine=machine)
    from mlxfit.calibration.load import load_calibration
    from mlxfit.sources.resolve import resolve_model

    inp = model_inputs(resolve_model(model))
    cal = load_calibration()
    one = batched_step(inp.cfg, r.run, inp.weights, r.bandwidth_gbs, cal, machine, 1)
    assert one.per_sequence_tps == pytest.approx(r.predicted_decode_tps, rel=1e-12)
    # The same bandwidth under a non-Ultra name: neither Ultra factor applies.
    plain = batched_step(inp.cfg, r.run, inp.weights, r.bandwidth_gbs, cal, "M3 Max", 1)
    assert plain.per_sequence_tps > one.per_sequence_tps


def test_moe_batched_decode_reads_more_experts():
    r = mlxfit.fit("mlx-community/Qwen3-30B-A3B-4bit", 4096, machine=BIG)
    from mlxfit.calibration.load import load_calibration
    from mlxfit.sources.resolve import resolve_model

    inp = model_inputs(resolve_model("mlx-community/Qwen3-30B-A3B-4bit"))
    cal = load_calibration()
    one = batched_step(inp.cfg, r.run, inp.weights, r.bandwidth_gbs, cal, r.machine_name, 1)
    eight = batched_step(inp.cfg, r.run, inp.weights, r.bandwidth_gbs, cal, r.machine_name, 8)
    # 8 tokens x top-8 of 128 experts: 1 - (1 - 8/128)^8 = 40.3% of the experts read.
    frac = 1 - (1 - 8 / 128) ** 8
    expected = one.weights_read_bytes + int(inp.weights.expert_bytes * (frac - 8 / 128))
    assert eight.weights_read_bytes == expected


# --------------------------------------------------------------------------- buffers

G12 = "mlx-community/gemma-3-12b-it-4bit"
OVER = {"machine": "M3 Ultra 256GB", "prefill_step_size": 50000}


def test_oversize_score_array_is_flagged_even_when_the_total_fits():
    """Gemma 3 12B (16 heads, head_dim 256: unfused on Metal) at 100,001 tokens in 50,000-token
    chunks: the second chunk's scores are 16 heads x 50000 x 100000 keys x 2 B = 160 GB, over
    the 256 GB Mac's maxBufferLength (0.5625 x 256 GiB = 154.6 GB) while the total fits."""
    r = mlxfit.fit(G12, 100001, **OVER)
    assert r.fits and not r.runs
    (b,) = r.oversize_buffers
    assert b.name == "attention (prefill)"
    assert b.bytes == 16 * 50000 * 100000 * 2
    assert r.max_buffer_bytes == int(256 * 2**30 * 0.5625)
    assert any("Metal cannot allocate it even though the total fits" in w for w in r.warnings)
    d = fit_to_json(r)
    assert d["runs"] is False and d["buffers"][0]["over_limit"] is True


def test_buffer_limits_the_largest_safe_context():
    r = mlxfit.fit(G12, 100001, **OVER)
    n = r.max_safe_context
    assert 0 < n < 100001
    assert mlxfit.fit(G12, n, **OVER).runs
    assert not mlxfit.fit(G12, n + 1, **OVER).runs


def test_fused_attention_has_no_score_buffer():
    r = mlxfit.fit(Q4B, 65536, machine=BIG, prefill_step_size=26000)  # bf16 cache: fused SDPA
    assert all(b.name != "attention (prefill)" for b in r.buffers)
    assert r.runs


def test_kv_layer_buffer_counts_every_parallel_sequence():
    r = mlxfit.fit(Q8B, 8192, machine=BIG, parallel=4, prompt_cache=0)
    kv = next(b for b in r.buffers if b.name.startswith("kv cache"))
    assert kv.bytes == 4 * 8 * 8192 * 128 * 2


def test_per_expert_tensors_count_as_one_stacked_array():
    ts = [TensorInfo.of(f"model.layers.0.mlp.experts.{e}.gate_proj.weight", "BF16", [768, 2048])
          for e in range(8)]
    ts.append(TensorInfo.of("model.embed_tokens.weight", "BF16", [1000, 2048]))
    top = weight_buffers(ts)
    assert top[0].name == "weight model.layers.0.mlp.experts.*.gate_proj.weight"
    assert top[0].bytes == 8 * 768 * 2048 * 2
    assert top[1].bytes == 1000 * 2048 * 2


def test_cli_serving_flags_and_json():
    r = runner.invoke(app, ["fit", Q8B, "--ctx", "8192", "--machine", BIG, "--parallel", "4",
                            "--prompt-cache", "2", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["schema_version"] == 2
    serving = {t["name"]: t["bytes"] for t in d["serving_terms"]}
    assert set(serving) == {"parallel_kv", "batched_transient", "prompt_cache"}
    assert {t["name"]: t["bytes"] for t in d["terms"]}["prompt_cache"] == 2 * d["kv_bytes"]
    assert d["serving"]["parallel"] == 4 and d["command"].startswith("mlx_lm.server")
    assert d["total_bytes"] == (d["weights_bytes"] + d["kv_bytes"] + d["state_bytes"]
                                + d["transient_bytes"] + sum(serving.values()))


def test_cli_serving_report():
    r = runner.invoke(app, ["fit", Q8B, "--ctx", "8192", "--machine", BIG, "--parallel", "4"])
    assert r.exit_code == 0, r.output
    for s in ("parallel kv", "batched transient", "prompt cache", "mlx_lm.server",
              "10 cached prompts (mlx_lm.server's default --prompt-cache-size)",
              "batched decode (memory-bound at 4 sequences)"):
        assert s in r.output, s


def test_cli_draft_model():
    r = runner.invoke(app, ["fit", Q8B, "--ctx", "8192", "--machine", BIG,
                            "--draft-model", Q4B])
    assert r.exit_code == 0, r.output
    assert "draft weights" in r.output and "draft kv cache" in r.output
    assert "speculative decoding: draft mlx-community/Qwen3-4B-Instruct-2507-4bit" in r.output


def test_cli_oversize_buffer_exits_one():
    r = runner.invoke(app, ["fit", G12, "--ctx", "100001", "--machine", "M3 Ultra 256GB",
                            "--prefill-step-size", "50000"])
    assert r.exit_code == 1, r.output
    assert "LARGEST BUFFER" in r.output


def test_serve_plan_puts_unmet_users_first_and_exits_1():
    # ux-3 F14: the question asked (--users 8) is answered on line 1, and the exit code says it
    args = ("serve-plan", "mlx-community/Qwen3-8B-4bit", "--ctx", "32k", "--machine",
            "M2 Max 32GB")
    r = invoke(*args, "--users", "8")
    assert r.exit_code == 1
    first = r.stdout.splitlines()[0]
    assert "--users 8 does not fit" in first and "at most 4 concurrent" in first
    d = json.loads(invoke(*args, "--users", "8", "--json").stdout)
    assert (d["fits"], d["concurrency"], d["users"]) == (False, 4, 8)
    ok = invoke(*args, "--users", "4")
    assert ok.exit_code == 0 and "as asked (--users 4)" in ok.stdout.splitlines()[0]


def test_serve_plan_memory_line_is_the_sum_it_prints():
    r = invoke("serve-plan", "mlx-community/Qwen3-8B-4bit", "--ctx", "8k", "--users", "4",
               "--machine", "M2 Max 32GB")
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("memory at 4:"))
    total, parts = line.split(" usable = ")
    shown = [float(p.rsplit(" ", 2)[-2]) for p in parts.split(" + ")]
    assert "cached prompts" in parts and "request caches" in parts and "transient" in parts
    total_gb = float(total.split(": ")[1].split(" GB")[0])
    assert abs(sum(shown) - total_gb) <= 0.005 * len(shown)
