"""Every verb's Python result gives the JSON its CLI prints: ``mlxfit.<verb>(...).to_dict()``
equals ``json.loads`` of ``mlxfit <verb> ... --json`` (same keys, same values, schema_version
included), because both are built by the one render function (docs/json.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from st_helpers import LLAMA64, LLAMA128, M4PRO, invoke

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.memory import Run
from mlxfit.estimate.solve import totals_at
from mlxfit.model.parse import parse_config

Q8B = "mlx-community/Qwen3-8B-4bit"
Q8B_BF16 = "mlx-community/Qwen3-8B-bf16"
GEMMA12 = "mlx-community/gemma-3-12b-it-4bit"


def _cli(*args: str) -> dict:
    r = invoke(*args, "--json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


FITS = {
    "plain": ((Q8B,), {"ctx": 32768}, ("--ctx", "32k")),
    "advise": ((GEMMA12,), {"ctx": 131072, "advise": True}, ("--ctx", "128k", "--advise")),
    "does not fit": ((GEMMA12,), {"ctx": 131072}, ("--ctx", "128k")),
    "parallel": ((Q8B,), {"ctx": 16384, "parallel": 4}, ("--ctx", "16k", "--parallel", "4")),
    "q-bits": ((Q8B_BF16,), {"ctx": 8192, "q_bits": 4}, ("--q-bits", "4")),
    "draft": ((Q8B,), {"ctx": 8192, "draft_model": "mlx-community/Qwen3-0.6B-4bit"},
              ("--draft-model", "mlx-community/Qwen3-0.6B-4bit")),
}


@pytest.mark.parametrize("case", list(FITS))
def test_fit_to_dict_is_the_cli_json(case):
    args, kw, flags = FITS[case]
    # advise="auto" is the CLI's default: the advice comes when it does not fit
    r = mlxfit.fit(*args, machine=M4PRO, **{"advise": "auto", **kw})
    assert r.to_dict() == _cli("fit", *args, *flags, "--machine", M4PRO)


def test_fit_to_dict_carries_advice_serving_and_the_conversion():
    d = mlxfit.fit(GEMMA12, 131072, machine=M4PRO, advise=True).to_dict()
    assert d["schema_version"] == 2 and d["advice"]["options"]
    d = mlxfit.fit(Q8B, 16384, machine=M4PRO, parallel=4).to_dict()
    assert d["serving"]["parallel"] == 4
    d = mlxfit.fit(Q8B_BF16, 8192, machine=M4PRO, q_bits=4).to_dict()
    assert d["quantization_plan"]["command"].endswith("-q --q-bits 4")
    assert d["weights"]["conversion"] == d["quantization_plan"]


def test_matrix_to_dict_is_the_cli_json():
    r = mlxfit.matrix(Q8B, 32768, chips="M4*")
    assert r.to_dict() == _cli("matrix", Q8B, "--ctx", "32k", "--chips", "M4*")


def test_pick_to_dict_is_the_cli_json():
    r = mlxfit.pick(16384, catalog=True, machine=M4PRO)
    assert r.to_dict() == _cli("pick", "--catalog", "--ctx", "16k", "--machine", M4PRO)


def test_serve_plan_to_dict_is_the_cli_json():
    r = mlxfit.serve_plan(Q8B, 32768, machine=M4PRO)
    assert r.to_dict() == _cli("serve-plan", Q8B, "--ctx", "32k", "--machine", M4PRO)


def test_cluster_to_dict_is_the_cli_json():
    hosts = ["M4 Max 64GB", "M4 Pro 48GB"]
    r = mlxfit.cluster(Q8B, hosts, 32768)
    assert r.to_dict() == _cli("cluster", Q8B, "--host", hosts[0], "--host", hosts[1],
                               "--ctx", "32k")


def test_machine_to_dict_is_the_cli_json():
    assert mlxfit.machine(M4PRO).to_dict() == _cli("machine", M4PRO)


def test_models_to_dict_is_the_cli_json():
    assert mlxfit.models().to_dict() == _cli("models")
    assert mlxfit.models("qwen3").to_dict() == _cli("models", "qwen3")


def test_families_to_dict_is_the_cli_json():
    assert mlxfit.families().to_dict() == _cli("families")


def _record(config: dict, ctx: int, step: int) -> dict:
    """A CPU measurement record as `mlxfit measure --save` writes it, peak as predicted."""
    cal = load_calibration()
    run = Run(ctx=ctx, gen=1, prefill_step_size=step, backend="cpu")
    t = totals_at(parse_config(config, act_bytes=4), 10_000_000, run, cal)
    return {
        "config": config, "ctx": ctx, "gen_tokens": 1, "prefill_step_size": step,
        "kv_bits": None, "kv_group_size": 64, "quantized_kv_start": 5000, "max_kv_size": None,
        "act_bytes": 4, "dtype": "float32", "backend": "cpu", "predicted": {"backend": "cpu"},
        "active_before_load_bytes": 16, "active_after_load_bytes": 10_000_016,
        "weights_measured_bytes": 10_000_000, "peak_bytes": int(t.total * 1.1) + 16,
        "cache_bytes_end": t.kv + t.state, "state_bytes_end": t.state,
    }


def test_calibrate_to_dict_is_the_cli_json(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    recs = [_record(c, ctx, step) for c in (LLAMA64, LLAMA128)
            for ctx, step in ((300, 2048), (1100, 512), (2100, 2048), (4096, 512))]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = mlxfit.calibrate(path)
    assert r.to_dict() == _cli("calibrate", "--from", str(path))


def test_to_json_is_the_text_the_cli_prints():
    r = mlxfit.fit(Q8B, 32768, machine=M4PRO, advise="auto")
    out = invoke("fit", Q8B, "--ctx", "32k", "--machine", M4PRO, "--json")
    assert json.loads(r.to_json()) == json.loads(out.stdout)
    assert r.to_json().strip() == out.stdout.strip()


def test_twins_take_sizes_as_the_cli_spells_them():
    # F13: "32k" and "16GB" are what users type; the twin reads them as the CLI does.
    by_string = mlxfit.fit(Q8B, "32k", machine=M4PRO, memory_budget_gb="16GB")
    by_number = mlxfit.fit(Q8B, 32768, machine=M4PRO, memory_budget_gb=16)
    assert by_string.to_dict() == by_number.to_dict()
    assert mlxfit.serve_plan(Q8B, "16k", machine=M4PRO).to_dict() == \
        mlxfit.serve_plan(Q8B, 16384, machine=M4PRO).to_dict()
    assert mlxfit.matrix(Q8B, "8k", chips="M4 Pro").to_dict() == \
        mlxfit.matrix(Q8B, 8192, chips="M4 Pro").to_dict()


@pytest.mark.parametrize(("kw", "param"), [
    ({"ctx": "32kk"}, "ctx"), ({"ctx": 3.5}, "ctx"), ({"ctx": "9" * 400 + "k"}, "ctx"),
    ({"memory_budget_gb": "16 parsecs"}, "memory_budget_gb"),
    ({"memory_budget_gb": [16]}, "memory_budget_gb"),
])
def test_twins_refuse_a_bad_size_naming_the_parameter(kw, param):
    with pytest.raises(mlxfit.errors.UsageError) as e:
        mlxfit.fit(Q8B, **{"ctx": 8192, **kw}, machine=M4PRO)
    assert e.value.param == param
    assert len(str(e.value)) < 200


def test_decode_speed_says_at_which_context():
    # ux-3 F17: the decode speed is the last token's, with the whole context in the cache; the
    # report says so and gives the speed near empty too (reviews quote that one).
    r = mlxfit.fit(Q8B, 32768, machine=M4PRO)
    short = mlxfit.fit(Q8B, 1024, machine=M4PRO)
    assert r.predicted_decode_tps_short == pytest.approx(short.predicted_decode_tps, rel=1e-9)
    assert r.predicted_decode_tps_short > r.predicted_decode_tps
    text = invoke("fit", Q8B, "--ctx", "32k", "--machine", M4PRO).stdout
    lo, hi = r.bands.predicted_decode_tps
    assert (f"{r.predicted_decode_tps:,.1f} tok/s ({lo:,.1f}-{hi:,.1f}) with 32K in context "
            f"({r.predicted_decode_tps_short:,.1f} tok/s at 1K)") in text
    assert short.predicted_decode_tps_short is None
    d = r.to_dict()
    assert (d["predicted_decode_tps_short"], d["short_context"]) == (
        round(r.predicted_decode_tps_short, 2), 1024)


def test_a_long_time_to_first_token_reads_in_minutes():
    r = mlxfit.fit("mlx-community/Llama-3.3-70B-Instruct-4bit", 32768, machine="M4 Pro 64GB")
    assert r.predicted_ttft_s > 120
    text = invoke("fit", "mlx-community/Llama-3.3-70B-Instruct-4bit", "--ctx", "32k",
                  "--machine", "M4 Pro 64GB").stdout
    lo, hi = r.bands.predicted_ttft_s
    assert (f"{r.predicted_ttft_s:,.1f} s ({lo:,.1f}-{hi:,.1f} s; "
            f"{r.predicted_ttft_s / 60:,.1f} min)") in text
