"""Latency of `mlxfit fit` against the import floor, measured in the same run.

    python bench/bench_fit.py [--runs 9]

Prints the median wall time of each command over repeated process runs (interleaved, so
machine noise hits both alike) and the ratio to the floor `python -c "import typer,
rich.console"`. Target (issue 2): fit on a catalog model <= 1.5x the floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

FLOOR = [sys.executable, "-c", "import typer, rich.console"]
CASES = {
    "fit catalog --json": [sys.executable, "-m", "mlxfit", "fit", "mlx-community/Qwen3-8B-4bit",
                           "--ctx", "32768", "--machine", "M4 Pro 24GB", "--json"],
    "fit 80B MoE --json": [sys.executable, "-m", "mlxfit", "fit",
                           "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit", "--ctx", "131072",
                           "--machine", "M3 Ultra 256GB", "--json"],
}


# A pip-installed mlxfit has its bytecode compiled; a session with PYTHONDONTWRITEBYTECODE=1
# would recompile every module on every run and measure the compiler, not mlxfit.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=ENV)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    runs = ap.parse_args().runs
    times: dict[str, list[float]] = {"floor": [], **{k: [] for k in CASES}}
    wall(FLOOR)  # warm the page cache and write the bytecode
    for cmd in CASES.values():
        wall(cmd)
    for _ in range(runs):
        times["floor"].append(wall(FLOOR))
        for name, cmd in CASES.items():
            times[name].append(wall(cmd))
    floor = statistics.median(times["floor"])
    print(f"{'command':24s} {'median s':>9s} {'ratio':>6s}  (runs={runs})")
    print(f"{'import floor':24s} {floor:9.3f} {1.0:6.2f}")
    for name in CASES:
        m = statistics.median(times[name])
        print(f"{name:24s} {m:9.3f} {m / floor:6.2f}")


if __name__ == "__main__":
    main()
