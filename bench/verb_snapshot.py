"""Run the built-in catalog through every verb and write what each run printed, so a refactor
can be checked byte for byte against the code before it.

    python bench/verb_snapshot.py OUT.jsonl            # record (about 800 runs, 2 processes)
    python bench/verb_snapshot.py OUT.jsonl --diff OLD.jsonl

Each line is one run: its argv, exit code, stdout and stderr. Runs are subprocesses of the
installed `mlxfit` with a fixed terminal width, no network and a private cache. `--help` output
is not recorded (help texts are allowed to change)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

MLXFIT = [sys.executable, "-m", "mlxfit.cli.app"]
MACHINES = ("M4 Pro 24GB", "M3 Max 36GB", "M2 Ultra 192GB", "M4 Max 128GB", "M1 8GB")


def catalog() -> list[dict]:
    out = subprocess.run([*MLXFIT, "models", "--json"], capture_output=True, text=True,
                         check=True).stdout
    return [m for m in json.loads(out)["models"] if m["source"] == "catalog"]


def runs(models: list[dict]) -> list[list[str]]:
    cmds: list[list[str]] = [
        ["models", "--json"], ["models"], ["families", "--json"], ["families"],
        ["machine", "M4 Pro 24GB", "--json"], ["machine", "M3 Ultra 512GB"],
    ]
    for mach in MACHINES:
        cmds += [["pick", "--catalog", "--machine", mach, "--ctx", "32k", "--json"],
                 ["pick", "--catalog", "--machine", mach, "--ctx", "8k"],
                 ["pick", "--catalog", "--machine", mach, "--format", "csv", "--quants", "4,8"]]
    for i, m in enumerate(models):
        mid = m["model"]
        mach = MACHINES[i % len(MACHINES)]
        unquant = m["quant"] in ("bf16", "fp16", "f16", "float16", "bfloat16", "f32")
        cmds += [
            ["fit", mid, "--ctx", "32768", "--machine", "M4 Pro 24GB", "--json"],
            ["fit", mid, "--ctx", "32768", "--machine", "M4 Pro 24GB"],
            ["fit", mid, "--ctx", "8k", "--machine", mach, "--explain"],
            ["fit", mid, "--ctx", "20000", "--machine", mach, "--kv-bits", "8", "--json"],
            ["fit", mid, "--ctx", "100000", "--machine", "M2 Ultra 192GB", "--max-kv-size",
             "4096", "--json", "--advise"],
            ["fit", mid, "--ctx", "128k", "--machine", "M4 Pro 24GB", "--advise"],
            ["fit", mid, "--ctx", "16k", "--gen", "512", "--machine", "M4 Max 128GB",
             "--parallel", "4", "--json"],
            ["fit", mid, "--ctx", "4096", "--machine", "M4 Max 128GB", "--backend", "cpu",
             "--prefill-step-size", "512", "--json"],
            ["serve-plan", mid, "--ctx", "8192", "--machine", "M4 Max 128GB", "--json"],
            ["serve-plan", mid, "--ctx", "32k", "--machine", mach],
            ["matrix", mid, "--ctx", "8192", "--json"],
            ["matrix", mid, "--ctx", "32k", "--format", "markdown"],
            ["cluster", mid, "--host", "M4 Max 64GB", "--host", "M4 Pro 48GB", "--ctx", "16k",
             "--json"],
            ["cluster", mid, "--host", "2x M3 Ultra 512GB", "--strategy", "tensor", "--explain"],
        ]
        if unquant:
            cmds += [["fit", mid, "--q-bits", "4", "--ctx", "8k", "--machine", mach, "--json"],
                     ["matrix", mid, "--quants", "4,mixed_3_6,mxfp4", "--ctx", "8k",
                      "--format", "csv"]]
    return cmds


def one(argv: list[str], env: dict) -> dict:
    p = subprocess.run([*MLXFIT, *argv], capture_output=True, text=True, env=env,
                       stdin=subprocess.DEVNULL)
    return {"argv": argv, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def record(path: str) -> None:
    env = dict(os.environ, COLUMNS="120", HF_HUB_OFFLINE="1", NO_COLOR="1",
               MLXFIT_CACHE_DIR=tempfile.mkdtemp(prefix="mlxfit-snap-"),
               HF_HOME=tempfile.mkdtemp(prefix="mlxfit-snap-hf-"))
    cmds = runs(catalog())
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda a: one(a, env), cmds))
    with open(path, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    print(f"{len(results)} runs -> {path}")


def _masked(r: dict) -> tuple:
    """The run without the recording's own temporary folder names (each recording makes new ones)."""
    tmp = re.compile(r"/tmp/mlxfit-snap-(hf-)?[a-z0-9_]+")
    return r["rc"], tmp.sub("<tmp>", r["stdout"]), tmp.sub("<tmp>", r["stderr"])


def diff(new_path: str, old_path: str) -> int:
    def load(p):
        with open(p) as f:
            return {json.dumps(r["argv"]): r for r in map(json.loads, f)}
    old, new = load(old_path), load(new_path)
    same = differ = 0
    for key, o in old.items():
        n = new.get(key)
        if n is None:
            print(f"missing in new: {key}")
            differ += 1
        elif _masked(o) == _masked(n):
            same += 1
        else:
            differ += 1
            print(f"DIFFERS: {key}: rc {o['rc']} -> {n['rc']}")
    print(f"{same} identical, {differ} differ, of {len(old)} runs")
    return 1 if differ else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--diff", metavar="OLD")
    a = ap.parse_args()
    if a.diff:
        sys.exit(diff(a.out, a.diff))
    record(a.out)
