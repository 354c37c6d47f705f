"""Reading a 100-shard model from the Hub through the local test server, 50 ms per request.

    python bench/bench_hub.py [--runs 5] [--shards 100] [--latency 0.05] [--workers N] [--today]

Each run starts with an empty mlxfit cache, so every header is fetched again: model info, then
config.json / index / kv_config.json and, per shard, Range 0-99999 at the resolve URL (302 to
the "CDN" server), which holds these headers whole. Done one after the other that is
1 + 3 + 2 x 100 requests (``--today``: each JSON file one 307 hop more); the target (issue 4) is a few round trips instead, because the
requests run in parallel. Prints the median wall time, the ratio to 100 x latency (the cost of
reading the shards one request each, one after the other), the number of round trips it
amounts to, and the second run (from the cache: no request at all).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from st_helpers import make_folder

from mlxfit.settings import from_environ


def build_model(folder: Path, n_shards: int) -> int:
    """A Qwen3-8B-shaped bf16 model (16 GB, sparse) cut into n_shards shards; returns its size."""
    cfg = json.loads((ROOT / "tests" / "fixtures" / "configs" / "Qwen__Qwen3-8B.json").read_text())
    spec: dict = {"model.embed_tokens.weight": ("BF16", [151936, 4096]),
                  "lm_head.weight": ("BF16", [151936, 4096]),
                  "model.norm.weight": ("BF16", [4096])}
    for i in range(36):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", [4096, 4096]), ("self_attn.k_proj", [1024, 4096]),
                            ("self_attn.v_proj", [1024, 4096]), ("self_attn.o_proj", [4096, 4096]),
                            ("mlp.gate_proj", [12288, 4096]), ("mlp.up_proj", [12288, 4096]),
                            ("mlp.down_proj", [4096, 12288])):
            spec[p + name + ".weight"] = ("BF16", shape)
        for name in ("input_layernorm", "post_attention_layernorm"):
            spec[p + name + ".weight"] = ("BF16", [4096])
    names = list(spec)
    shards = {f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors":
              {n: spec[n] for n in names[s::n_shards]} for s in range(n_shards)}
    make_folder(folder, cfg, shards, index=True)
    (folder / "kv_config.json").write_text(json.dumps({"kv_bits": 8}))
    return sum(p.stat().st_size for p in folder.glob("model*.safetensors"))


def control(url: str, what: str):
    with urllib.request.urlopen(f"{url}/__fakehub__/{what}") as r:
        return json.loads(r.read())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--shards", type=int, default=100)
    ap.add_argument("--latency", type=float, default=0.05, help="seconds added to every request")
    ap.add_argument("--workers", type=int, default=None, help="default: HubSettings.max_workers")
    ap.add_argument("--today", action="store_true",
                    help="the server answers as today's Hub: small files by a 307 to "
                         "/api/resolve-cache, CDN links bound to their first Range")
    args = ap.parse_args()

    from mlxfit.sources.hub import fetch as hub

    work = Path(tempfile.mkdtemp(prefix="mlxfit-bench-hub-"))
    server = None
    try:
        size = build_model(work / "model", args.shards)
        # The server runs in its own process, as the Hub does: in ours, its Python would take
        # turns with the client's for one interpreter lock and inflate the figures.
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "hub_server.py"), "--latency",
             str(args.latency), "--model", f"bench/q8b-100={work / 'model'}",
             *(["--today"] if args.today else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        url = json.loads(server.stdout.readline())["url"]
        os.environ["HF_ENDPOINT"] = url
        os.environ.pop("HF_HUB_OFFLINE", None)
        workers = args.workers or from_environ().hub.max_workers
        hub.fetch_model("bench/q8b-100", cache_dir=work / "warmup", token=False)  # imports
        cold, warm = [], []
        transfer = None
        for i in range(args.runs):
            cache = work / f"cache-{i}"
            control(url, "clear")
            t = time.perf_counter()
            src = hub.fetch_model("bench/q8b-100", cache_dir=cache, max_workers=workers,
                                  token=False)
            cold.append(time.perf_counter() - t)
            transfer = src.transfer
            log = control(url, "log")
            n_requests, served = len(log), sum(e["sent"] for e in log)
            control(url, "clear")
            t = time.perf_counter()
            hub.fetch_model("bench/q8b-100", cache_dir=cache, token=False)
            warm.append(time.perf_counter() - t)
            assert not control(url, "log"), "the second run must not touch the network"
            shutil.rmtree(cache)
    finally:
        if server is not None:
            server.stdin.close()
            server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    assert transfer is not None
    med = statistics.median(cold)
    serial = args.shards * args.latency
    print(f"model: {args.shards} shards, {size / 1e9:.1f} GB on the server; "
          f"latency {args.latency * 1000:.0f} ms per request; {workers} workers; runs={args.runs}"
          f"{'; as today' + chr(39) + 's Hub (307 JSON, range-bound CDN links)' if args.today else ''}")
    print(f"requests per cold run: {n_requests} (client counted {transfer.requests}); "
          f"bytes served: {served:,} ({transfer.header_bytes:,} of safetensors headers), "
          f"{served / size * 100:.6f}% of the weights")
    print(f"cold run  median {med:.3f} s  (min {min(cold):.3f}, max {max(cold):.3f})")
    if serial:
        print(f"ratio to {args.shards} x latency ({serial:.2f} s): {med / serial:.3f}  "
              f"= {med / args.latency:.1f} round trips")
    print(f"warm run (mlxfit cache, 0 requests) median {statistics.median(warm) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
