"""Rewrite each verb's example in docs/json.md from what the command prints today.

Each `## \\`verb\\`` section's first line in backticks is the command and its first ```json block
the example; the block is replaced by the command's real output, lists cut to their first two
items so the page stays readable (tests/test_json_v2.py checks the top-level keys).

    python scripts/regen_json_docs.py            # rewrite docs/json.md
    python scripts/regen_json_docs.py --check    # exit 1 if it is stale
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "json.md"
SECTION = re.compile(r"(\n## `(?P<verb>[a-z-]+)`\n\n`(?P<cmd>mlxfit [^`]+)`\n\n```json\n)(?P<body>.*?)(\n```)",
                     re.DOTALL)


def _trim(x, depth=0):
    if isinstance(x, dict):
        return {k: _trim(v, depth + 1) for k, v in x.items()}
    if isinstance(x, list):
        return [_trim(v, depth + 1) for v in x[:2]]
    return x


def _run(cmd: str) -> str | None:
    args = shlex.split(cmd)[1:]
    with tempfile.TemporaryDirectory() as home:  # an empty cache, as the tests use
        env = {"HOME": home, "HF_HUB_CACHE": f"{home}/hub", "XDG_CONFIG_HOME": f"{home}/cfg",
               "PATH": "/usr/bin:/bin"}
        r = subprocess.run([sys.executable, "-m", "mlxfit", *args], capture_output=True,
                           text=True, env={**env, "PYTHONPATH": str(DOC.parents[1] / "src")},
                           check=False)
        if r.returncode not in (0, 1):  # e.g. measure needs mlx and a model: keep the example
            print(f"kept: {cmd}: exit {r.returncode}: {r.stderr.strip()}", file=sys.stderr)
            return None
        # the temporary home would change the page on every run: show a user's instead
        return json.dumps(_trim(json.loads(r.stdout.replace(home, "/Users/you"))), indent=2)


def main() -> int:
    text = DOC.read_text()

    def one(m: re.Match) -> str:
        out = _run(m.group("cmd"))
        return m.group(0) if out is None else m.group(1) + out + m.group(5)

    new = SECTION.sub(one, text)
    if "--check" in sys.argv:
        return int(new != text)
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
