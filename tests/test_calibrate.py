"""`mlxfit calibrate`: least squares recovers known constants from records made with them, the
user file it writes is what `fit` then uses (and says so), bad records are skipped with a reason.

No mlx needed: the records are synthetic (the peak mlxfit predicts with chosen constants), in
the format `mlxfit measure --save` writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from st_helpers import (
    DEEPSEEK_V3,
    GEMMA3,
    GPT_OSS,
    LLAMA64,
    LLAMA128,
    NEMOTRON_H,
    QWEN3_MOE,
    QWEN3_NEXT,
    invoke,
)

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.errors import MlxfitError, NoMeasurements
from mlxfit.estimate.memory import Run
from mlxfit.estimate.solve import totals_at
from mlxfit.estimate.speed import predicted_decode_seconds
from mlxfit.model.inputs import WeightsRead
from mlxfit.model.parse import parse_config
from mlxfit.render.calibrate import result_to_json
from mlxfit.settings import from_environ
from mlxfit.verbs.calibrate.twin import FIT_PARAMS, calibrate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SHIPPED = load_calibration()
# The "true" constants the synthetic CPU records are made with: the shipped ones, moved.
TRUE_CPU = {"act_hidden": 8.4, "act_ffn": 1.5, "act_q": 5.1, "act_kv": 0.9, "score_arrays": 1.3,
            "sink_score_arrays": 2.5, "mla_score_arrays": 1.4, "mla_kv_arrays": 0.8,
            "bf16_act_bytes": 3.1, "ssd_square": 3.3, "ssd_token": 10.0,
            "linear_fallback": 1.1}
WEIGHTS = 10_000_000


def _with_cpu(cal, values):
    return replace(cal, backends={**cal.backends,
                                  "cpu": replace(cal.backends["cpu"], **values)})


def _record(config, ctx, step, *, act_bytes=4, gen=1, cal=None, backend="cpu", **run_kw):
    cfg = parse_config(config, act_bytes=act_bytes)
    run = Run(ctx=ctx, gen=gen, prefill_step_size=step, backend=backend, **run_kw)
    t = totals_at(cfg, WEIGHTS, run, cal or SHIPPED)
    return {
        "config": config, "ctx": ctx, "gen_tokens": gen, "prefill_step_size": step,
        "kv_bits": run.kv_bits, "kv_group_size": run.kv_group_size,
        "quantized_kv_start": run.quantized_kv_start, "max_kv_size": run.max_kv_size,
        "act_bytes": act_bytes, "dtype": "float32" if act_bytes == 4 else "bfloat16",
        "backend": backend, "predicted": {"backend": backend},
        "active_before_load_bytes": 16, "active_after_load_bytes": WEIGHTS + 16,
        "weights_measured_bytes": WEIGHTS, "peak_bytes": t.total + 16,
        "cache_bytes_end": t.kv + t.state, "state_bytes_end": t.state,
    }


def synthetic_cpu_records(cal) -> list[dict]:
    wide = dict(LLAMA64, hidden_size=768, intermediate_size=3072, num_attention_heads=12)
    recs = []
    for cfg in (LLAMA64, LLAMA128, wide, GEMMA3, GPT_OSS, QWEN3_MOE, DEEPSEEK_V3, QWEN3_NEXT,
                NEMOTRON_H):
        for ctx, step in ((300, 2048), (1100, 512), (2100, 2048), (4096, 512)):
            recs.append(_record(cfg, ctx, step, cal=cal))
    for cfg in (LLAMA64, GEMMA3, NEMOTRON_H):
        recs.append(_record(cfg, 2100, 512, act_bytes=2, cal=cal))
    recs.append(_record(LLAMA64, 2100, 512, cal=cal, kv_bits=8, quantized_kv_start=0))
    return recs


def _write(path: Path, recs: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs))
    return path


@pytest.fixture(scope="module")
def cpu_file(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("cal") / "m.jsonl",
                  synthetic_cpu_records(_with_cpu(SHIPPED, TRUE_CPU)))


def test_least_squares_recovers_the_constants_the_records_were_made_with(cpu_file, tmp_path):
    r = calibrate(cpu_file, user_file=tmp_path / "none.toml", calibration=SHIPPED)
    b = r.backend("cpu")
    assert b.n_records == len(cpu_file.read_text().splitlines())
    assert b.kv_mismatches == 0
    for k, v in TRUE_CPU.items():
        assert b.new[k] == pytest.approx(v, rel=0.03), k
    assert b.old_stats.median > 0.01
    assert b.new_stats.max < 0.002
    assert r.decode is None
    assert r.written_to is None and not (tmp_path / "none.toml").exists()


def test_write_stores_a_user_file_that_fit_uses_and_names(cpu_file, tmp_path, monkeypatch):
    user = tmp_path / "config" / "mlxfit" / "calibration.toml"
    user.parent.mkdir(parents=True)
    user.write_text("# mine\n[backend.metal]\nact_hidden = 20.0\n")
    r = calibrate(cpu_file, write=True, user_file=user)
    assert r.written_to == str(user)
    doc = tomllib.loads(user.read_text())
    assert doc["backend"]["metal"]["act_hidden"] == 20.0  # the user's own key is kept
    for k in r.backend("cpu").fitted:
        assert doc["backend"]["cpu"][k] == pytest.approx(r.backend("cpu").new[k], rel=1e-5)
    assert "Fitted" in user.read_text() and str(cpu_file) in user.read_text()

    cal = load_calibration(user)
    assert cal.source == f"calibration.toml + {user}"
    assert cal.backend("cpu").act_hidden == pytest.approx(TRUE_CPU["act_hidden"], rel=0.03)
    assert cal.backend("metal").act_hidden == 20.0

    model = "mlx-community/Llama-3.2-1B-Instruct-4bit"  # built-in catalog: no network
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty"))
    before = mlxfit.fit(model, 4096, machine="M4 Pro 24GB", backend="cpu")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # $XDG_CONFIG_HOME/mlxfit
    after = mlxfit.fit(model, 4096, machine="M4 Pro 24GB", backend="cpu")
    assert any(n == f"calibration: calibration.toml + {user}" for n in after.notes)
    assert not any(n.startswith("calibration:") for n in before.notes)
    assert after.transient_bytes != before.transient_bytes
    assert after.weights_bytes == before.weights_bytes and after.kv_bytes == before.kv_bytes


def test_decode_eta_and_fixed_cost_from_metal_records(tmp_path):
    true = replace(SHIPPED.decode, eta=0.8, fixed_s=0.004)
    cal_true = replace(SHIPPED, decode=true)
    recs = []
    for cfg, bw, ctx in ((LLAMA64, 273.0, 1100), (LLAMA128, 546.0, 4096), (QWEN3_MOE, 120.0, 2100),
                         (GEMMA3, 400.0, 300)):
        rec = _record(cfg, ctx, 2048, backend="metal")
        w = WeightsRead(total_bytes=4_000_000_000 if cfg is LLAMA128 else 900_000_000,
                        expert_bytes=600_000_000 if cfg is QWEN3_MOE else 0,
                        embedding_bytes=100_000_000, tied_embeddings=True)
        run = Run(ctx=ctx, gen=1, prefill_step_size=2048, backend="metal")
        secs, _ = predicted_decode_seconds(parse_config(cfg, act_bytes=4), run, w, bw, cal_true,
                                           "M?")
        rec.update(decode_tok_s=1 / secs, machine_info={"name": "M?", "bandwidth_gbs": bw},
                   weights_read=w.__dict__)
        recs.append(rec)
    recs.append(dict(recs[0], backend="cpu", predicted={"backend": "cpu"}))  # not Metal: ignored
    r = calibrate(_write(tmp_path / "m.jsonl", recs), user_file=tmp_path / "u.toml",
                  calibration=SHIPPED)
    d = r.decode
    assert d is not None and d.n_records == 4 and d.fitted == ("eta", "fixed_s")
    assert d.new["eta"] == pytest.approx(0.8, rel=1e-3)
    assert d.new["fixed_s"] == pytest.approx(0.004, rel=1e-3)
    assert d.stats("new").max < 1e-3 < d.stats("old").median
    after = r.calibration_after(SHIPPED)
    assert after.decode.eta == pytest.approx(cal_true.decode.eta, rel=1e-3)
    assert "[decode]" in r.toml and "Metal tok/s" in r.toml


def test_bad_records_are_skipped_with_a_reason(tmp_path):
    good = _record(LLAMA64, 1100, 512)
    lines = [
        "not json",
        "[1, 2]",
        json.dumps({"name": "crashed", "error": "NotImplementedError: RotatingKVCache NYI"}),
        json.dumps({k: v for k, v in good.items() if k != "peak_bytes"}),
        json.dumps(dict(good, backend="cuda", predicted={"backend": "cuda"})),
        json.dumps(dict(good, act_bytes=None, dtype="int4")),
        json.dumps(good),
        "",
    ]
    r = calibrate(_write(tmp_path / "m.jsonl", lines), user_file=tmp_path / "u.toml")
    assert r.backend("cpu").n_records == 1
    reasons = " | ".join(f"{a}: {b}" for a, b in r.skipped)
    for needle in ("line 1: not JSON", "line 2: not a JSON object", "crashed: mlx-lm failed",
                   "no 'peak_bytes'", "neither cpu nor metal", "activation dtype unknown"):
        assert needle in reasons, needle
    with pytest.raises(NoMeasurements, match="no usable measurement"):
        calibrate(_write(tmp_path / "bad.jsonl", lines[:3]), user_file=tmp_path / "u.toml")
    with pytest.raises(NoMeasurements, match="--save writes them"):
        calibrate(tmp_path / "missing.jsonl", user_file=tmp_path / "u.toml")


def test_json_result_has_every_record(cpu_file, tmp_path):
    r = calibrate(cpu_file, user_file=tmp_path / "u.toml", params=("act_hidden", "act_q"))
    doc = json.loads(json.dumps(result_to_json(r)))
    (b,) = doc["backends"]
    assert set(b["fitted"]) <= {"act_hidden", "act_q"} and set(b["old"]) == {"act_hidden", "act_q"}
    assert len(doc["records"]) == b["n_records"]
    assert doc["written_to"] is None
    with pytest.raises(Exception, match="cannot fit"):
        calibrate(cpu_file, params=("eta",))


# --------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def cli_file(tmp_path_factory) -> Path:
    """The CLI's plumbing needs records, not the whole identifiability set: the 12 records of
    the three llama shapes fit 5 constants in 0.1 s, where cpu_file's 40 take 1.7 s a run and
    the test below runs the fit three times."""
    recs = synthetic_cpu_records(_with_cpu(SHIPPED, TRUE_CPU))[:12]
    assert {r["config"]["hidden_size"] for r in recs} == {256, 512, 768}
    return _write(tmp_path_factory.mktemp("cal-cli") / "m.jsonl", recs)


def test_cli_calibrate_show_write_and_errors(cli_file, tmp_path, monkeypatch):
    user = tmp_path / "cfg" / "mlxfit" / "calibration.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    r = invoke("calibrate", "--from", str(cli_file))
    assert r.exit_code == 0, r.output
    for word in ("backend cpu", "act_hidden", "old", "new", "--write"):
        assert word in r.output, word
    assert f"--write stores these constants in {user}" in r.output  # XDG_CONFIG_HOME's
    assert not user.exists()
    r = invoke("calibrate", "--from", str(cli_file), "--write")
    assert r.exit_code == 0, r.output
    assert "written to" in r.output and user.is_file()
    r = invoke("calibrate", "--from", str(cli_file), "--json")
    assert r.exit_code == 0
    assert json.loads(r.output)["calibration"] == f"calibration.toml + {user}"
    r = invoke("calibrate", "--from", str(tmp_path / "missing.jsonl"))
    assert r.exit_code == 2
    lines = [ln for ln in r.output.strip().splitlines() if ln]
    assert len(lines) == 1 and "missing.jsonl" in lines[0]
    r = invoke("calibrate", "--from", str(cli_file), "--backend", "cuda")
    assert r.exit_code == 2 and "cuda" in r.output


def test_default_paths_are_the_documented_ones():
    s = from_environ({"HOME": "/home/u"})
    assert s.results_file == Path("/home/u/.cache/mlxfit/measurements.jsonl")
    assert s.calibration_file == Path("/home/u/.config/mlxfit/calibration.toml")
    assert set(FIT_PARAMS) <= set(SHIPPED.backend("cpu").__dataclass_fields__)


def test_cli_refuses_to_fit_more_constants_than_the_records_determine(tmp_path, monkeypatch):
    """One run informs five constants: fitting them all would score 0 % whatever they are.
    Nothing is fitted or written; the report says which constants the run informs."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    one = _write(tmp_path / "one.jsonl", [_record(LLAMA64, 1100, 2048)])
    r = invoke("calibrate", "--from", str(one))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"1 measured run from {one}")
    assert "backend cpu: 1 distinct run, " in r.stdout
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("not fitted")]
    # ux-3 F19: "it informs", not "it inform"; and no "--write stores" line for nothing fitted
    assert line.startswith("not fitted, constants kept: 1 distinct run determines 1 of the 5 "
                           "constants it informs ("), line
    assert "--write stores" not in r.stdout
    assert "Each run informs: " in line and "act_hidden" in line
    d = json.loads(invoke("calibrate", "--from", str(one), "--json").stdout)
    (b,) = d["backends"]
    assert b["fitted"] == [] and b["new"] == b["old"] and b["refused"].startswith("1 distinct")
    r = invoke("calibrate", "--from", str(one), "--write")
    assert r.exit_code == 2 and not (tmp_path / "cfg" / "mlxfit" / "calibration.toml").exists()
    assert r.stderr.startswith(f"mlxfit: error: {one}: nothing fitted, nothing written: "
                               "backend cpu: 1 distinct run determines 1 of the 5")
    # One constant is determined by one run: fitting it alone is allowed.
    d = json.loads(invoke("calibrate", "--from", str(one), "--param", "act_hidden",
                          "--json").stdout)
    assert d["backends"][0]["fitted"] == ["act_hidden"] and d["backends"][0]["refused"] is None


