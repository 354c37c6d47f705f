"""The twins' parameters: checked at each twin's entry, before any model is resolved, Hub
request made, file read or machine probed; the library names the parameter (``ctx``), the CLI
words it as its flag (``--ctx``). Also the one Run builder and the one quant-suffix rule."""

from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub.constants as hfc
import pytest
from hub_server import FakeHub
from st_helpers import make_folder
from typer.testing import CliRunner

import mlxfit
from mlxfit.cli.app import app
from mlxfit.cli.common import error_text
from mlxfit.errors import UsageError
from mlxfit.estimate.memory import Run, run_from, run_from_record
from mlxfit.model.names import base_name, quant_family
from mlxfit.render.pick import pick_to_json
from mlxfit.sources.catalog import catalog_ids
from mlxfit.verbs.fit import sibling_candidates

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
MISSING = "/nonexistent/model-folder"
Q8B = "mlx-community/Qwen3-8B-4bit"
runner = CliRunner()


def _raises(fn, *args, **kw) -> UsageError:
    with pytest.raises(UsageError) as e:
        fn(*args, **kw)
    return e.value


# --------------------------------------------------------------------------- the library


def test_fit_names_ctx_before_looking_for_the_model():
    # No machine: a probe, like the missing folder, would come after the check.
    e = _raises(mlxfit.fit, MISSING, 0)
    assert e.param == "ctx" and str(e) == "ctx must be at least 1 token, got 0"


