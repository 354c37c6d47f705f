"""The advisor: every option it prints is re-run through ``mlxfit.fit`` from the printed command
line (and sysctl) and must fit; the context asked for is never changed except by the one
option that says so; refusals name mlx-lm's reason."""

from __future__ import annotations

import json
import shlex

import pytest
from st_helpers import M4PRO, runner

import mlxfit
from mlxfit.cli.app import app
from mlxfit.estimate.memory import Run
from mlxfit.estimate.serving import Serving, command_line
from mlxfit.model.names import quant_family
from mlxfit.verbs.advise import (
    RANK,
    prefill_steps_below,
    wired_cap_mb,
    wired_needed_mb,
)

Q30 = "mlx-community/Qwen3-30B-A3B-4bit"
Q30_8 = "mlx-community/Qwen3-30B-A3B-Instruct-2507-8bit"
Q30_4 = "mlx-community/Qwen3-30B-A3B-Instruct-2507-4bit"
GEMMA = "mlx-community/gemma-3-27b-it-4bit"
GPTOSS = "mlx-community/gpt-oss-20b-MXFP4-Q8"
Q8B = "mlx-community/Qwen3-8B-4bit"
Q4B = "mlx-community/Qwen3-4B-Instruct-2507-4bit"

# (model, ctx, fit kwargs): runs that do not fit, one per family of advice.
CASES = {
    # A budget where quantizing the KV only works with a smaller chunk: at 32K the quantized
    # SDPA materializes scores, which the chunk must make room for.
    "moe-kv": (Q30, 32768, {"memory_budget_gb": 20.7}),
    "smaller-quant": (Q30_8, 32768, {"machine": "M4 Max 36GB"}),
    "sliding-window": (GEMMA, 32768, {"machine": M4PRO}),
    # 14 GB: at 13 not even one token fits at the upper peak bound (issue 27)
    "sinks-budget": (GPTOSS, 131072, {"machine": M4PRO, "memory_budget_gb": 14}),
    # --prompt-cache 10 asked for: without it fit plans the cached prompts that fit (issue 28)
    "server": (Q8B, 32768, {"machine": M4PRO, "parallel": 4, "prompt_cache": 10}),
    "server-cache": (Q8B, 32768, {"machine": M4PRO, "parallel": 2, "prompt_cache": 4}),
    "draft": (Q8B, 32768, {"machine": M4PRO, "memory_budget_gb": 10, "draft_model": Q4B}),
    # Gemma 3 12B (head_dim 256: unfused on Metal) with a 50000-token chunk at 100K: one
    # 16 x 50000 x 100000 x 2 B = 160 GB score array, over the M3 Ultra 256GB's largest buffer
    # although the total fits.
    "buffer": ("mlx-community/gemma-3-12b-it-4bit", 100001,
               {"machine": "M3 Ultra 256GB", "prefill_step_size": 50000}),
}

_SAME = ("machine", "memory_budget_gb")


def rerun_kwargs(option, base_kw: dict) -> tuple[str, dict]:
    """The mlxfit.fit call that the option's printed command (and sysctl) stands for."""
    words = shlex.split(option.command)
    kw = {k: base_kw[k] for k in _SAME if k in base_kw}
    flags = {"--prefill-step-size": "prefill_step_size", "--kv-bits": "kv_bits",
             "--kv-group-size": "kv_group_size", "--quantized-kv-start": "quantized_kv_start",
             "--max-kv-size": "max_kv_size", "--decode-concurrency": "parallel",
             "--prompt-cache-size": "prompt_cache", "--max-tokens": None,
             "--prompt-concurrency": None, "--prompt-cache-bytes": None}
    model = None
    i = 1
    while i < len(words):
        w = words[i]
        if w == "--model":
            model = words[i + 1]
        elif w == "--draft-model":
            kw["draft_model"] = words[i + 1]
        elif w in flags:
            if flags[w]:
                kw[flags[w]] = int(words[i + 1])
        elif w in ("--prompt",):
            i += 4  # --prompt - < prompt.txt
            continue
        else:
            raise AssertionError(f"unknown word {w!r} in {option.command}")
        i += 2
    if words[0] == "mlx_lm.generate":
        kw.pop("parallel", None)
    for s in option.setup:
        assert s.startswith("sudo sysctl iogpu.wired_limit_mb=")
        kw["wired_limit_mb"] = int(s.split("=")[1])
    return model, kw