def _metal_record_on(config, ctx, step, machine_name, cal):
    """A Metal record as `mlxfit measure --machine <name>` saves it: the run on that Mac's GPU
    (verbs.edges.run_on), its fields kept in machine_info."""
    from mlxfit.estimate.memory import run_machine_fields
    from mlxfit.hardware.resolve import resolve_machine
    from mlxfit.verbs.edges import run_on

    m = resolve_machine(machine_name)
    run = run_on(Run(ctx=ctx, gen=1, prefill_step_size=step, backend="metal"), m)
    cfg = parse_config(config, act_bytes=2)
    t = totals_at(cfg, WEIGHTS, run, cal)
    rec = _record(config, ctx, step, act_bytes=2, backend="metal", cal=cal)
    rec.update(peak_bytes=t.total + 16, cache_bytes_end=t.kv + t.state,
               machine_info={"name": m.name, "bandwidth_gbs": m.bandwidth_gbs,
                             "ram_bytes": m.ram_bytes, **run_machine_fields(run)})
    return rec, cfg, run


def test_a_record_is_predicted_on_the_gpu_it_ran_on():
    """calibrate predicts a base/Pro Mac's record with that GPU's floor, as fit does there:
    the record's run equals fit's run on the machine, and so does the peak."""
    from mlxfit.estimate.memory import run_from_record

    rec, cfg, run = _metal_record_on(LLAMA64, 2100, 2048, "M4 Pro 24GB", SHIPPED)
    again = run_from_record(rec, "metal")
    assert again == run and again.gpu_tier == "small"
    from mlxfit.estimate.memory import run_machine_fields

    fitted = mlxfit.fit("mlx-community/Qwen3-0.6B-4bit", 2100, machine="M4 Pro 24GB")
    assert run_machine_fields(fitted.run) == run_machine_fields(run)
    assert totals_at(cfg, WEIGHTS, again, SHIPPED).total == rec["peak_bytes"] - 16
    # A base/Pro floor differs from the Max/Ultra one, so the class really changes the peak.
    plain = totals_at(cfg, WEIGHTS, Run(ctx=2100, gen=1, prefill_step_size=2048,
                                        backend="metal"), SHIPPED).total
    assert plain != rec["peak_bytes"] - 16


