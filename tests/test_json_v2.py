"""JSON schema 2 through the CLI (docs/json.md): one schema version, one machine object, one
run object, one term shape, rounded floats, errors as JSON; and reports to a pipe unwrapped."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from st_helpers import M4PRO, ON_M4PRO, invoke, make_folder

from mlxfit.render import FLOAT_DIGITS, SCHEMA_VERSION

SRC = str(Path(__file__).resolve().parents[1] / "src")

Q8B = "mlx-community/Qwen3-8B-4bit"
LLAMA70 = "mlx-community/Llama-3.3-70B-Instruct-4bit"
NEXT80 = "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit"
MACHINE_KEYS = {"name", "chip", "gpu_cores", "ram_bytes", "bandwidth_gbs", "usable_bytes",
                "usable_source", "macos_major"}
RUN_KEYS = {"ctx", "gen", "prefill_step_size", "kv_bits", "kv_group_size",
            "quantized_kv_start", "max_kv_size", "backend"}
TERM_KEYS = {"name", "bytes", "formula", "inputs"}


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


def _json(*args: str, codes=(0, 1)) -> dict:
    r = invoke(*args, "--json")
    assert r.exit_code in codes, r.output
    return json.loads(r.stdout)


def _floats(x):
    if isinstance(x, float):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _floats(v)
    elif isinstance(x, list):
        for v in x:
            yield from _floats(v)


def _significant(f: float) -> int:
    """Significant digits of f as printed (repr), trailing zeros dropped."""
    digits = repr(abs(f)).split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return len(digits)


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    """One --json object of each verb that answers without mlx or records."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        env = {"HOME": d, "HF_HUB_CACHE": os.path.join(d, "hub"),
               "XDG_CONFIG_HOME": os.path.join(d, "cfg")}

        def get(*args):
            r = invoke(*args, "--json", env=env)
            assert r.exit_code in (0, 1), r.output
            return json.loads(r.stdout)

        return {
            "fit": get("fit", Q8B, "--ctx", "32768", *ON_M4PRO),
            "matrix": get("matrix", Q8B, "--ctx", "32768", "--chips", "M4 Pro"),
            "pick": get("pick", "--catalog", "--ctx", "8192", *ON_M4PRO),
            "machine": get("machine", M4PRO),
            "models": get("models", "qwen3-8b", "4-bit"),
            "serve-plan": get("serve-plan", Q8B, "--ctx", "8k", "--machine", M4PRO),
            "cluster": get("cluster", NEXT80, "--host", "M4 Max 48GB", "--host", M4PRO,
                           "--link", "tb4"),
            "families": get("families"),
        }


def test_every_verb_carries_the_schema_version(docs):
    assert SCHEMA_VERSION == 2
    for verb, d in docs.items():
        assert d["schema_version"] == SCHEMA_VERSION, verb