@pytest.fixture(scope="module")
def advised():
    out = {}
    for name, (model, ctx, kw) in CASES.items():
        r = mlxfit.fit(model, ctx, advise=True, **kw)
        out[name] = (r, model, ctx, kw)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_every_option_fits_when_rerun_from_its_command(advised, case):
    r, _model, _ctx, kw = advised[case]
    assert not r.runs and r.advice.needed and r.advice.options
    for o in r.advice.options:
        m, rkw = rerun_kwargs(o, kw)
        assert m == o.model
        n = o.result.context_tokens
        again = mlxfit.fit(m, n, **rkw)
        assert again.runs, (case, o.label, o.command)
        assert again.total_bytes == o.result.total_bytes
        assert again.max_safe_context == o.result.max_safe_context
        assert again.predicted_decode_tps == o.result.predicted_decode_tps


@pytest.mark.parametrize("case", list(CASES))
def test_context_is_a_hard_cap(advised, case):
    r, _model, ctx, _kw = advised[case]
    for o in r.advice.options:
        if any(c.kind == "context" for c in o.changes):
            assert len(o.changes) == 1 and o.result.context_tokens < ctx
            assert "not the run asked for" in o.changes[0].cost
        else:
            assert o.result.context_tokens == ctx, o.label


@pytest.mark.parametrize("case", list(CASES))
def test_options_are_sorted_by_cost(advised, case):
    ranks = [o.rank for o in advised[case][0].advice.options]
    assert ranks == sorted(ranks)


def _by(r, kind):
    return [o for o in r.advice.options if any(c.kind == kind for c in o.changes)]


def _refused(r, kind):
    return {x.kind: x.reason for x in r.advice.refused}.get(kind, "")


def test_sliding_window_model(advised):
    r, *_ = advised["sliding-window"]
    (pre,) = [o for o in _by(r, "prefill_step_size") if len(o.changes) == 1]
    step = pre.result.run.prefill_step_size
    assert pre.label == f"--prefill-step-size {step}" and step in (1024, 512, 256)
    assert "prompt processing slower" in pre.changes[0].cost
    # The smallest change: the next larger step does not fit.
    assert not mlxfit.fit(GEMMA, 32768, machine=M4PRO, prefill_step_size=2 * step).fits
    assert "RotatingKVCache" in _refused(r, "kv_bits")
    assert "make_cache()" in _refused(r, "max_kv_size")
    assert not _by(r, "kv_bits_8") and not _by(r, "max_kv_size")


def test_context_option_is_the_max_that_fits_now(advised):
    r, _model, _ctx, _kw = advised["sliding-window"]
    (o,) = _by(r, "context")
    assert o.result.context_tokens == r.max_safe_context < 32768
    assert o.rank == (RANK["context"], RANK["context"])
    assert o is r.advice.options[-1]


def test_wired_limit_is_the_smallest_that_fits(advised):
    r, *_ = advised["sliding-window"]
    (o,) = [o for o in _by(r, "wired_limit") if len(o.changes) == 1]
    mb = int(o.setup[0].split("=")[1])
    assert mb == wired_needed_mb(r.total_bytes) and mb % 256 == 0
    assert mb * 2**20 >= r.total_bytes > (mb - 256) * 2**20
    assert mb <= wired_cap_mb(24 * 2**30) == 20 * 1024
    assert not mlxfit.fit(GEMMA, 32768, machine=M4PRO, wired_limit_mb=mb - 256).fits
    assert "macOS" in o.changes[0].cost and "iogpu.wired_limit_mb=0" in o.changes[0].cost


