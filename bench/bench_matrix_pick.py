"""Latency of `mlxfit matrix` (every SKU) for a 235B MoE, and of `mlxfit pick` over a cache.

    python bench/bench_matrix_pick.py [--runs 7]

The 235B is built here as sparse safetensors (real headers, data holes: nothing to download)
from tests/fixtures/configs/Qwen__Qwen3-235B-A22B.json, laid out as mlx_lm.convert -q writes a
qwen3_moe (experts stacked in switch_mlp, 4-bit affine, group 64), in 27 shards with an index;
the catalog descriptor of mlx-community/Qwen3-235B-A22B-4bit is timed too when it exists.
Prints the median of each measurement. Target (issue 3): every SKU of a 235B MoE under a second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # st_helpers: sparse safetensors and the hub layout

from st_helpers import make_folder, make_hf_cache

CONFIG = ROOT / "tests" / "fixtures" / "configs" / "Qwen__Qwen3-235B-A22B.json"
BITS, GROUP = 4, 64


def _quantized(spec: dict, name: str, shape: list[int]) -> None:
    """A quantized Linear as mlx stores it: packed U32 weight, bf16 scales and biases."""
    *lead, out_f, in_f = shape
    spec[f"{name}.weight"] = ("U32", [*lead, out_f, in_f * BITS // 32])
    spec[f"{name}.scales"] = ("BF16", [*lead, out_f, in_f // GROUP])
    spec[f"{name}.biases"] = ("BF16", [*lead, out_f, in_f // GROUP])


def qwen3_moe_4bit(cfg: dict) -> dict:
    h, n = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    e, moe_i, vocab = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["vocab_size"]
    spec: dict = {}
    _quantized(spec, "model.embed_tokens", [vocab, h])
    for i in range(n):
        p = f"model.layers.{i}."
        _quantized(spec, p + "self_attn.q_proj", [heads * hd, h])
        _quantized(spec, p + "self_attn.k_proj", [kv * hd, h])
        _quantized(spec, p + "self_attn.v_proj", [kv * hd, h])
        _quantized(spec, p + "self_attn.o_proj", [h, heads * hd])
        spec[p + "self_attn.q_norm.weight"] = ("BF16", [hd])
        spec[p + "self_attn.k_norm.weight"] = ("BF16", [hd])
        _quantized(spec, p + "mlp.gate", [e, h])
        _quantized(spec, p + "mlp.switch_mlp.gate_proj", [e, moe_i, h])
        _quantized(spec, p + "mlp.switch_mlp.up_proj", [e, moe_i, h])
        _quantized(spec, p + "mlp.switch_mlp.down_proj", [e, h, moe_i])
        spec[p + "input_layernorm.weight"] = ("BF16", [h])
        spec[p + "post_attention_layernorm.weight"] = ("BF16", [h])
    spec["model.norm.weight"] = ("BF16", [h])
    _quantized(spec, "lm_head", [vocab, h])
    return spec


def shard(spec: dict, n: int) -> dict[str, dict]:
    names = list(spec)
    per = -(-len(names) // n)
    return {f"model-{s + 1:05d}-of-{n:05d}.safetensors":
            {k: spec[k] for k in names[s * per:(s + 1) * per]} for s in range(n)}


def build_235b(root: Path) -> Path:
    cfg = json.loads(CONFIG.read_text())
    cfg["quantization"] = {"group_size": GROUP, "bits": BITS}
    return make_folder(root / "Qwen3-235B-A22B-4bit", cfg, shard(qwen3_moe_4bit(cfg), 27),
                       index=True)


def build_cache(root: Path, folder_235b: Path) -> Path:
    """A hub cache with the 235B and a handful of catalog models (sparse), for pick."""
    from mlxfit.sources.catalog import load_entry

    cache = root / "hub"
    cfg235 = json.loads((folder_235b / "config.json").read_text())
    make_hf_cache(cache, "bench/Qwen3-235B-A22B-4bit", {
        "config.json": (folder_235b / "config.json").read_bytes(),
        "model.safetensors.index.json": (folder_235b / "model.safetensors.index.json").read_bytes(),
        **shard(qwen3_moe_4bit(cfg235), 27),
    }, commit="0" * 40)
    for rid in ("mlx-community/Qwen3-8B-4bit", "mlx-community/Qwen3-30B-A3B-4bit",
                "mlx-community/Qwen3-4B-Instruct-2507-8bit", "mlx-community/gemma-3-27b-it-4bit",
                "mlx-community/gpt-oss-20b-MXFP4-Q8",
                "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit"):
        e = load_entry(rid)
        if e is not None:
            spec = {t.name: (t.dtype, list(t.shape)) for t in e.tensors}
            make_hf_cache(cache, rid, {"config.json": json.dumps(e.config).encode(),
                                       "model.safetensors": spec}, commit="1" * 40)
    return cache


def median_of(fn, runs: int) -> float:
    fn()  # warm: imports, page cache
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def process(cmd: list[str], runs: int, env: dict | None = None) -> tuple[float, float]:
    """Median wall time and median CPU time (user + sys) of a command run as a process. The
    CPU time is what the command costs; the wall time also holds whatever else the machine
    is doing at the moment."""
    import resource

    def once() -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                       env=env)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, cpu

    once()
    got = [once() for _ in range(runs)]
    return statistics.median(w for w, _ in got), statistics.median(c for _, c in got)


def main() -> None:
    import os

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    runs = ap.parse_args().runs

    from mlxfit.hardware.resolve import all_skus
    from mlxfit.sources.catalog import load_entry
    from mlxfit.verbs.matrix import matrix
    from mlxfit.verbs.pick import pick

    n_skus = len(all_skus())
    with tempfile.TemporaryDirectory() as d:
        folder = build_235b(Path(d))
        m = matrix(str(folder), 32768, probe=False)
        print(f"235B MoE (sparse folder): weights {m.weights_bytes / 1e9:.2f} GB, "
              f"{n_skus} SKUs, {m.n_fit} fit at 32,768 tokens")
        rows = [("matrix 235B folder, twin", median_of(
            lambda: matrix(str(folder), 32768, probe=False), runs))]
        if load_entry("mlx-community/Qwen3-235B-A22B-4bit") is not None:
            rows.append(("matrix 235B catalog, twin", median_of(
                lambda: matrix("mlx-community/Qwen3-235B-A22B-4bit", 32768, probe=False), runs)))
        floor = [sys.executable, "-c", "import typer, rich.console"]
        cli = [sys.executable, "-m", "mlxfit", "matrix", str(folder), "--ctx", "32768", "--json"]
        procs = [("import floor (process)", process(floor, runs)),
                 ("matrix 235B folder, CLI process", process(cli, runs))]

        cache = build_cache(Path(d), folder)
        env = {**os.environ, "HF_HUB_CACHE": str(cache)}
        p = pick(8192, machine="M3 Ultra 256GB", cache_dir=cache)
        print(f"pick cache: {len(p.candidates)} models (incl. the 235B); chosen on "
              f"M3 Ultra 256GB: {p.chosen}")
        rows.append((f"pick {len(p.candidates)} cached models, twin", median_of(
            lambda: pick(8192, machine="M3 Ultra 256GB", cache_dir=cache), runs)))
        rows.append(("pick --catalog, twin", median_of(
            lambda: pick(8192, machine="M3 Ultra 256GB", cache_dir=cache, catalog=True), runs)))
        pcli = [sys.executable, "-m", "mlxfit", "pick", "--machine", "M3 Ultra 256GB", "--json"]
        procs.append(("pick, CLI process", process(pcli, runs, env)))

    print(f"{'in-process (Python twin)':36s} {'median s':>9s}  (runs={runs})")
    for name, t in rows:
        print(f"{name:36s} {t:9.3f}")
    print(f"{'process':36s} {'wall s':>9s} {'cpu s':>7s}")
    for name, (w, c) in procs:
        print(f"{name:36s} {w:9.3f} {c:7.3f}")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
