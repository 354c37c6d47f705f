"""`mlxfit measure` guards the user (issue 14): a progress line on a terminal, a refusal before
building what cannot fit this machine, and an at-once warning for runs MLX's CPU backend makes
very slow. Through the CLI; the runs are tiny float32 models on MLX's CPU backend."""

from __future__ import annotations

import json

import pytest
from st_helpers import LLAMA64, invoke

from mlxfit.model.mlx_extra import mlx_missing_reason

MISSING = mlx_missing_reason()
pytestmark = [pytest.mark.mlx, pytest.mark.skipif(MISSING is not None,
                                                  reason=f"mlx not importable ({MISSING})")]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(LLAMA64))
    return path


def test_progress_on_a_terminal_only(tiny, monkeypatch):
    args = ("measure", str(tiny), "--random-weights", "--dtype", "float32", "--ctx", "600",
            "--gen", "3", "--prefill-step-size", "256")
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    assert "measure:" not in r.stderr  # a pipe: no progress line
    monkeypatch.setenv("FORCE_COLOR", "1")  # Rich's switch: stderr is then a terminal
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    shown = r.stderr.replace("\r", "\n")
    assert "measure: loading the model" in shown
    # 597 prompt tokens in chunks of 256: the last token is left for the first decode step.
    assert "measure: prefill 256 of 597 prompt tokens (chunk 1 of 3)" in shown
    assert "measure: prefill 512 of 597 prompt tokens (chunk 2 of 3)" in shown
    assert "measure: decode 3 of 3 tokens" in shown


def test_a_run_that_cannot_fit_here_is_refused_before_building():
    """The 1T-parameter Kimi-K2 from the catalog, built with random weights: refused in
    well under a second, nothing allocated."""
    r = invoke("measure", "mlx-community/Kimi-K2-Instruct-4bit", "--random-weights",
               "--ctx", "512", "--json")
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert err["message"].startswith("the run needs ")
    assert "can give it: it would swap or be killed; a smaller model or --ctx, or --force" \
        in err["message"]


def test_cpu_warning_for_quantized_weights_comes_first(tiny, tmp_path):
    q = tmp_path / "q" / "config.json"
    q.parent.mkdir()
    q.write_text(json.dumps({**LLAMA64, "quantization": {"group_size": 64, "bits": 4}}))
    r = invoke("measure", str(q), "--random-weights", "--dtype", "float32", "--ctx", "300",
               "--gen", "2", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (w,) = doc["warnings"]
    assert w.startswith("MLX's CPU backend runs quantized (4-bit) matmuls very slowly")
    assert r.stderr.splitlines()[0] == f"warning: {w}"  # before the run, not after
    r = invoke("measure", str(tiny), "--random-weights", "--dtype", "float32", "--ctx", "300",
               "--gen", "2", "--json")
    assert json.loads(r.stdout)["warnings"] == [] and "warning" not in r.stderr


def test_ctx_0_is_worded_as_fit_words_it():
    # ux-3 F19: one wording of the same mistake in fit and measure
    from st_helpers import invoke

    fit = invoke("fit", "mlx-community/Qwen3-8B-4bit", "--ctx", "0").stderr.strip()
    measure = invoke("measure", "mlx-community/Qwen3-8B-4bit", "--ctx", "0").stderr.strip()
    assert fit == measure == "mlxfit: error: --ctx must be at least 1 token, got 0"


def test_verb_help_does_not_repeat_the_completion_flags():
    from st_helpers import invoke

    assert "--install-completion" in invoke("--help").stdout
    for verb in ("fit", "matrix", "pick", "serve-plan", "cluster", "measure"):
        assert "--install-completion" not in invoke(verb, "--help").stdout, verb
    for verb in ("matrix", "cluster"):
        assert "Hub repo id" in invoke(verb, "--help", terminal_width=200).stdout, verb
