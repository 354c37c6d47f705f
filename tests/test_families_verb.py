"""`mlxfit families` and `mlxfit.families`, and where a fit's cache plan comes from
(`--plan auto|table|mlx-lm`, `family_known`, `plan_source`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from sanitize_oracle import model_layout
from st_helpers import invoke, make_folder

from mlxfit.estimate.memory import Run, kv_bytes_final
from mlxfit.model.families import FAMILIES, NOT_SUPPORTED, NOT_TEXT_LM
from mlxfit.model.inputs import model_inputs
from mlxfit.model.mlx_extra import mlx_missing_reason
from mlxfit.render import SCHEMA_VERSION
from mlxfit.render.families import families_to_json
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.families import build_table, families
from mlxfit.verbs.plan import with_plan

ROOT = Path(__file__).resolve().parent.parent
FAMILY_DIR = Path(__file__).parent / "fixtures" / "families"
NEEDS_MLX = pytest.mark.skipif(mlx_missing_reason() is not None,
                               reason="mlx/mlx-lm not importable: pip install \".[test,measure]\"")


def _writer():
    spec = importlib.util.spec_from_file_location("write_families",
                                                  ROOT / "scripts" / "write_families.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_families_json_is_written_from_the_fixtures() -> None:
    """data/families.json is what scripts/write_families.py makes of the fixtures today."""
    configs = {k: v for k, v in _writer().fixture_configs().items()
               if v[0].get("model_type") not in NOT_SUPPORTED}
    assert json.loads((ROOT / "data" / "families.json").read_text()) == build_table(configs)


def test_every_family_is_listed_with_its_caches() -> None:
    r = families()
    assert [row.family for row in r.rows] == sorted(FAMILIES)
    assert all(row.verified_in_ci and row.caches for row in r.rows)
    kimi = next(row for row in r.rows if row.family == "kimi_linear")
    assert kimi.caches == ("ArraysCache (linear)", "KVCache (MLA latent)")
    assert "kimi_k2" in next(row for row in r.rows if row.family == "deepseek_v3").model_types
    assert r.not_text_lm == NOT_TEXT_LM and r.not_supported == NOT_SUPPORTED


def test_families_cli_json_is_the_twin() -> None:
    res = invoke("families", "--json")
    assert res.exit_code == 0
    out = json.loads(res.stdout)
    assert out == json.loads(json.dumps(families_to_json(families())))
    assert out["schema_version"] == SCHEMA_VERSION
    text = invoke("families")
    assert text.exit_code == 0 and "kimi_linear" in text.stdout


# --------------------------------------------------------------------------- --plan


def _folder(tmp_path: Path, config: dict) -> Path:
    hidden = config.get("hidden_size", 64)
    return make_folder(tmp_path / "m", config, {"model.safetensors": {
        "model.embed_tokens.weight": ("BF16", (config.get("vocab_size", 100), hidden))}})


UNKNOWN = {"model_type": "foo_lm", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "vocab_size": 100}


def test_unknown_family_is_marked_unverified(tmp_path: Path) -> None:
    """No row and no mlx-lm module: the plain-transformer estimate, flagged in the headline and
    the JSON, exit 0 (it fits)."""
    folder = _folder(tmp_path, UNKNOWN)
    res = invoke("fit", str(folder), "--ctx", "2000", "--machine", "M4 Pro 24GB", "--json")
    assert res.exit_code == 0
    out = json.loads(res.stdout)
    assert out["family_known"] is False
    assert out["plan_source"] == "plain transformer (unverified)"
    assert any("UNVERIFIED" in w for w in out["warnings"])
    text = invoke("fit", str(folder), "--ctx", "2000", "--machine", "M4 Pro 24GB")
    assert "UNVERIFIED" in text.stdout.splitlines()[0]


def test_known_family_comes_from_the_table(tmp_path: Path) -> None:
    folder = _folder(tmp_path, json.loads((FAMILY_DIR / "olmo3.json").read_text()))
    out = json.loads(invoke("fit", str(folder), "--ctx", "2000", "--machine", "M4 Pro 24GB",
                            "--json", "--plan", "table").stdout)
    assert (out["family_known"], out["plan_source"]) == (True, "table")


def test_bad_plan_is_one_line(tmp_path: Path) -> None:
    res = invoke("fit", str(_folder(tmp_path, UNKNOWN)), "--plan", "guess")
    assert res.exit_code == 2 and "--plan must be one of" in res.stderr


@NEEDS_MLX
def test_plan_mlx_lm_cross_checks_a_known_family(tmp_path: Path) -> None:
    folder = _folder(tmp_path, json.loads((FAMILY_DIR / "kimi_linear.json").read_text()))
    out = json.loads(invoke("fit", str(folder), "--ctx", "3000", "--machine", "M4 Pro 24GB",
                            "--json", "--plan", "mlx-lm").stdout)
    assert out["plan_source"].startswith("mlx-lm ")
    assert any("cross-checked: the family table matches" in n for n in out["notes"])
    table = json.loads(invoke("fit", str(folder), "--ctx", "3000", "--machine", "M4 Pro 24GB",
                              "--json", "--plan", "table").stdout)
    assert (out["kv_bytes"], out["state_bytes"]) == (table["kv_bytes"], table["state_bytes"])


@NEEDS_MLX
def test_plan_mlx_lm_for_a_family_mlx_lm_lacks_fails_in_one_line(tmp_path: Path) -> None:
    res = invoke("fit", str(_folder(tmp_path, UNKNOWN)), "--plan", "mlx-lm")
    assert res.exit_code == 2
    assert "mlx-lm 0." in res.stderr and "foo_lm" in res.stderr and "Traceback" not in res.stderr


@NEEDS_MLX
def test_auto_plan_reads_mlx_lm_when_the_table_has_no_row(tmp_path: Path) -> None:
    """A config the table sizes as a plain transformer but mlx-lm runs (here: a Kimi-Linear
    config whose family row is set aside, as for a family added by a newer mlx-lm): auto
    derives the plan from mlx-lm's classes and its bytes equal mlx-lm's caches."""
    from dataclasses import replace

    from mlxfit.model.oracle import cache_plan

    config = json.loads((FAMILY_DIR / "kimi_linear.json").read_text())
    inputs = model_inputs(resolve_model(str(_folder(tmp_path, config))))
    unknown = replace(inputs, cfg=replace(inputs.cfg, family_known=False,
                                          plan_source="plain transformer (unverified)"))
    run = Run(ctx=2500, prefill_step_size=512)
    got, warnings, notes = with_plan(unknown, config, "auto", run)
    assert got.cfg.plan_source.startswith("mlx-lm ") and got.cfg.family_known
    assert warnings == () and any("read from mlx-lm" in n for n in notes)
    truth = cache_plan(config, run.ctx, prefill_step_size=run.prefill_step_size)
    assert (kv_bytes_final(got.cfg, run), got.cfg.state_bytes) == (truth.kv_bytes,
                                                                   truth.state_bytes)


@NEEDS_MLX
def test_auto_plan_falls_back_when_mlx_lm_fails(tmp_path: Path) -> None:
    inputs = model_inputs(resolve_model(str(_folder(tmp_path, UNKNOWN))))
    got, warnings, _ = with_plan(inputs, UNKNOWN, "auto", Run(ctx=1000))
    assert got is inputs and not got.cfg.family_known
    assert len(warnings) == 1 and "mlx-lm 0." in warnings[0] and "UNVERIFIED" in warnings[0]


@NEEDS_MLX
def test_missing_field_mlx_lm_requires_is_named(tmp_path: Path) -> None:
    """gear's ModelArgs requires rms_norm_eps: refused in one line naming config.json and the
    field before any plan is read, exit 2."""
    config = json.loads((FAMILY_DIR / "gear.json").read_text())
    del config["rms_norm_eps"]
    res = invoke("fit", str(_folder(tmp_path, config)), "--plan", "mlx-lm")
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "config.json: missing 'rms_norm_eps'" in lines[0]
    assert "mlx-lm" in lines[0]


def test_oracle_stays_off_the_plain_import_path() -> None:
    import subprocess
    import sys

    code = ("import sys, mlxfit.verbs.fit, mlxfit.verbs.families; "
            "print(any(m.startswith(('mlx.', 'mlx_lm')) or m in ('mlx', 'mlx_lm') "
            "or m == 'mlxfit.model.oracle' for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src")}, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- transients by kind


def _transients(cfg, ctx: int = 3000, step: int = 512) -> dict:
    from mlxfit.calibration.load import load_calibration
    from mlxfit.estimate.memory import peak_phase

    cal = load_calibration()
    return {be: {t.name: t.bytes for t in peak_phase(cfg, Run(ctx=ctx, prefill_step_size=step,
                                                                   backend=be),
                                                      cal.backend(be)).terms}
            for be in ("metal", "cpu")}


# Each kind of layer with a transient of its own: MLA + KDA, RWKV-7, RG-LRU + sliding window,
# GLA, gated delta, Mamba2.
PLAN_KINDS = ["kimi_linear", "rwkv7", "recurrent_gemma", "bailing_moe_linear", "qwen3_next",
              "nemotron_h", "deepseek_v3"]


@NEEDS_MLX
@pytest.mark.parametrize("family", PLAN_KINDS)
def test_mlx_lm_plan_sizes_the_same_prefill_as_the_table(tmp_path: Path, family: str) -> None:
    """--plan mlx-lm on a known family: every transient term, on both backends, is the
    table's (each layer keeps its kind: MLA latent, recurrence, window), not a plain
    transformer's."""
    config = json.loads((FAMILY_DIR / f"{family}.json").read_text())
    inputs = model_inputs(resolve_model(str(_folder(tmp_path, config))))
    got, warnings, _ = with_plan(inputs, config, "mlx-lm", Run(ctx=3000, prefill_step_size=512))
    assert got.cfg.plan_source.startswith("mlx-lm ") and warnings == ()
    assert _transients(got.cfg) == _transients(inputs.cfg)


