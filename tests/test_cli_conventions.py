"""The command-line conventions users expect (issue 14): --version, Typer's shell completion,
size suffixes in one parser, --revision by hash prefix, and inputs refused as impossible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from st_helpers import M4PRO, ON_M4PRO, config_dict, invoke, make_hf_cache

from mlxfit._version import __version__
from mlxfit.cli.sizes import gigabytes, tokens

SRC = str(Path(__file__).resolve().parents[1] / "src")
Q8B = "mlx-community/Qwen3-8B-4bit"


def _mlxfit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The console script's own entry (main()), where click's errors and completion live."""
    return subprocess.run([sys.executable, "-m", "mlxfit", *args], capture_output=True,
                          text=True, check=False, timeout=60,
                          env={**os.environ, "PYTHONPATH": SRC, **(env or {})})


def test_version():
    r = _mlxfit("--version")
    assert r.returncode == 0 and r.stdout == f"mlxfit {__version__}\n"


def test_shell_completion():
    r = _mlxfit("--show-completion", "bash")
    assert r.returncode == 0 and "_MLXFIT_COMPLETE=complete_bash" in r.stdout
    # What the installed script asks for: the verbs, then a verb's flags.
    r = _mlxfit(env={"_MLXFIT_COMPLETE": "complete_bash", "COMP_WORDS": "mlxfit ma",
                     "COMP_CWORD": "1"})
    assert r.stdout.split() == ["machine", "matrix"]
    r = _mlxfit(env={"_MLXFIT_COMPLETE": "complete_bash", "COMP_WORDS": "mlxfit fit --max-k",
                     "COMP_CWORD": "2"})
    assert r.stdout.split() == ["--max-kv-size"]
    assert "--install-completion" in invoke("--help").stdout


@pytest.mark.parametrize("text, n", [("32768", 32768), ("32k", 32768), ("128K", 131072),
                                     ("1M", 1048576), ("1.5k", 1536), (" 100", 100),
                                     ("1_000", 1000), ("-5", -5)])
def test_token_counts(text, n):
    assert tokens(text) == n


@pytest.mark.parametrize("text, gb", [("16", 16.0), ("16GB", 16.0), ("16G", 16.0),
                                      ("16 gb", 16.0), ("24GiB", 24 * 2**30 / 1e9),
                                      ("512MB", 0.512), ("0.5TB", 500.0)])
def test_memory_sizes(text, gb):
    assert gigabytes(text) == pytest.approx(gb, rel=1e-12)


@pytest.mark.parametrize("verb", [["fit", Q8B], ["matrix", Q8B, "--chips", "M4 Pro"],
                                  ["pick"], ["cluster", Q8B, "--host", M4PRO]])
def test_every_verb_takes_suffixed_context(verb):
    """`--ctx 32k` is `--ctx 32768` in every verb that takes a context."""
    m = ["--machine", M4PRO] if verb[0] in ("fit", "pick") else []
    a = invoke(*verb, *m, "--ctx", "32k", "--json")
    b = invoke(*verb, *m, "--ctx", "32768", "--json")
    assert a.exit_code == b.exit_code and a.exit_code in (0, 1), a.output
    assert json.loads(a.stdout) == json.loads(b.stdout)
    assert json.loads(a.stdout)["context_tokens"] == 32768


@pytest.mark.parametrize("verb", [["fit", Q8B], ["pick"]])
def test_every_verb_takes_suffixed_memory_budget(verb):
    a = json.loads(invoke(*verb, *ON_M4PRO, "--memory-budget", "16GB", "--json").stdout)
    b = json.loads(invoke(*verb, *ON_M4PRO, "--memory-budget", "16", "--json").stdout)
    c = json.loads(invoke(*verb, *ON_M4PRO, "--memory-budget", "16GiB", "--json").stdout)
    assert a["machine"]["usable_bytes"] == b["machine"]["usable_bytes"] == 16 * 10**9
    assert c["machine"]["usable_bytes"] == 16 * 2**30
    assert a["machine"]["usable_source"] == "--memory-budget 16.00 GB"


@pytest.mark.parametrize("args, needle", [
    (["--ctx", "32x"], "Invalid value for '--ctx': '32x' is not a number of tokens"),
    (["--ctx", "1.3k"], "Invalid value for '--ctx': '1.3k' is not a whole number of tokens"),
    (["--memory-budget", "16XB"], ("Invalid value for '--memory-budget': '16XB' is not a memory "
                                  "size")),
])
def test_bad_sizes_are_one_line(args, needle):
    r = _mlxfit("fit", Q8B, *ON_M4PRO, *args)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"mlxfit: error: {needle}")


@pytest.mark.parametrize("args, line", [
    (["--memory-budget", "30"], ("--memory-budget 30.00 GB is more than the 25.77 GB (24 GiB) of "
                                "RAM of M4 Pro 24GB")),
    (["--macos", "12"], ("--macos must be a macOS major version MLX runs on (14, 15, 26), got "
                        "12: MLX needs macOS 14 or later")),
    (["--macos", "20"], ("--macos must be a macOS major version MLX runs on (14, 15, 26), got "
                        "20: 16 to 25 do not exist (Apple went from 15 to 26)")),
    (["--macos", "99"], ("--macos must be a macOS major version MLX runs on (14, 15, 26), got "
                        "99: not a released macOS")),
    (["--kv-group-size", "48"], ("--kv-group-size must be 32, 64 or 128 (what mx.quantize "
                                "supports), got 48")),
    (["--kv-group-size", "0"], ("--kv-group-size must be 32, 64 or 128 (what mx.quantize "
                               "supports), got 0")),
    (["--quantized-kv-start", "-1"], "--quantized-kv-start must be >= 0, got -1"),
])
def test_impossible_inputs_are_refused(args, line):
    """Each without --kv-bits too: a value mlx-lm would reject is never carried silently."""
    r = invoke("fit", Q8B, *ON_M4PRO, *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"mlxfit: error: {line}"]


@pytest.mark.parametrize("macos", ["14", "15", "26"])
def test_released_macos_versions_are_accepted(macos):
    r = invoke("fit", Q8B, *ON_M4PRO, "--macos", macos, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["machine"]["macos_major"] == int(macos)


def test_revision_by_unique_hash_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = "acme/tiny-qwen"
    cfg = config_dict("Qwen__Qwen3-0.6B")
    spec = {"model.embed_tokens.weight": ("BF16", [151936, 1024])}
    a, b = "a1b2c3d4e5f6" + "0" * 28, "a1b2c3ffffff" + "1" * 28
    for commit in (a, b):
        make_hf_cache(tmp_path / "hub", repo, {"config.json": json.dumps(cfg).encode(),
                                                "model.safetensors": spec},
                      commit=commit, refs=("main",) if commit == b else ())
    r = invoke("fit", repo, "--revision", a[:12], *ON_M4PRO, "--json")
    assert r.exit_code in (0, 1), r.output
    assert json.loads(r.stdout)["source"] == "hf-cache"
    full = json.loads(invoke("fit", repo, "--revision", a, *ON_M4PRO, "--json").stdout)
    assert json.loads(r.stdout) == full
    r = invoke("fit", repo, "--revision", "a1b2c3", *ON_M4PRO)
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        (f"mlxfit: error: revision a1b2c3 of {repo} matches 2 cached snapshots "
        f"({a[:12]}, {b[:12]}): give more of the hash")]
