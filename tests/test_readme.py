"""The README's example output is what the command prints today (issue 14): each `$ mlxfit ...`
block under "What it prints" is run through the CLI and compared line by line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from st_helpers import invoke

README = Path(__file__).resolve().parents[1] / "README.md"


def _examples() -> list[tuple[list[str], list[str]]]:
    text = README.read_text()
    section = text.split("\n## What it prints\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```\n(\$ mlxfit .*?)\n```", section, re.DOTALL):
        first, *rest = block.splitlines()
        out.append((shlex.split(first)[2:], rest))
    return out


def test_readme_example_is_the_real_output(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no user calibration or config
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    examples = _examples()
    assert examples, "no example under 'What it prints'"
    for args, want in examples:
        r = invoke(*args)
        got = [ln.rstrip() for ln in r.stdout.splitlines()]
        assert got == want, args