def test_calibrate_moves_the_floor_of_the_class_the_records_ran_on(tmp_path):
    """Records from a Pro Mac made with a moved base/Pro floor: calibrate recovers that floor
    and leaves the Max/Ultra and M5 floors as they are (no record informs them)."""
    metal = SHIPPED.backend("metal")
    true = replace(SHIPPED, backends={**SHIPPED.backends, "metal": replace(
        metal, act_floor_small=metal.act_floor_small * 1.3)})
    recs = [_metal_record_on(cfg, ctx, step, "M4 Pro 24GB", true)[0]
            for cfg in (LLAMA64, LLAMA128) for ctx, step in ((2100, 2048), (4096, 2048))]
    r = calibrate(_write(tmp_path / "m.jsonl", recs), user_file=tmp_path / "u.toml",
                  backends=("metal",), params=("act_floor", "act_floor_small", "act_floor_m5"),
                  calibration=SHIPPED)
    b = r.backend("metal")
    assert b.new["act_floor_small"] == pytest.approx(true.backend("metal").act_floor_small,
                                                     rel=1e-3)
    assert b.new["act_floor"] == metal.act_floor
    assert b.new["act_floor_m5"] == metal.act_floor_m5


# --------------------------------------------------------------------------- issue 29

USER_DOC = """# my notes on this Mac
note = "kept"  # a top-level key the loader ignores

# metal, measured by hand
[backend.metal]
act_hidden = 20.0  # mine

[extra.deep]
x = 1
"""


