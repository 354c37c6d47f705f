"""mlxfit's memory model against real MLX (CPU backend), and the `mlxfit measure` verb.

The `mlx` tests save tiny random-weight checkpoints of each family mlx-lm has, load them with
mlx-lm and run its own generate_step (mlxfit.measure), then compare with the `--backend cpu`
prediction: the weights and the caches must match to the byte, the peak within PEAK_TOLERANCE
of the largest of REPEATS runs. MLX's CPU backend counts bytes exactly (MLX_MEMORY.md
section 7). KNOWN_PEAK_MISSES lists, with the reason, the cases whose peak the current formulas
miss: they xfail on the peak only.

The runs go through WORKERS subprocesses side by side (this file run as a script), each taking
whole models (every case of a model in one process, which keeps its own MLX counters), away from
the test process. They preload OpenBLAS when the system has it (faster float32 matmuls, same
memory figures; MLXFIT_NO_OPENBLAS=1 skips it). A table of every case is printed in the terminal
summary (tests/conftest.py). MLXFIT_MEASURE_RECORDS=path appends every run's full record there
(`mlxfit calibrate --from path` fits them).

Skipped, with the reason, only when mlx or mlx-lm cannot be imported
(`pip install ".[test,measure]"`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from st_helpers import (
    BAILING_LINEAR,
    DEEPSEEK_V3,
    GEMMA3,
    GPT_OSS,
    GRANITE_HYBRID,
    KIMI_LINEAR,
    LLAMA64,
    LLAMA128,
    NEMOTRON_H,
    QWEN3,
    QWEN3_MOE,
    QWEN3_NEXT,
    RECURRENT_GEMMA,
    RWKV7,
    invoke,
)

from mlxfit.model.mlx_extra import mlx_missing_reason

MLX_MISSING = mlx_missing_reason()
MLX = pytest.mark.mlx
NEEDS_MLX = pytest.mark.skipif(MLX_MISSING is not None,
                               reason=f"mlx/mlx-lm not importable ({MLX_MISSING}): "
                                      'pip install ".[test,measure]"')
OPENBLAS = "/usr/lib/x86_64-linux-gnu/libopenblas.so.0"
# Not installed for CI on purpose. Tried (issue 23): PyPI's scipy-openblas32 exports cblas_sgemm
# only as scipy_cblas_sgemm, so it was preloaded through a 3-function C shim; MLX's float32
# matmuls ran ~16x faster and the 38 cases took 60 s of CPU instead of ~220 s, weights and
# caches identical. But with single-threaded OpenBLAS the kernels finish before MLX's scheduler
# has run ahead, and the upper peak mode turns rare: spreads of 5-9 % instead of 0-2 %, and
# llama_hd64/ctx300/step512/gen2/kv8 measured 16.22 MB as the largest of 6 runs (+6.3 %, a
# failure) where the reference BLAS gives 16.532 MB in 10 runs of 10. The peaks asserted here
# are those of the wheel's own BLAS. (With 2 OpenBLAS threads, on 2 busy cores, it stayed
# closer: 9 of 10 runs at the upper mode; Debian's libopenblas0, preloaded when present, is
# multi-threaded.)
# The models are split over this many subprocesses running at once (CI has 2 cores).
WORKERS = 2
# The order the workers claim models in: heaviest first (seconds on CI's 2 cores: llama_hd128
# 79, deepseek_v3 72, qwen3 66, ... gpt_oss 19, each mixer < 4), so that both finish together.
# Only the balance depends on it; a model not listed is claimed after these.
CLAIM_ORDER = ("llama_hd128", "deepseek_v3", "qwen3", "llama_hd64", "granitemoehybrid",
               "qwen3_next", "nemotron_h", "qwen3_moe", "gemma3_text", "gpt_oss")
PEAK_TOLERANCE = 0.05
# MLX's scheduler runs ahead of the kernels by a variable amount, so a peak varies by a few %
# from run to run (in steps of one intermediate array). Each case runs REPEATS times and the
# prediction is compared with the largest peak: the one a memory budget must cover. A case
# outside the tolerance runs MORE_REPEATS more times first (a better estimate of that largest
# peak; it can only raise it).
REPEATS = 3
MORE_REPEATS = 3
WORKER_TIMEOUT_S = 1800
RECORDS_ENV = "MLXFIT_MEASURE_RECORDS"  # set to a path: every run's full record is appended

MODELS = {
    "llama_hd64": LLAMA64, "llama_hd128": LLAMA128, "qwen3": QWEN3, "gemma3_text": GEMMA3,
    "gpt_oss": GPT_OSS, "qwen3_moe": QWEN3_MOE, "deepseek_v3": DEEPSEEK_V3,
    "qwen3_next": QWEN3_NEXT, "nemotron_h": NEMOTRON_H, "granitemoehybrid": GRANITE_HYBRID,
    "rwkv7": RWKV7, "recurrent_gemma": RECURRENT_GEMMA, "bailing_moe_linear": BAILING_LINEAR,
    "kimi_linear": KIMI_LINEAR,
}
KV8 = {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 0}


def _case(model: str, ctx: int, step: int, gen: int = 2, repeats: int = REPEATS,
          **kw) -> dict:
    tag = f"{model}/ctx{ctx}/step{step}/gen{gen}" + ("/kv8" if kw.get("kv_bits") else "")
    return {"id": tag, "model": model, "ctx": ctx, "step": step, "gen": gen, "kw": kw,
            "repeats": repeats}


# Contexts cross the 256-token cache steps and the 128-token windows; steps split the prompt
# into several chunks where it matters.
CASES = [
    _case("llama_hd64", 300, 2048),
    _case("llama_hd64", 1100, 512),
    _case("llama_hd64", 2100, 2048, gen=40),
    _case("llama_hd64", 300, 512, **KV8),
    _case("llama_hd64", 2100, 512, **KV8),
    _case("llama_hd128", 300, 2048),
    _case("llama_hd128", 2100, 512),
    _case("llama_hd128", 2100, 512, **KV8),
    _case("qwen3", 300, 2048),
    _case("qwen3", 1100, 256),
    _case("qwen3", 2100, 2048),
    _case("qwen3", 1100, 512, **KV8),
    _case("gemma3_text", 100, 2048),
    _case("gemma3_text", 300, 2048),
    _case("gemma3_text", 1100, 256, gen=20),
    _case("gpt_oss", 100, 2048),
    _case("gpt_oss", 300, 2048),
    _case("gpt_oss", 1100, 512),
    _case("qwen3_moe", 300, 2048),
    _case("qwen3_moe", 1100, 512),
    _case("qwen3_moe", 1100, 2048, **KV8),
    _case("deepseek_v3", 300, 2048),
    _case("deepseek_v3", 1100, 512),
    _case("deepseek_v3", 2100, 256),
    _case("qwen3_next", 300, 2048),
    _case("qwen3_next", 1100, 512),
    _case("qwen3_next", 1100, 2048, **KV8),
    _case("nemotron_h", 300, 2048),
    _case("nemotron_h", 1100, 512),
    _case("nemotron_h", 2100, 256),
    _case("nemotron_h", 1100, 512, **KV8),
    _case("granitemoehybrid", 300, 2048),
    _case("granitemoehybrid", 1100, 512),
    _case("granitemoehybrid", 1100, 512, **KV8),
    # Issue 12's mixers, one run each (their op-by-op recurrences hold per-step states: the
    # peak is the states, not the scheduler's slack; bench/results/cpu_measurements_mixers.jsonl
    # has 29 runs of these configs)
    _case("rwkv7", 300, 256, repeats=1),
    _case("recurrent_gemma", 600, 512, repeats=1),
    _case("bailing_moe_linear", 600, 512, repeats=1),
    _case("kimi_linear", 300, 256, repeats=1),
]
# Cases whose peak the current formulas miss by more than PEAK_TOLERANCE, and why (the
# weights and caches of these cases are still asserted to the byte). Reported to the owners of
# mlxfit/memory.py; remove an entry when its fix lands.
KNOWN_PEAK_MISSES: dict[str, str] = {
    "llama_hd128/ctx2100/step512/gen2/kv8": (
        "memory.keys_copy_term counts act_kv x keys at full-precision bytes per token while the "
        "cache is quantized (mlx-lm's quantized attention works on the packed cache); with "
        "quantized bytes there the prediction is +2.4 %"),
    "deepseek_v3/ctx300/step2048/gen2": (
        "MLA activations at a 297-token chunk: 7.8 of the 11.0 MB predicted transient "
        "(9.0 MB measured) are activations, q_width = heads x (nope + rope) weighted by llama's "
        "act_q; the same model is +5.2 % at 1100/512 and -0.8 % at 2100/256"),
    "deepseek_v3/ctx1100/step512/gen2": (
        "the same MLA activation over-count at a short chunk, now with 2 score arrays (pe_scores "
        "and its masked copy, measured 1.90-2.06 at 2K-8K prompts in "
        "bench/results/cpu_measurements_long.jsonl, where it took MLA from -1.7..-7.8 % to "
        "+3.7..-2.3 %): 31.7 MB predicted transient vs 29.2 MB measured, +5.2 % on the peak"),
    "nemotron_h/ctx300/step2048/gen2": (
        "Mamba2 SSD scan at a 297-token chunk (a 256 step and a 41 step): 9.5 MB predicted "
        "(ssd_square x heads x 256^2 x 4 + ssd_token x chunk x heads x head_dim x 4) where the "
        "measured transient leaves ~7.3 MB; its 512-token chunks are -4.5 %"),
}
KNOWN_PEAK_MISSES["kimi_linear/ctx300/step256/gen2"] = (
    "KDA runs gated_delta.py's op-by-op rule, sized by the gated-delta term (linear_fallback "
    "0.86 per-token states, fitted on Qwen3-Next): KDA keeps ~1.0-1.25 (-5.6 % here, -5 .. "
    "-18 % over the 6 KDA runs of bench/results/cpu_measurements_mixers.jsonl); the same term "
    "is +33 % / -18 % on the long Qwen3-Next runs, so it wants a refit for both")
# The 512-token chunks of the same Mamba2 model have two peak modes ~5 % apart from run to run
# (40.42 / 42.00 MB; with --kv-bits 8, 39.44 / 41.55 MB): the SSD term predicts the lower one.
_SSD_MODES = ("Mamba2 SSD scan at 512-token chunks: two peak modes ~5 % apart from run to run; "
              "the prediction sits on the lower one (under by ~4.5-5.2 % when the upper appears)")
KNOWN_PEAK_MISSES["nemotron_h/ctx1100/step512/gen2"] = _SSD_MODES
KNOWN_PEAK_MISSES["nemotron_h/ctx1100/step512/gen2/kv8"] = _SSD_MODES
# Arrays a model holds beside its parameters, which no safetensors header lists: the weights
# are then exact up to these bytes (the bound), said with the reason.
WEIGHTS_BEYOND_TENSORS: dict[str, tuple[int, str]] = {
    "bailing_moe_linear": (64, ("bailing_moe_linear.py LinearAttention keeps _slope, an "
                                "unevaluated -slopes x layer_factor (num_heads float32 and a "
                                "float32 scalar, 20 B at 4 heads) per linear layer: not a "
                                "parameter")),
}
# mlx-lm cannot quantize these caches (RotatingKVCache: NotImplementedError; MLA's latent:
# AttributeError in its attention): mlxfit must refuse, not predict.
REFUSED_KV8 = {"gemma3_text": "RotatingKVCache", "gpt_oss": "RotatingKVCache",
               "deepseek_v3": "MLA"}


# --------------------------------------------------------------------------- the worker


def _worker(cases_file: str, out_file: str, root: str) -> int:
    """Runs in a subprocess: claim a model no other worker has taken, save it once, measure
    its cases; until every model is taken."""
    import traceback

    from mlxfit.calibration.load import load_calibration
    from mlxfit.verbs.measure.run import save_random_model
    from mlxfit.verbs.measure.twin import measure

    cases = json.loads(Path(cases_file).read_text())
    cal = load_calibration()  # the shipped constants only, whatever the user has
    records = os.environ.get(RECORDS_ENV) or None
    claims = Path(root) / "claims"
    claims.mkdir(exist_ok=True)
    with open(out_file, "w") as fh:
        models = list(dict.fromkeys(c["model"] for c in cases))
        models.sort(key=lambda m: CLAIM_ORDER.index(m) if m in CLAIM_ORDER else len(CLAIM_ORDER))
        for model in models:
            try:  # atomic: exactly one worker creates the claim file
                os.close(os.open(claims / model, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue
            folder: Path | None = None
            for c in (c for c in cases if c["model"] == model):
                t0 = time.perf_counter()
                try:
                    if folder is None:
                        folder = save_random_model(MODELS[model], Path(root) / model,
                                                   dtype="float32")

                    def one(c=c, folder=folder):
                        return measure(str(folder), c["ctx"], gen=c["gen"],
                                       prefill_step_size=c["step"], calibration=cal,
                                       save=records is not None, results_file=records,
                                       **c["kw"])

                    runs = [one() for _ in range(c.get("repeats", REPEATS))]
                    m = max(runs, key=lambda x: x.term("peak").measured)
                    if abs(m.term("peak").error) > PEAK_TOLERANCE:
                        runs += [one() for _ in range(MORE_REPEATS)]
                        m = max(runs, key=lambda x: x.term("peak").measured)
                    out = {"id": c["id"], "backend": m.backend,
                           "measured_phase": m.measured_peak_phase,
                           "predicted_phase": m.predicted_peak_phase,
                           "terms": {t.name: [t.measured, t.predicted] for t in m.terms},
                           "peaks": [x.term("peak").measured for x in runs],
                           "exact": all(x.term(n).measured == m.term(n).measured for x in runs
                                        for n in ("weights", "kv_cache")),
                           "blas": m.record.get("blas_preload")}
                except Exception:  # noqa: BLE001 - reported by the test of this case
                    out = {"id": c["id"], "error": traceback.format_exc()}
                out["seconds"] = time.perf_counter() - t0
                out["worker"] = os.getpid()
                fh.write(json.dumps(out) + "\n")
                fh.flush()
    return 0


def _worker_env() -> dict:
    env = dict(os.environ)
    if env.get("MLXFIT_NO_OPENBLAS") == "1":
        return env
    if os.path.exists(OPENBLAS) and OPENBLAS not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = (OPENBLAS + " " + env.get("LD_PRELOAD", "")).strip()
    return env


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mlx_models")
    cases_file = root / "cases.json"
    cases_file.write_text(json.dumps(CASES))
    env = _worker_env()
    t0 = time.perf_counter()
    procs = []
    for i in range(WORKERS):
        with open(root / f"worker-{i}.log", "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", str(cases_file),
                 str(root / f"results-{i}.jsonl"), str(root)],
                env=env, stdout=log, stderr=subprocess.STDOUT, text=True))
    try:
        for p in procs:
            p.wait(timeout=max(1.0, WORKER_TIMEOUT_S - (time.perf_counter() - t0)))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.perf_counter() - t0
    by_id = {}
    for i in range(WORKERS):
        f = root / f"results-{i}.jsonl"
        by_id |= {r["id"]: r for r in map(json.loads, f.read_text().splitlines())} \
            if f.exists() else {}
    failed = "".join(f"\nworker {i} exited {p.returncode}:\n"
                     f"{(root / f'worker-{i}.log').read_text()[-3000:]}"
                     for i, p in enumerate(procs) if p.returncode != 0)
    if failed and not by_id:
        pytest.fail(f"measurement workers failed:{failed}")
    used = {r.get("blas") for r in by_id.values() if "error" not in r}
    busy: dict[int, float] = {}
    for r in by_id.values():
        busy[r["worker"]] = busy.get(r["worker"], 0.0) + r["seconds"]
    header = (f"{len(by_id)} cases in {wall:.0f} s in {WORKERS} subprocesses side by side"
              f" (busy {' / '.join(f'{b:.0f}' for b in busy.values())} s;"
              f" OpenBLAS preloaded: {'yes' if used and used != {None} else 'no'})")
    return {"results": by_id, "header": header, "failed": failed}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
@MLX
@NEEDS_MLX
def test_prediction_matches_mlx_cpu(case, measured, record_property):
    r = measured["results"].get(case["id"])
    assert r is not None, f"no worker reached this case{measured['failed']}"
    # the row of the table in the terminal summary (tests/conftest.py; also under xdist)
    record_property("mlxfit_measure_row", {"header": measured["header"], "row": r})
    assert "error" not in r, r["error"]
    assert r["backend"] == "cpu"
    assert r["exact"], "weights or KV bytes differ between repeats of the same run"
    t = r["terms"]
    wm, wp = t["weights"]
    bound, why = WEIGHTS_BEYOND_TENSORS.get(case["model"], (0, ""))
    assert 0 <= wm - wp <= bound, (f"weights: predicted {wp} B, active memory after load "
                                   f"{wm} B" + (f" (known: {why})" if why else ""))
    km, kp = t["kv_cache"]
    assert kp == km, f"KV cache: predicted {kp} B, the caches' arrays hold {km} B"
    if "recurrent_state" in t:
        sm, sp = t["recurrent_state"]
        assert sp == sm, f"recurrent state: predicted {sp} B, measured {sm} B"
    pm, pp = t["peak"]
    err = (pp - pm) / pm
    msg = (f"peak: predicted {pp / 1e6:.3f} MB ({r['predicted_phase']}), measured "
           f"{pm / 1e6:.3f} MB ({r['measured_phase']}; largest of {len(r['peaks'])} runs): "
           f"{100 * err:+.1f} %")
    if abs(err) > PEAK_TOLERANCE and case["id"] in KNOWN_PEAK_MISSES:
        pytest.xfail(f"{msg}. Known: {KNOWN_PEAK_MISSES[case['id']]}")
    assert abs(err) <= PEAK_TOLERANCE, msg


# --------------------------------------------------------------------------- in-process tests


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    from mlxfit.verbs.measure.run import save_random_model

    return save_random_model(LLAMA64, tmp_path_factory.mktemp("tiny") / "llama", dtype="float32")


@pytest.mark.parametrize("model", sorted(REFUSED_KV8))
@MLX
@NEEDS_MLX
def test_refuses_kv_bits_where_mlx_lm_cannot_quantize(model, tmp_path):
    from mlxfit.errors import UsageError
    from mlxfit.verbs.measure.twin import measure

    (tmp_path / "config.json").write_text(json.dumps(MODELS[model]))
    with pytest.raises(UsageError) as e:
        measure(str(tmp_path), 1100, gen=2, random_weights=True, dtype="float32", **KV8)
    msg = str(e.value)
    assert e.value.param == "kv_bits" and msg.startswith("kv_bits: ")
    assert REFUSED_KV8[model] in msg and "\n" not in msg


@pytest.mark.parametrize("model", ["gemma3_text", "gpt_oss"])
def test_fit_refuses_kv_bits_for_rotating_caches(model):
    """The same refusal in the prediction itself (no mlx needed)."""
    from mlxfit.errors import UsageError
    from mlxfit.estimate.memory import Run, validate_run
    from mlxfit.model.parse import parse_config

    cfg = parse_config(MODELS[model], act_bytes=4)
    with pytest.raises(UsageError, match="RotatingKVCache"):
        validate_run(cfg, Run(ctx=1100, kv_bits=8, quantized_kv_start=0, backend="cpu"))


@MLX
@NEEDS_MLX
def test_measure_api_real_and_random_weights_agree(tiny_llama):
    from mlxfit.calibration.load import load_calibration
    from mlxfit.verbs.measure.twin import measure

    cal = load_calibration()
    real = measure(str(tiny_llama), 300, gen=2, calibration=cal)
    rand = measure(str(tiny_llama), 300, gen=2, random_weights=True, calibration=cal)
    assert real.source_kind == rand.source_kind == "folder"
    assert not real.random_weights and rand.random_weights
    assert real.dtype == rand.dtype == "float32"
    for name in ("weights", "kv_cache"):
        a, b = real.term(name), rand.term(name)
        assert a.measured == a.predicted == b.measured == b.predicted
    assert real.term("peak").predicted == rand.term("peak").predicted
    assert real.term("decode_tok_s").measured > 0 and real.term("decode_tok_s").predicted is None
    rec = real.record
    assert rec["weights_measured_bytes"] == rec["param_bytes"]
    assert rec["predicted"]["backend"] == "cpu" and rec["source"]["kind"] == "folder"


@MLX
@NEEDS_MLX
def test_measure_config_only_builds_in_the_config_dtype(tmp_path):
    from mlxfit.calibration.load import load_calibration
    from mlxfit.verbs.measure.twin import measure

    (tmp_path / "config.json").write_text(json.dumps(dict(LLAMA64, torch_dtype="bfloat16")))
    m = measure(str(tmp_path / "config.json"), 300, gen=2, random_weights=True,
                calibration=load_calibration())
    assert m.source_kind == "config" and m.dtype == "bfloat16"
    assert m.term("weights").measured == m.term("weights").predicted
    assert m.term("kv_cache").measured == m.term("kv_cache").predicted
    assert any("no safetensors headers" in n for n in m.notes)
    with pytest.raises(Exception, match="no model"):  # no weights without --random-weights
        measure(str(tmp_path), 300, gen=2)


@MLX
@NEEDS_MLX
def test_measure_save_appends_to_the_injected_file_only(tiny_llama, tmp_path, monkeypatch):
    from mlxfit.verbs.measure import twin as ms

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.cache/mlxfit/measurements.jsonl
    monkeypatch.delenv("MLXFIT_CACHE_DIR", raising=False)  # measure --save: mlxfit's cache
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("MLXFIT_CACHE_DIR", raising=False)  # measure --save: mlxfit's cache
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    default = tmp_path / "home" / ".cache" / "mlxfit" / "measurements.jsonl"
    m1 = ms.measure(str(tiny_llama), 300, gen=2, save=True)
    m2 = ms.measure(str(tiny_llama), 300, gen=2, prefill_step_size=128, save=True)
    assert m1.saved_to == m2.saved_to == str(default)
    lines = default.read_text().splitlines()
    assert len(lines) == 2
    recs = [json.loads(x) for x in lines]
    assert [r["prefill_step_size"] for r in recs] == [2048, 128]
    assert all(r["schema"] == 1 and r["act_bytes"] == 4 and r["weights_read"] for r in recs)
    other = tmp_path / "other.jsonl"
    ms.measure(str(tiny_llama), 300, gen=2, save=True, results_file=other)
    assert len(other.read_text().splitlines()) == 1
    assert len(default.read_text().splitlines()) == 2
    assert sorted(p.name for p in tmp_path.rglob("*.jsonl")) == ["measurements.jsonl",
                                                                  "other.jsonl"]


@MLX
@NEEDS_MLX
def test_measure_hf_cache_repo_and_catalog(tiny_llama, tmp_path, monkeypatch):
    """A repo id in the Hugging Face cache loads its snapshot; a catalog id has no weights
    here, so it needs --random-weights (refused otherwise, before anything runs)."""
    from st_helpers import make_hf_cache

    from mlxfit.calibration.load import load_calibration
    from mlxfit.errors import UsageError
    from mlxfit.verbs.measure.twin import measure

    files = {p.name: p.read_bytes() for p in tiny_llama.iterdir() if p.is_file()}
    make_hf_cache(tmp_path / "hub", "acme/tiny-llama", files, commit="a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    m = measure("acme/tiny-llama", 300, gen=2, calibration=load_calibration())
    assert m.source_kind == "hf-cache" and m.model == "acme/tiny-llama"
    assert m.term("weights").measured == m.term("weights").predicted
    assert m.term("kv_cache").measured == m.term("kv_cache").predicted
    assert m.record["source"]["revision"] == "a" * 40
    with pytest.raises(UsageError, match="random_weights"):
        measure("mlx-community/Llama-3.2-1B-Instruct-4bit", 300)


# --------------------------------------------------------------------------- the CLI


@MLX
@NEEDS_MLX
def test_cli_measure_table_and_json(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.cache/mlxfit/measurements.jsonl
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no calibration.toml
    monkeypatch.delenv("MLXFIT_CACHE_DIR", raising=False)  # measure --save: mlxfit's cache
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    results = tmp_path / "home" / ".cache" / "mlxfit" / "measurements.jsonl"
    r = invoke("measure", str(tiny_llama), "--ctx", "300", "--gen", "2")
    assert r.exit_code == 0, r.output
    for word in ("weights", "KV cache", "transient", "peak", "decode tok/s", "exact",
                 "backend cpu"):
        assert word in r.output, word
    r = invoke("measure", str(tiny_llama), "--ctx", "600", "--gen", "2",
                "--prefill-step-size", "256", "--kv-bits", "8", "--quantized-kv-start", "0",
                "--json", "--save")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema_version"] == 2 and doc["source"] == "folder"
    assert doc["run"]["prefill_step_size"] == 256 and doc["run"]["kv_group_size"] == 64
    terms = {t["name"]: t for t in doc["comparison"]}
    assert terms["weights"]["measured"] == terms["weights"]["predicted"]
    assert terms["kv_cache"]["measured"] == terms["kv_cache"]["predicted"]
    assert doc["backend"] == "cpu" and doc["run"]["kv_bits"] == 8
    assert doc["saved_to"] == str(results)
    assert len(results.read_text().splitlines()) == 1
    assert not (tmp_path / "config").exists()


@MLX
@NEEDS_MLX
@pytest.mark.parametrize("args, needle", [
    (["--ctx", "2"], "--ctx"),
    (["--ctx", "300", "--gen", "0"], "--gen"),
    (["--ctx", "300", "--kv-bits", "7"], "--kv-bits"),
    (["--ctx", "300", "--dtype", "float32"], "--random-weights"),
])
def test_cli_measure_bad_flags_one_line_exit_2(tiny_llama, args, needle):
    r = invoke("measure", str(tiny_llama), *args)
    assert r.exit_code == 2
    err = r.stderr if hasattr(r, "stderr") and r.stderr else r.output
    assert needle in err and err.strip().count("\n") == 0, err


def test_cli_measure_without_mlx_says_how_to_install(monkeypatch, tmp_path):
    """No mlx: one line naming the extra, exit 2 (simulated: the imports fail)."""
    for mod in ("mlx", "mlx.core", "mlx_lm"):
        monkeypatch.setitem(sys.modules, mod, None)
    (tmp_path / "config.json").write_text(json.dumps(LLAMA64))
    r = invoke("measure", str(tmp_path), "--ctx", "300", "--random-weights")
    assert r.exit_code == 2
    err = r.stderr if hasattr(r, "stderr") and r.stderr else r.output
    assert 'pip install "mlxfit[measure]"' in err and err.strip().count("\n") == 0, err


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--worker":
    sys.exit(_worker(sys.argv[2], sys.argv[3], sys.argv[4]))