@pytest.mark.parametrize("twin, args, kw, param", [
    ("fit", (MISSING, 8192), {"gen": -1}, "gen"),
    ("fit", (MISSING, 8192), {"gen": 8192}, "gen"),
    ("fit", (MISSING, 2 * 10**9), {}, "ctx"),
    ("fit", (MISSING, 8192), {"prefill_step_size": 0}, "prefill_step_size"),
    ("fit", (MISSING, 8192), {"kv_bits": 7}, "kv_bits"),
    ("fit", (MISSING, 8192), {"kv_bits": 8, "kv_group_size": 48}, "kv_group_size"),
    ("fit", (MISSING, 8192), {"kv_bits": 8, "quantized_kv_start": -1}, "quantized_kv_start"),
    ("fit", (MISSING, 8192), {"max_kv_size": 0}, "max_kv_size"),
    ("fit", (MISSING, 8192), {"backend": "cuda"}, "backend"),
    ("fit", (MISSING, 8192), {"memory_budget_gb": -1.0}, "memory_budget_gb"),
    ("fit", (MISSING, 8192), {"macos": 0}, "macos"),
    ("fit", (MISSING, 8192), {"parallel": 0}, "parallel"),
    ("fit", (MISSING, 8192), {"prompt_cache": -1}, "prompt_cache"),
    ("fit", (MISSING, 8192), {"wired_limit_mb": -1}, "wired_limit_mb"),
    ("fit", (MISSING, 8192), {"advise": "yes"}, "advise"),
    ("matrix", (MISSING, 0), {}, "ctx"),
    ("matrix", (MISSING, 8192), {"kv_bits": 7}, "kv_bits"),
    ("matrix", (MISSING, 8192), {"backend": "cuda"}, "backend"),
    ("matrix", (MISSING, 8192), {"macos": 5}, "macos"),
    ("pick", (0,), {}, "ctx"),
    ("pick", (8192,), {"macos": 0}, "macos"),
    ("pick", (8192,), {"memory_budget_gb": 0.0}, "memory_budget_gb"),
    ("pick", (8192,), {"coexist_fraction": 0.0}, "coexist_fraction"),
    ("pick", (8192,), {"default_model": "  "}, "default_model"),
    # the hosts file is not read either
    ("cluster", (MISSING, ["M4 Max 128GB"], 0), {"hosts_file": "/nonexistent/h.toml"}, "ctx"),
    ("cluster", (MISSING, ["M4 Max 128GB"], 8192), {"prefill_step_size": 0},
     "prefill_step_size"),
    ("cluster", (MISSING, ["M4 Max 128GB"], 8192), {"backend": "cuda"}, "backend"),
    ("cluster", (MISSING, ["M4 Max 128GB"], 8192), {"macos": 0}, "macos"),
    ("measure", (MISSING, 0), {}, "ctx"),
    ("measure", (MISSING, 8192), {"gen": 0}, "gen"),
    ("measure", (MISSING, 8192), {"kv_bits": 7}, "kv_bits"),
    ("measure", (MISSING, 8192), {"dtype": "int4"}, "dtype"),
    # the measurements file does not exist: the bad backend is named first
    ("calibrate", ("/nonexistent/m.jsonl",), {"backends": ("cuda",)}, "backends"),
    ("calibrate", ("/nonexistent/m.jsonl",), {"params": ("nope",)}, "params"),
    ("machine", (None,), {"macos": 0}, "macos"),
])
def test_every_twin_names_the_bad_parameter(twin, args, kw, param, tmp_path):
    if twin == "pick":  # an empty cache of its own: nothing to read
        kw = {**kw, "cache_dir": tmp_path / "hub"}
    e = _raises(getattr(mlxfit, twin), *args, **kw)
    assert e.param == param and param in str(e), str(e)
    assert "--" not in str(e), str(e)  # the library speaks its parameters, not flags


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A local Hub holding acme/tiny, huggingface_hub pointed at it, an empty cache."""
    from huggingface_hub.utils import close_session

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(hfc, "HF_HUB_OFFLINE", False)
    cfg = json.loads((CONFIGS / "Qwen__Qwen3-0.6B.json").read_text())
    cfg["num_hidden_layers"] = 1  # the one layer its tensors hold (a deeper config is refused)
    folder = make_folder(tmp_path / "tiny", cfg, {"model.safetensors": {
        "model.embed_tokens.weight": ("BF16", [151936, 1024]),
        "model.layers.0.mlp.up_proj.weight": ("BF16", [3072, 1024])}})
    with FakeHub() as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        s.add_model("acme/tiny", folder)
        yield s
        close_session()


def test_no_hub_request_for_a_bad_parameter(hub: FakeHub):
    e = _raises(mlxfit.fit, "acme/tiny", 0, machine="M4 Pro 24GB")
    assert e.param == "ctx" and hub.requests() == []
    _raises(mlxfit.matrix, "acme/tiny", 8192, kv_bits=7, probe=False)
    assert hub.requests() == []
    # The same call with a good ctx does reach the Hub: the test above can see a request.
    assert mlxfit.fit("acme/tiny", 4096, machine="M4 Pro 24GB").source_kind == "hub"
    assert hub.requests() != []


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("args, line", [
    (["fit", MISSING, "--ctx", "0", "--machine", "M4 Pro 24GB"],
     "mlxfit: error: --ctx must be at least 1 token, got 0"),
    (["matrix", MISSING, "--ctx", "0"], "mlxfit: error: --ctx must be at least 1 token, got 0"),
    (["cluster", MISSING, "--host", "M4 Max 128GB", "--ctx", "0"],
     "mlxfit: error: --ctx must be at least 1 token, got 0"),
    (["measure", MISSING, "--ctx", "0"],  # worded as fit words it (ux-3 F19)
     "mlxfit: error: --ctx must be at least 1 token, got 0"),
    (["pick", "--ctx", "0", "--machine", "M4 Pro 24GB"],
     "mlxfit: error: --ctx must be at least 1 token, got 0"),
    (["fit", MISSING, "--gen", "9000", "--ctx", "8192"],
     "mlxfit: error: --gen must be between 0 and --ctx - 1, got 9000"),
    (["fit", MISSING, "--memory-budget", "-1"],
     "mlxfit: error: --memory-budget must be a positive number of GB, got -1.0"),
    (["fit", MISSING, "--kv-bits", "8", "--kv-group-size", "48"],
     "mlxfit: error: --kv-group-size must be 32, 64 or 128 (what mx.quantize supports), got 48"),
    (["fit", MISSING, "--prefill-step-size", "0"],
     "mlxfit: error: --prefill-step-size must be positive, got 0"),
    (["fit", MISSING, "--parallel", "0"],
     "mlxfit: error: --parallel must be between 1 and 4096, got 0"),
    (["matrix", MISSING, "--macos", "3"], ("mlxfit: error: --macos must be a macOS major "
                                           "version MLX runs on (14, 15, 26), got 3: MLX needs "
                                           "macOS 14 or later")),
])
def test_cli_words_the_parameter_as_its_flag(args, line):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [line] and r.stdout == ""


def test_cli_words_only_the_parameters_the_error_names():
    e = UsageError("iogpu.wired_limit_mb exists only on Apple Silicon Macs; ctx_x and gen",
                   param="wired_limit_mb")
    assert error_text(e) == str(e)  # a sysctl's name and other words stay as they are
    e = UsageError("kv_bits: run without kv_bits or keep quantized_kv_start >= ctx",
                   param="kv_bits", also=("quantized_kv_start", "ctx"))
    assert error_text(e) == ("--kv-bits: run without --kv-bits or keep --quantized-kv-start "
                             ">= --ctx")


# --------------------------------------------------------------------------- one Run builder


def test_run_from_record_reads_measure_parameters():
    rec = {"ctx": 4096, "gen_tokens": 16, "prefill_step_size": 512, "kv_bits": 8,
           "kv_group_size": 32, "quantized_kv_start": 0, "max_kv_size": 1024}
    assert run_from_record(rec, "cpu") == Run(ctx=4096, gen=16, prefill_step_size=512, kv_bits=8,
                                              kv_group_size=32, quantized_kv_start=0,
                                              max_kv_size=1024, backend="cpu")
    bare = run_from_record({"ctx": 300, "prefill_step_size": 2048}, "metal")
    assert (bare.gen, bare.kv_bits, bare.kv_group_size, bare.quantized_kv_start,
            bare.max_kv_size) == (0, None, 64, 5000, None)
    assert _raises(run_from_record, {"ctx": 0, "prefill_step_size": 2048}, "cpu").param == "ctx"
    assert run_from(ctx=8192, kv_group_size=128).kv_group_size == 128


# --------------------------------------------------------------------------- one name rule


@pytest.mark.parametrize("name, base", [
    ("mlx-community/Qwen3-4B-Instruct-2507-8bit", "Qwen3-4B-Instruct-2507"),
    ("mlx-community/gpt-oss-20b-MXFP4-Q8", "gpt-oss-20b"),
    ("mlx-community/Qwen3.5-9B-MLX-8bit", "Qwen3.5-9B"),
    ("mlx-community/NVIDIA-Nemotron-Nano-9B-v2-4bits", "NVIDIA-Nemotron-Nano-9B-v2"),
    ("mlx-community/Llama-3.3-70B-Instruct-4bit-DWQ", "Llama-3.3-70B-Instruct"),
    ("mlx-community/DeepSeek-V2-Lite-Chat-4bit-mlx", "DeepSeek-V2-Lite-Chat"),
    ("meta-llama/Llama-3.2-3B", "Llama-3.2-3B"),
    ("8bit", "8bit"),
])
def test_base_name(name, base):
    assert base_name(name) == base
    assert quant_family(name) == base.lower()


def test_pick_base_model_and_advisor_siblings_agree(tmp_path, monkeypatch):
    """pick's JSON base_model and the advisor's sibling quantizations group the same models."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # siblings: the catalog only
    p = mlxfit.pick(8192, catalog=True, machine="M4 Max 128GB", cache_dir=tmp_path / "hub")
    base = {row["model"]: row["base_model"] for row in pick_to_json(p)["catalog"]}
    assert set(base) == set(catalog_ids())
    for rid, family in base.items():
        same = {c for c, b in base.items() if c != rid and b.casefold() == family.casefold()}
        assert set(sibling_candidates(rid)) == same, rid
    assert set(sibling_candidates("mlx-community/Qwen3-8B-4bit")) == {
        "mlx-community/Qwen3-8B-6bit", "mlx-community/Qwen3-8B-8bit",
        "mlx-community/Qwen3-8B-bf16"}
    assert set(sibling_candidates("mlx-community/NVIDIA-Nemotron-Nano-9B-v2-4bits")) == {
        "mlx-community/NVIDIA-Nemotron-Nano-9B-v2-6bit"}


