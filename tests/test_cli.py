"""The CLI end to end: catalog and folder models, JSON shape, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from st_helpers import (
    ON_M4PRO,
    config_dict,
    invoke,
    make_folder,
    make_hf_cache,
    make_qwen3_8b_bf16,
)

import mlxfit


def qwen3_8b_bf16_folder(root: Path) -> Path:
    """A sparse bf16 Qwen3-8B with its real config, in 2 shards + index (st_helpers)."""
    cfg = config_dict("Qwen__Qwen3-8B")
    return make_qwen3_8b_bf16(root / "Qwen3-8B", cfg, 2)


QWEN3_8B_BF16 = 2 * (2 * 151936 * 4096 + 4096 + 36 * (
    2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 12288 * 4096 + 2 * 128 + 2 * 4096))


def test_catalog_model_json_shape_and_sum():
    r = invoke("fit", "mlx-community/Qwen3-8B-4bit", "--ctx", "32768", *ON_M4PRO, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for key in ("schema_version", "model", "machine", "context_tokens", "weights_bytes",
                "kv_bytes", "transient_bytes", "total_bytes", "usable_bytes", "fits",
                "max_safe_context", "predicted_decode_tps", "terms", "warnings"):
        assert key in d
    assert d["schema_version"] == 2
    assert set(d["machine"]) == {"name", "chip", "gpu_cores", "ram_bytes", "bandwidth_gbs",
                                 "usable_bytes", "usable_source", "macos_major"}
    assert (d["machine"]["chip"], d["machine"]["gpu_cores"], d["machine"]["macos_major"]) == (
        "M4 Pro", 16, 26)
    assert d["weights_bytes"] == 4_607_731_712  # the real mlx-lm conversion, to the byte
    assert d["total_bytes"] == (d["weights_bytes"] + d["kv_bytes"] + d["state_bytes"]
                                + d["transient_bytes"])
    assert d["kv_bytes"] == 32768 * 36 * 8 * 128 * 4
    assert d["machine"]["bandwidth_gbs"] == 273
    assert d["fits"] is True and d["max_safe_context"] >= 32768
    assert any("descriptor" in n for n in d["notes"])


def test_cli_json_equals_library_result():
    r = invoke("fit", "mlx-community/Qwen3-30B-A3B-4bit", "--ctx", "16384",
               "--machine", "M4 Max 64GB", "--json")
    lib = mlxfit.fit("mlx-community/Qwen3-30B-A3B-4bit", 16384, machine="M4 Max 64GB")
    # The CLI prints the library's result through the one JSON writer: the result's to_dict().
    assert json.loads(r.output) == lib.to_dict()


def test_does_not_fit_exits_1_and_gives_no_speed():
    r = invoke("fit", "mlx-community/Qwen3-8B-4bit", "--ctx", "8192",
               "--memory-budget", "5", *ON_M4PRO, "--json")
    assert r.exit_code == 1
    d = json.loads(r.output)
    assert d["fits"] is False and d["predicted_decode_tps"] is None
    assert d["usable_bytes"] == 5_000_000_000


def test_folder_model_sums_headers_exactly(tmp_path):
    folder = qwen3_8b_bf16_folder(tmp_path)
    r = invoke("fit", str(folder), "--ctx", "4096", "--machine", "M3 Max 128GB", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["weights_bytes"] == QWEN3_8B_BF16
    assert d["source"] == "folder"
    # bf16 activations: 4096 tokens -> 4096 slots x 147,456 B
    assert d["kv_bytes"] == 4096 * 147_456


def test_hf_cache_repo_id(tmp_path, monkeypatch):
    cfg = dict(config_dict("Qwen__Qwen3-0.6B"), num_hidden_layers=1)  # the layer it holds
    spec = {"model.embed_tokens.weight": ("BF16", [151936, 1024]),
            "model.layers.0.mlp.up_proj.weight": ("BF16", [3072, 1024])}
    make_hf_cache(tmp_path / "hub", "acme/tiny", {"config.json": json.dumps(cfg).encode(),
                                                  "model.safetensors": spec}, commit="a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    r = invoke("fit", "acme/tiny", "--ctx", "2048", *ON_M4PRO, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["source"] == "hf-cache"
    assert d["weights_bytes"] == 2 * (151936 * 1024 + 3072 * 1024)


def test_explain_prints_every_term():
    r = invoke("fit", "mlx-community/gemma-3-27b-it-4bit", "--ctx", "65536",
               "--machine", "M4 Max 64GB", "--explain")
    assert r.exit_code == 0
    for name in ("weights", "kv_cache", "transient", "activations", "attention_scores",
                 "kv_growth_copy", "weights_read_per_token"):
        assert name in r.output
    assert "GB (10^9 B)" in r.output


@pytest.mark.parametrize("args, needle", [
    (["--ctx", "0", *ON_M4PRO], "--ctx"),
    (["--ctx", "-3", *ON_M4PRO], "--ctx"),
    (["--machine", "M9 Ultra 24GB"], "M9"),
    (["--machine", "M4 Pro 32GB"], "24"),
    (["--kv-bits", "7", *ON_M4PRO], "--kv-bits"),
    (["--memory-budget", "-1", *ON_M4PRO], "--memory-budget"),
    (["--backend", "cuda", *ON_M4PRO], "backend"),
])
def test_bad_flags_one_line_exit_2(args, needle):
    """Each case names its machine: none of them is about probing this host (a host whose
    probe fails would otherwise fail them with the RAM error first)."""
    r = invoke("fit", "mlx-community/Qwen3-8B-4bit", *args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.output


def test_bad_models_one_line_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "config.json").write_text("{not json")
    ggufonly = tmp_path / "gguf"
    ggufonly.mkdir()
    (ggufonly / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (ggufonly / "model.gguf").write_bytes(b"GGUF")
    unknown = make_folder(tmp_path / "unknown", {"model_type": "zzz"},
                          {"model.safetensors": {"w": ("BF16", [4])}})
    cases = [
        (str(tmp_path / "nope"), "nope"),
        ("acme/not-there", "not-there"),
        (str(garbled), "config.json"),
        (str(ggufonly), "model.gguf"),
        (str(unknown), "zzz"),
    ]
    for model, needle in cases:
        r = invoke("fit", model, *ON_M4PRO)
        assert r.exit_code == 2, (model, r.output)
        lines = [ln for ln in r.output.strip().splitlines() if ln]
        assert len(lines) == 1 and needle in lines[0], (model, r.output)


def test_python_dash_m_entry_point():
    p = subprocess.run([sys.executable, "-m", "mlxfit", "fit", "mlx-community/Qwen3-8B-4bit",
                        "--ctx", "1024", *ON_M4PRO, "--json"], capture_output=True, text=True,
                       check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["context_tokens"] == 1024


@pytest.mark.parametrize("args, needle", [
    (["fit", "--ctx", "abc"], "--ctx"),
    (["fit", "--no-such-flag"], "--no-such-flag"),
    (["no-such-verb"], "no-such-verb"),
])
def test_usage_errors_are_one_line_exit_2(args, needle):
    """click's own usage errors (the console script, not CliRunner) end like every other bad
    input: one line on stderr, exit 2, no framed box, no traceback."""
    p = subprocess.run([sys.executable, "-m", "mlxfit", *args], capture_output=True,
                       text=True, check=False)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("mlxfit: error:")
    assert p.stdout == ""