def test_one_machine_object_everywhere(docs):
    objs = {
        "fit": [docs["fit"]["machine"]],
        "matrix": [row["machine"] for row in docs["matrix"]["rows"]],
        "pick": [docs["pick"]["machine"]],
        "machine": [docs["machine"]["machine"]],
        "serve-plan": [docs["serve-plan"]["machine"], docs["serve-plan"]["fit"]["machine"]],
        "cluster": [h["machine"] for h in docs["cluster"]["hosts"]]
        + [h["machine"] for p in docs["cluster"]["plans"] for h in p["hosts"]],
    }
    for verb, ms in objs.items():
        assert ms, verb
        for m in ms:
            assert set(m) == MACHINE_KEYS, verb
    # The same SKU gives the same object in every verb.
    m4pro = [m for ms in objs.values() for m in ms if m["name"] == M4PRO]
    assert len(m4pro) >= 4 and all(m == m4pro[0] for m in m4pro)
    assert m4pro[0]["ram_bytes"] == 24 * 2**30 and m4pro[0]["gpu_cores"] == 16
    assert m4pro[0]["chip"] == "M4 Pro" and m4pro[0]["macos_major"] == 26
    rows = docs["matrix"]["rows"]
    assert {r["machine"]["ram_bytes"] // 2**30 for r in rows} == {24, 48, 64}


def test_one_run_object_with_mlx_lm_names(docs):
    runs = [docs["fit"]["run"], docs["matrix"]["run"], docs["cluster"]["run"]]
    for run in runs:
        assert set(run) == RUN_KEYS
        assert run["prefill_step_size"] == 2048 and run["kv_group_size"] == 64
    d = _json("fit", Q8B, "--ctx", "8192", *ON_M4PRO, "--prefill-step-size", "512",
              "--kv-bits", "8", "--kv-group-size", "32", "--quantized-kv-start", "100")
    assert d["run"] == {"ctx": 8192, "gen": 0, "prefill_step_size": 512, "kv_bits": 8,
                        "kv_group_size": 32, "quantized_kv_start": 100, "max_kv_size": None,
                        "backend": "metal"}


def test_terms_have_one_shape(docs):
    fit = docs["fit"]
    lists = [fit["terms"], fit["speed_terms"], fit["serving_terms"]]
    for p in docs["cluster"]["plans"]:
        lists.append(p["speed_terms"])
        lists += [h["terms"] for h in p["hosts"]]
    assert fit["terms"] and fit["speed_terms"]
    for terms in lists:
        for t in terms:
            assert set(t) == TERM_KEYS and isinstance(t["bytes"], int)
    by = {t["name"]: t["bytes"] for t in fit["terms"]}
    assert fit["total_bytes"] == by["weights"] + by["kv_cache"] + by["recurrent_state"] \
        + by["transient"]


def test_advice_kind_is_the_flag_name():
    d = _json("fit", LLAMA70, "--ctx", "65536", "--machine", "M4 Max 64GB")
    kinds = {c["kind"] for o in d["advice"]["options"] for c in o["changes"]}
    assert "prefill_step_size" in kinds and "prefill_step" not in kinds


def test_cluster_has_the_chosen_plan_at_the_top(docs):
    d = docs["cluster"]
    (chosen,) = [p for p in d["plans"] if p["strategy"] == d["chosen"]]
    assert (d["fits"], d["max_safe_context"], d["predicted_decode_tps"]) == (
        chosen["fits"], chosen["max_safe_context"], chosen["predicted_decode_tps"])
    assert d["max_safe_context"] > 8192 and d["predicted_decode_tps"] > 0


def test_floats_are_rounded(docs):
    fl = [f for d in docs.values() for f in _floats(d)]
    assert fl
    assert all(_significant(f) <= FLOAT_DIGITS for f in fl if math.isfinite(f))
    # The tb4 link's latency is 3e-4 s in the table: 300.0 us, not 299.99999999999994.
    assert docs["cluster"]["link"]["latency_us"] == 300.0


@pytest.mark.parametrize("args, kind, field", [
    (["fit", Q8B, "--ctx", "0", *ON_M4PRO], "usage", "--ctx"),
    (["fit", Q8B, "--machine", "M7 Max 64GB"], "machine", "--machine"),
    (["matrix", Q8B, "--gen", "9000", "--ctx", "8192"], "usage", "--gen"),
    (["pick", "--coexist-fraction", "2", *ON_M4PRO], "usage", "--coexist-fraction"),
    (["machine", "M4 Pro 25GB"], "machine", None),
    (["cluster", NEXT80, "--host", M4PRO, "--strategy", "tp"], "usage", "--strategy"),
    (["calibrate", "--from", "/nonexistent/m.jsonl"], None, None),
    (["measure", Q8B, "--ctx", "2"], "usage", "--ctx"),
])
def test_errors_under_json_are_json(args, kind, field):
    r = invoke(*args, "--json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION and set(doc) == {"schema_version", "error"}
    err = doc["error"]
    assert set(err) == {"kind", "message", "file", "field"}
    if kind is not None:
        assert err["kind"] == kind
    if field is not None:
        assert err["field"] == field
    lines = r.stderr.strip().splitlines()
    assert lines == [f"mlxfit: error: {err['message']}"]


def test_error_json_names_the_file_and_field(tmp_path):
    # every field mlx-lm's llama ModelArgs requires is there; num_hidden_layers is garbled
    config = {"model_type": "llama", "num_hidden_layers": "abc", "hidden_size": 8,
              "intermediate_size": 16, "num_attention_heads": 2, "rms_norm_eps": 1e-5,
              "vocab_size": 8}
    folder = make_folder(tmp_path / "m", config,
                         {"model.safetensors": {"lm_head.weight": ("F16", [8, 8])}})
    d = _json("fit", str(folder), *ON_M4PRO, codes=(2,))
    assert d["error"]["kind"] == "config" and d["error"]["field"] == "num_hidden_layers"
    assert d["error"]["file"].endswith("config.json")
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    d = _json("fit", str(folder), *ON_M4PRO, codes=(2,))  # a field mlx-lm requires: named
    assert d["error"]["kind"] == "config" and d["error"]["field"] == "hidden_size"
    (folder / "config.json").write_text("{not json")
    d = _json("fit", str(folder), *ON_M4PRO, codes=(2,))
    assert d["error"]["file"] == str(folder / "config.json")


def test_click_usage_errors_under_json_are_json():
    """Click parses before any verb runs: the console script's own net makes them JSON too."""
    r = subprocess.run([sys.executable, "-m", "mlxfit", "fit", Q8B, "--ctx", "abc", "--json"],
                       check=False,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC},
                       timeout=60)
    assert r.returncode == 2
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "usage" and err["field"] == "--ctx" and "'abc'" in err["message"]
    assert r.stderr.splitlines() == [f"mlxfit: error: {err['message']}"]
    assert "(see mlxfit fit --help)" in err["message"]


def test_without_json_an_error_prints_nothing_on_stdout():
    r = invoke("fit", Q8B, "--ctx", "0", *ON_M4PRO)
    assert r.exit_code == 2 and r.stdout == ""


def test_piped_report_is_not_wrapped():
    """A pipe or a file is not a terminal: the verdict, each note and warning, one line each."""
    r = invoke("fit", LLAMA70, "--machine", "M4 Max 64GB", "--ctx", "65536")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[0] == f"{LLAMA70} on M4 Max 64GB at 65,536 tokens: DOES NOT FIT"
    d = _json("fit", LLAMA70, "--machine", "M4 Max 64GB", "--ctx", "65536")
    for n in d["notes"]:
        assert f"note: {n}" in lines
    for w in d["warnings"]:
        assert f"warning: {w}" in lines
    assert max(len(ln) for ln in lines) > 120  # nothing was cut at 80 columns


def test_terminal_width_still_applies_on_a_terminal(monkeypatch):
    from mlxfit.cli.common import UNWRAPPED_WIDTH, console

    c = console()  # pytest's stdout is captured: not a terminal
    assert not c.is_terminal and c.width == UNWRAPPED_WIDTH
    monkeypatch.setenv("FORCE_COLOR", "1")  # Rich's own switch: treat stdout as a terminal
    monkeypatch.setenv("COLUMNS", "80")
    c = console()
    assert c.is_terminal and c.width == 80


def test_docs_examples_have_the_real_keys(docs):
    """docs/json.md shows each verb's object: its top-level keys are the real ones."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "json.md").read_text()
    for verb, d in docs.items():
        section = text.split(f"\n## `{verb}`\n", 1)[1]
        block = re.search(r"```json\n(.*?)\n```", section, re.DOTALL).group(1)
        assert list(json.loads(block)) == list(d), verb
