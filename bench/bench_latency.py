"""The latency budget (issue 8): every verb against the import floor, in the same run.

    python bench/bench_latency.py [--runs 9]

Builds its inputs first (nothing downloaded): a 100-shard local model (sparse safetensors,
Qwen3-8B's tensors spread over 100 files) and an HF cache of 50 models. Then times, as
separate processes, interleaved so machine noise hits all alike, the median of --runs:

    floor    python -c "import typer, rich.console"
    fit      a catalog model, and the 100-shard folder        target <= 1.5 x floor
    matrix   every SKU of a catalog 235B MoE                  target <= 1.7 x floor
    pick     over the 50-model cache                          target <= 2.5 x floor

and, in process, a 1,000-shard / 200,000-tensor header scan (target < 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from st_helpers import make_hf_cache, make_many_shards, make_qwen3_8b_bf16

CONFIGS = ROOT / "tests" / "fixtures" / "configs"
PY = sys.executable


def build_inputs(root: Path) -> tuple[Path, Path]:
    cfg = json.loads((CONFIGS / "Qwen__Qwen3-8B.json").read_text())
    folder = make_qwen3_8b_bf16(root / "Qwen3-8B-100-shards", cfg, 100)
    cache = root / "hub"
    small = json.loads((CONFIGS / "Qwen__Qwen3-0.6B.json").read_text())
    one = {"model.embed_tokens.weight": ("BF16", [151936, 1024]),
           "model.layers.0.mlp.up_proj.weight": ("BF16", [3072, 1024])}
    for i in range(50):
        make_hf_cache(cache, f"bench/model-{i:02d}",
                      {"config.json": json.dumps(small).encode(), "model.safetensors": one},
                      commit=f"{i:040x}")
    return folder, cache


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as d:
        folder, cache = build_inputs(Path(d))
        # Compiled bytecode, as after `pip install`; no network; the bench's own cache.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache))
        m = ["-m", "mlxfit"]
        cases = {
            "import floor": [PY, "-c", "import typer, rich.console"],
            "fit catalog --json": [PY, *m, "fit", "mlx-community/Qwen3-8B-4bit", "--ctx",
                                   "32768", "--machine", "M4 Pro 24GB", "--json"],
            # bf16 (16.4 GB): fits a 64 GB Mac, so this times the 100 header reads, not the
            # advisor a run that does not fit would add.
            "fit 100-shard folder": [PY, *m, "fit", str(folder), "--ctx", "32768",
                                     "--machine", "M4 Max 64GB", "--json"],
            "matrix 235B, all SKUs": [PY, *m, "matrix", "mlx-community/Qwen3-235B-A22B-4bit",
                                      "--ctx", "32768", "--json"],
            "pick, 50 cached models": [PY, *m, "pick", "--machine", "M4 Max 64GB", "--json"],
        }
        targets = {"fit catalog --json": 1.5, "fit 100-shard folder": 1.5,
                   "matrix 235B, all SKUs": 1.7, "pick, 50 cached models": 2.5}

        def wall(cmd: list[str]) -> float:
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=env, check=False)
            return time.perf_counter() - t

        for cmd in cases.values():  # warm: page cache, bytecode
            wall(cmd)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(runs):
            for name, cmd in cases.items():
                times[name].append(wall(cmd))
        floor = statistics.median(times["import floor"])
        print(f"{'command':26s} {'median s':>9s} {'x floor':>8s} {'target':>7s}  (runs={runs})")
        for name in cases:
            med = statistics.median(times[name])
            tgt = f"{targets[name]:.1f}" if name in targets else ""
            print(f"{name:26s} {med:9.3f} {med / floor:8.2f} {tgt:>7s}")

        from mlxfit.sources.safetensors_header import read_headers

        paths = make_many_shards(Path(d) / "scan", 1000, 200)
        read_headers(paths)  # warm the page cache: this times parsing, not the disk
        scans = []
        for _ in range(3):
            t = time.perf_counter()
            n = len(read_headers(paths))
            scans.append(time.perf_counter() - t)
        print(f"header scan: 1000 shards, {n} tensors: median {statistics.median(scans):.3f} s "
              "(target < 1 s)")


if __name__ == "__main__":
    main()