def test_wired_limit_refused_with_a_budget_or_over_the_reserve(advised):
    r, *_ = advised["sinks-budget"]
    assert "--memory-budget" in _refused(r, "wired_limit")
    r, *_ = advised["server"]
    assert "would be needed" in _refused(r, "wired_limit")


def test_kv_bits_needs_unfused_room_moe(advised):
    r, *_ = advised["moe-kv"]
    labels = [o.label for o in r.advice.options]
    assert "--prefill-step-size 256 + --kv-bits 8 --quantized-kv-start 5000" in labels
    (mk,) = _by(r, "max_kv_size")
    v = mk.result.run.max_kv_size
    assert v % 256 == 0 and "forgets" in mk.changes[0].cost
    assert not mlxfit.fit(Q30, 32768, memory_budget_gb=20.7, max_kv_size=v + 256).fits


def test_smaller_quant_from_the_catalog(advised):
    r, *_ = advised["smaller-quant"]
    (q,) = [o for o in _by(r, "quant") if len(o.changes) == 1]
    assert q.model == Q30_4
    assert q.command.startswith(f"mlx_lm.generate --model {Q30_4} ")
    assert "new download" in q.changes[0].cost


def test_server_advice_keeps_batching(advised):
    r, *_ = advised["server"]
    assert "serves one request at a time" in _refused(r, "kv_bits")
    assert "mlx_lm.server has no such flag" in _refused(r, "max_kv_size")
    for o in r.advice.options:
        assert o.command.startswith("mlx_lm.server --model mlx-community/Qwen3-8B-4bit ")
    labels = [o.label for o in r.advice.options]
    # mlx-lm's flags in the label, mlxfit's own flag to re-check each (issue 14).
    both = "--prompt-cache-size 0 + --decode-concurrency 2 --prompt-concurrency 2"
    assert both in labels
    (o,) = [o for o in r.advice.options if o.label == both]
    assert [c.mlxfit for c in o.changes] == ["--prompt-cache 0", "--parallel 2"]
    assert "--prompt-cache-size 0" in o.command and "--decode-concurrency 2" in o.command
    r2, *_ = advised["server-cache"]
    assert r2.advice.options[0].label == "--prompt-cache-size 0"


def test_draft_advice(advised):
    r, *_ = advised["draft"]
    assert "drops it with --draft-model" in _refused(r, "max_kv_size")
    (o,) = _by(r, "draft")
    assert "--draft-model" not in o.command
    assert "no speculative decoding" in next(c for c in o.changes if c.kind == "draft").cost


def test_buffer_problem_advice(advised):
    r, *_ = advised["buffer"]
    assert r.fits and "largest buffer" in r.advice.problem
    first = r.advice.options[0]
    assert first.label == "--prefill-step-size 32768"
    assert not first.result.oversize_buffers
    assert "the total already fits" in _refused(r, "wired_limit")
    assert "RotatingKVCache" in _refused(r, "kv_bits")


def test_no_advice_needed_when_it_fits():
    r = mlxfit.fit(Q8B, 8192, machine=M4PRO, advise=True)
    assert r.advice is not None and not r.advice.needed and r.advice.options == ()
    assert mlxfit.fit(Q8B, 8192, machine=M4PRO, advise="auto").advice is None
    assert mlxfit.fit(GEMMA, 32768, machine=M4PRO, advise="auto").advice.needed


def test_nothing_fits_says_so():
    r = mlxfit.fit(Q30_8, 32768, memory_budget_gb=5, machine=M4PRO, advise=True)
    assert r.advice.options == ()
    assert r.advice.notes and "not even one token" in _refused(r, "context")