def test_a_quoted_user_value_is_never_reworded_as_a_flag():
    """The user's own text ('backend', 'ctx') stays as typed; only mlxfit's words become flags."""
    e = UsageError("backend 'backend': unknown (known: cpu, metal)", param="backend")
    assert error_text(e) == "--backend 'backend': unknown (known: cpu, metal)"
    r = CliRunner().invoke(app, ["fit", "--backend", "ctx", "--machine", "M4 Pro 24GB"])
    assert r.exit_code == 2
    assert "--backend 'ctx': unknown" in r.output and "'--ctx'" not in r.output


@pytest.mark.parametrize("call, param, cli, line", [
    (lambda: mlxfit.fit("mlx-community/Qwen3-8B-4bit", machine="M9 Max"), "machine",
     ["fit", "--machine", "M9 Max"], "--machine 'M9 Max' has no RAM size"),
    (lambda: mlxfit.matrix("mlx-community/Qwen3-8B-4bit", chips="Z*"), "chips",
     ["matrix", "mlx-community/Qwen3-8B-4bit", "--chips", "Z*"], "--chips 'z*' matches no chip"),
    (lambda: mlxfit.cluster("mlx-community/Qwen3-8B-4bit", []), "hosts",
     ["cluster", "mlx-community/Qwen3-8B-4bit"], "give at least one --host (or --hosts-file)"),
])
def test_machine_chips_and_hosts_errors_name_the_parameter(call, param, cli, line):
    """The library says the parameter ("machine 'M9 Max' ..."), the CLI says the flag."""
    with pytest.raises(mlxfit.errors.MlxfitError) as info:
        call()
    assert info.value.param == param and "--" not in str(info.value)
    r = CliRunner().invoke(app, cli)
    assert r.exit_code == 2 and line in r.output
