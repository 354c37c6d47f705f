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
    # typer's own switch: the shell named, not detected from the process tree (which a test
    # run started in the background, or by a CI service, may not have)
    r = _mlxfit("--show-completion", "bash",
                env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
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


def test_every_option_of_every_verb_has_help():
    """Walks the real Typer app: each verb, each parameter (arguments included)."""
    from typer.main import get_command

    from mlxfit.cli.app import VERBS, app

    root = get_command(app)
    missing = [("mlxfit", p.name) for p in root.params if not (p.help or "").strip()]
    for verb in VERBS:
        cmd = root.get_command(None, verb)
        assert cmd is not None and (cmd.help or "").strip(), verb
        missing += [(verb, p.name) for p in cmd.params
                    if not (getattr(p, "help", None) or "").strip()]
    assert missing == []
    assert len(VERBS) >= 8


# Flags two or more verbs share whose help or default is deliberately their own verb's (each
# has its own alias in mlxfit/cli/options.py): (flag, verb) -> why.
HELP_EXCEPTIONS = {
    ("--ctx", "serve-plan"): "each request's context, not one generation's",
    ("--gen", "measure"): "measure really generates them and times decode over them",
    ("--machine", "measure"): "measure runs on this Mac: a name only if it cannot be probed",
    ("--dtype", "measure"): "the random weights' dtype, not mlx_lm.convert's",
    ("--backend", "calibrate"): "a filter on saved records, repeatable; sizes no run",
    ("--force", "measure"): "runs mlx-lm past the predicted peak (cluster's writes files)",
    ("--write", "calibrate"): "a switch storing the constants (cluster's is a folder)",
}
DEFAULT_EXCEPTIONS = {
    ("--ctx", "serve-plan"): "a server's per-request context: 32768",
    ("--ctx", "measure"): "required: a real run has no default context",
    ("--gen", "measure"): "at least 1 token to time decode over: 16",
    ("--backend", "calibrate"): "no filter: every backend's records",
    ("--write", "calibrate"): "a switch (False), cluster's a folder (None)",
}
# A twin's parameter whose default is not the CLI's on purpose: (verb, parameter) -> why.
TWIN_EXCEPTIONS = {
    ("calibrate", "params"): "the CLI passes --param only when given; the twin's default is all",
}


def _verb_commands():
    import importlib

    from typer.main import get_command

    from mlxfit.cli.app import VERBS

    return {v: get_command(importlib.import_module(f"mlxfit.cli.{v.replace('-', '_')}").app)
            for v in VERBS}


def _shared_flags():
    """flag -> {verb: click option} for every flag two or more verbs take."""
    by_flag: dict[str, dict] = {}
    for verb, cmd in _verb_commands().items():
        for p in cmd.params:
            if p.param_type_name == "option":
                by_flag.setdefault(p.opts[0], {})[verb] = p
    return {f: verbs for f, verbs in by_flag.items() if len(verbs) >= 2}


def test_shared_flags_have_one_help_and_one_default():
    """A flag two verbs share is declared once (mlxfit/cli/options.py): one help text and one
    default in every verb, unless listed above with the reason it differs."""
    shared = _shared_flags()
    assert {"--ctx", "--json", "--prefill-step-size", "--macos", "--max-kv-size"} <= set(shared)
    for exceptions in (HELP_EXCEPTIONS, DEFAULT_EXCEPTIONS):  # no stale entries
        assert [k for k in exceptions if k[1] not in shared.get(k[0], {})] == []
    drift = {}
    for f, verbs in sorted(shared.items()):
        helps = {v: p.help for v, p in verbs.items() if (f, v) not in HELP_EXCEPTIONS}
        defaults = {v: p.default for v, p in verbs.items() if (f, v) not in DEFAULT_EXCEPTIONS}
        if len(set(helps.values())) > 1:
            drift[f, "help"] = helps
        if len({repr(d) for d in defaults.values()}) > 1:
            drift[f, "default"] = defaults
    assert drift == {}


def test_twin_defaults_are_the_cli_defaults():
    """`mlxfit.fit(...)` and `mlxfit fit` size the same run when neither is told otherwise: each
    twin parameter's signature default is its flag's default (mlx-lm's named once, in
    mlxfit.mlx_lm_defaults)."""
    import inspect

    import mlxfit
    from mlxfit.cli.common import flag

    checked, differ = 0, {}
    for verb, cmd in _verb_commands().items():
        sig = inspect.signature(getattr(mlxfit, verb.replace("-", "_"))).parameters
        twin = {flag(n): p for n, p in sig.items()} | {n: p for n, p in sig.items()}
        for p in cmd.params:
            key = p.opts[0] if p.param_type_name == "option" else p.name
            tp = twin.get(key)
            if tp is None or tp.default is inspect.Parameter.empty or p.required:
                continue
            if (verb, tp.name) in TWIN_EXCEPTIONS:
                continue
            checked += 1
            if tp.default != p.default:
                differ[verb, key] = (tp.default, p.default)
    assert differ == {}
    assert checked >= 80