def test_write_edits_an_existing_file_in_place(cli_file, tmp_path):
    """--write used to re-render the file from its parsed keys: top-level keys, nested tables
    and every comment were dropped. Now the fitted keys are edited in the text, the rest kept
    line for line, the file's mode too; a second --write edits the same lines again."""
    user = tmp_path / "calibration.toml"
    user.write_text(USER_DOC)
    user.chmod(0o600)
    r = calibrate(cli_file, write=True, user_file=user)
    fitted = r.backend("cpu").fitted
    assert fitted
    text = user.read_text()
    assert [ln for ln in USER_DOC.splitlines() if ln not in text.splitlines()] == []
    old, doc = tomllib.loads(USER_DOC), tomllib.loads(text)
    assert {k: v for k, v in doc.items() if k != "backend"} == {
        k: v for k, v in old.items() if k != "backend"}
    assert doc["backend"]["metal"] == old["backend"]["metal"]
    assert set(doc["backend"]["cpu"]) == set(fitted)
    for k in fitted:
        assert doc["backend"]["cpu"][k] == pytest.approx(r.backend("cpu").new[k], rel=1e-5)
    assert (user.stat().st_mode & 0o777) == 0o600
    assert load_calibration(user).backend("metal").act_hidden == 20.0
    calibrate(cli_file, write=True, user_file=user)
    again = user.read_text()
    assert again.count("[backend.cpu]") == 1 and again.count("# Fitted") == 1
    second = tomllib.loads(again)  # refitted from the first fit's values: the same keys
    assert {k: v for k, v in second.items() if k != "backend"} == {
        k: v for k, v in old.items() if k != "backend"}
    assert set(second["backend"]["cpu"]) == set(doc["backend"]["cpu"])