def test_command_lines():
    run = Run(ctx=8192, gen=100, prefill_step_size=512, kv_bits=4, quantized_kv_start=0)
    assert command_line("org/m", run, Serving()) == (
        "mlx_lm.generate --model org/m --max-tokens 100 --prefill-step-size 512 --kv-bits 4 "
        "--quantized-kv-start 0 --prompt - < prompt.txt")
    assert command_line("/my models/x", Run(ctx=10, max_kv_size=512), Serving()) == (
        "mlx_lm.generate --model '/my models/x' --max-tokens 1 --max-kv-size 512 "
        "--prompt - < prompt.txt")
    assert command_line("org/m", Run(ctx=10), Serving(parallel=16)) == (
        "mlx_lm.server --model org/m --decode-concurrency 16 --prompt-concurrency 8 "
        "--prompt-cache-size 10")


def test_prefill_steps_below():
    assert prefill_steps_below(2048) == [1024, 512, 256]
    assert prefill_steps_below(26000) == [16384, 8192, 4096, 2048, 1024, 512, 256]
    assert prefill_steps_below(256) == []


@pytest.mark.parametrize("name, family", [
    ("mlx-community/Qwen3-30B-A3B-Instruct-2507-8bit", "qwen3-30b-a3b-instruct-2507"),
    ("mlx-community/Qwen3-30B-A3B-Instruct-2507-4bit", "qwen3-30b-a3b-instruct-2507"),
    ("mlx-community/Qwen3-4B-Instruct-2507-bf16", "qwen3-4b-instruct-2507"),
    ("mlx-community/gpt-oss-20b-MXFP4-Q8", "gpt-oss-20b"),
    ("LiquidAI/LFM2.5-1.2B-Instruct-mlx-4bit", "lfm2.5-1.2b-instruct"),
    ("mlx-community/Llama-3.3-70B-Instruct-4bit-DWQ", "llama-3.3-70b-instruct"),
    ("meta-llama/Llama-3.2-3B", "llama-3.2-3b"),
    ("Qwen3-8B-4bit", "qwen3-8b"),
])
def test_quant_family(name, family):
    assert quant_family(name) == family


def test_cli_shows_advice_when_it_does_not_fit():
    r = runner.invoke(app, ["fit", GEMMA, "--ctx", "32768", "--machine", M4PRO])
    assert r.exit_code == 1
    assert "what would make it fit" in r.output
    first = mlxfit.fit(GEMMA, 32768, machine=M4PRO, advise=True).advice.options[0]
    assert first.changes[0].kind == "prefill_step_size"
    assert f"$ {first.command}" in r.output
    assert first.command.startswith("mlx_lm.generate --model mlx-community/gemma-3-27b-it-4bit "
                                    "--max-tokens 1 --prefill-step-size ")
    assert "sudo sysctl iogpu.wired_limit_mb=" in r.output
    assert "not offered: --kv-bits" in r.output


def test_cli_advise_when_it_fits_and_json():
    r = runner.invoke(app, ["fit", Q8B, "--ctx", "8192", "--machine", M4PRO, "--advise"])
    assert r.exit_code == 0 and "nothing to change" in r.output
    r = runner.invoke(app, ["fit", GEMMA, "--ctx", "32768", "--machine", M4PRO, "--json"])
    assert r.exit_code == 1
    d = json.loads(r.output)
    assert d["schema_version"] == 2 and d["advice"]["needed"] is True
    first = d["advice"]["options"][0]
    assert first["changes"][0]["label"].startswith("--prefill-step-size ")
    assert first["total_bytes"] <= first["usable_bytes"]
    assert {x["kind"] for x in d["advice"]["refused"]} >= {"kv_bits", "max_kv_size"}


def test_wired_limit_argument():
    from mlxfit.errors import UsageError

    r = mlxfit.fit(Q8B, 8192, machine=M4PRO, wired_limit_mb=16384)
    assert r.usable_bytes == 16384 * 2**20 and "iogpu.wired_limit_mb=16384" in r.usable_source
    with pytest.raises(UsageError, match="memory_budget_gb and wired_limit_mb"):
        mlxfit.fit(Q8B, 8192, machine=M4PRO, memory_budget_gb=10, wired_limit_mb=16384)
    with pytest.raises(UsageError, match="advise must be"):
        mlxfit.fit(Q8B, 8192, machine=M4PRO, advise="yes")
