"""fit, serve-plan and cluster take --format like matrix, pick and models: "table" is what
they print by default and "json" is --json. Before, `fit --format json` was "No such option"
for a user who had learned the flag from matrix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from st_helpers import ON_M4PRO, invoke

QWEN8 = "mlx-community/Qwen3-8B-4bit"
RUNS = {
    "fit": ("fit", QWEN8, "--ctx", "4096", *ON_M4PRO),
    "serve-plan": ("serve-plan", QWEN8, "--ctx", "4096", *ON_M4PRO),
    "cluster": ("cluster", QWEN8, "--host", "M4 Max 64GB", "--ctx", "4096"),
}


@pytest.mark.parametrize("verb", RUNS)
def test_format_json_is_json(verb):
    flag = invoke(*RUNS[verb], "--json")
    fmt = invoke(*RUNS[verb], "--format", "json")
    assert fmt.exit_code == flag.exit_code
    assert json.loads(fmt.stdout) == json.loads(flag.stdout)
    assert json.loads(fmt.stdout)["model"] == QWEN8


@pytest.mark.parametrize("verb", RUNS)
def test_format_table_is_the_default(verb):
    table = invoke(*RUNS[verb], "--format", "table")
    plain = invoke(*RUNS[verb])
    assert table.exit_code == plain.exit_code
    assert table.stdout == plain.stdout and "{" not in table.stdout.splitlines()[0]


@pytest.mark.parametrize("verb", RUNS)
@pytest.mark.parametrize("fmt", ["csv", "markdown", "yaml"])
def test_other_formats_are_one_line_naming_the_flag(verb, fmt):
    r = invoke(*RUNS[verb], "--format", fmt)
    assert r.exit_code == 2
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("mlxfit: error:")]
    assert len(lines) == 1 and "--format" in lines[0] and repr(fmt) in lines[0]
    assert r.stdout == ""


def test_format_json_makes_a_usage_error_json_too():
    """The console script's own usage errors: with --format json, as with --json, stdout is
    one JSON error object (a script reads one object either way)."""
    p = subprocess.run([sys.executable, "-m", "mlxfit", "fit", "--format", "json",
                        "--no-such-flag"], capture_output=True, text=True, check=False)
    assert p.returncode == 2
    doc = json.loads(p.stdout)
    assert doc["error"]["kind"] == "usage" and "--no-such-flag" in doc["error"]["message"]