FSIZE_CHILD = r"""
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv = ["mlxfit"] + sys.argv[2:]
runpy.run_module("mlxfit", run_name="__main__")
"""


def test_an_interrupted_write_never_truncates_the_calibration_file(cli_file, tmp_path):
    """A write cut short (here a real EFBIG from RLIMIT_FSIZE in a child, as a full disk or a
    kill would cut it) left calibration.toml truncated, after which every verb exited 2. Now
    the new text goes to a temporary file first: the old file stays whole."""
    user = tmp_path / "cfg" / "mlxfit" / "calibration.toml"
    user.parent.mkdir(parents=True)
    user.write_text(USER_DOC)
    before = user.read_bytes()
    src = Path(mlxfit.__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-c", FSIZE_CHILD, "64", "calibrate", "--from",
                        str(cli_file), "--write"], capture_output=True, text=True, timeout=120,
                       check=False, env=dict(os.environ, PYTHONPATH=str(src),
                                             XDG_CONFIG_HOME=str(tmp_path / "cfg")))
    lines = [ln for ln in r.stderr.splitlines() if ln]
    assert r.returncode == 2 and len(lines) == 1 and "cannot write" in lines[0], r.stderr
    assert user.read_bytes() == before
    assert [p.name for p in user.parent.iterdir()] == ["calibration.toml"]