@NEEDS_MLX
@pytest.mark.parametrize("family", ["qwen3_next", "nemotron_h", "olmo_hybrid", "falcon_h1"])
def test_a_family_the_table_lacks_gets_its_recurrence_from_mlx_lm(tmp_path: Path,
                                                                  family: str) -> None:
    """Without a row (here: the row set aside and the mixer unknown, as a plain transformer
    is sized), the plan read from mlx-lm finds the shared recurrence the model runs
    (gated_delta.py, ssm.py) and its widths in the state: the table's prefill transient."""
    from dataclasses import replace

    config = json.loads((FAMILY_DIR / f"{family}.json").read_text())
    folder = _folder(tmp_path, config)
    if family == "falcon_h1":  # mlx-lm's falcon_h1 sanitize reads layer 0's conv first
        params = model_layout(config)
        convs = {k: v for k, v in params.items() if k.endswith("mamba.conv1d.weight")}
        folder = make_folder(tmp_path / "f", config, {"model.safetensors": {
            "model.embed_tokens.weight": params["model.embed_tokens.weight"], **convs}})
    inputs = model_inputs(resolve_model(str(folder)))
    plain = replace(inputs.cfg, family_known=False, plan_source="plain transformer (unverified)",
                    linear_scan="", linear_v_heads=0, linear_k_dim=0, linear_v_dim=0,
                    ssm_heads=0, ssm_head_dim=0)
    assert _transients(plain) != _transients(inputs.cfg)
    got, _, notes = with_plan(replace(inputs, cfg=plain), config, "auto",
                              Run(ctx=3000, prefill_step_size=512))
    assert any("read from mlx-lm" in n for n in notes)
    assert _transients(got.cfg) == _transients(inputs.cfg)


def test_kv_line_says_how_the_caches_grow(tmp_path: Path) -> None:
    """deepseek_v41's caches are kept at exact size: the report does not claim 256-token steps
    for them, and a plain KVCache model still says it has them."""
    v41 = _folder(tmp_path / "v41",
                  json.loads((FAMILY_DIR / "deepseek_v41_compressed.json").read_text()))
    line = next(ln for ln in invoke("fit", str(v41), "--ctx", "2000", "--machine",
                                    "M4 Pro 24GB").stdout.splitlines() if ln.startswith("KV"))
    assert "exact-size" in line and "256-token steps)" in line
    olmo3 = _folder(tmp_path / "olmo3", json.loads((FAMILY_DIR / "olmo3.json").read_text()))
    line = next(ln for ln in invoke("fit", str(olmo3), "--ctx", "2000", "--machine",
                                    "M4 Pro 24GB").stdout.splitlines() if ln.startswith("KV"))
    assert line.rstrip().endswith("mlx-lm's 256-token steps")