AS_CHILD = r"""
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
sys.argv = ["mlxfit"] + sys.argv[1:]
runpy.run_module("mlxfit", run_name="__main__")
"""


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_calibrate_from_a_fifo_or_a_device_is_refused(tmp_path, kind):
    """`calibrate --from` a FIFO waited forever for a writer; /dev/zero was read until memory
    ran out. Both are refused before a byte is read (a child, a timeout, 1 GiB of address
    space)."""
    src = Path(kind)
    if kind == "fifo":
        src = tmp_path / "m.jsonl"
        os.mkfifo(src)
    r = subprocess.run([sys.executable, "-c", AS_CHILD, "calibrate", "--from", str(src)],
                       capture_output=True, text=True, timeout=60, check=False,
                       env=dict(os.environ, PYTHONPATH=str(Path(mlxfit.__file__).parents[1]),
                                XDG_CONFIG_HOME=str(tmp_path / "cfg")))
    lines = [ln for ln in r.stderr.splitlines() if ln]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert str(src) in lines[0] and "not a regular file" in lines[0]


@pytest.mark.parametrize("text", [
    "backend.cpu.act_hidden = 1.0  # dotted, at the top\n[backend.metal]\nact_q = 2.0\n",
    "[backend]\ncpu.act_hidden = 1.0\n",
    "[backend.cpu]\n  act_hidden   =   1.0   # spaced\n",
    "# only a comment\n",
    "title = 'x'\n[[variants]]\nact_hidden = 9.0\n",
])
def test_edit_toml_sets_exactly_the_fitted_keys(text):
    from mlxfit.verbs.calibrate.toml_edit import edit_toml  # new in issue 29

    def fmt(v):
        return repr(float(v))

    new = edit_toml(text, {("backend", "cpu", "act_hidden"): 3.5, ("decode", "eta"): 0.5}, fmt,
                    {("backend", "cpu", "act_hidden"): "was 1.0"})
    want = tomllib.loads(text)
    want.setdefault("backend", {}).setdefault("cpu", {})["act_hidden"] = 3.5
    want.setdefault("decode", {})["eta"] = 0.5
    assert tomllib.loads(new) == want
    kept = [ln for ln in text.splitlines() if "act_hidden" not in ln]
    assert [ln for ln in kept if ln not in new.splitlines()] == []


def test_edit_toml_refuses_a_layout_it_cannot_edit(tmp_path, cli_file):
    """An inline table cannot take a key on a new line: nothing is written, one line says so."""
    from mlxfit.verbs.calibrate.toml_edit import EditRefused, edit_toml

    text = "backend = {cpu = {act_hidden = 1.0}}\n"
    with pytest.raises(EditRefused):
        edit_toml(text, {("backend", "cpu", "act_ffn"): 2.0}, repr, {})
    user = tmp_path / "calibration.toml"
    user.write_text(text)
    with pytest.raises(MlxfitError, match="cannot update it in place"):
        calibrate(cli_file, write=True, user_file=user)
    assert user.read_text() == text
