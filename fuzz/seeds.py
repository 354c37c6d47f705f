"""Write a seed corpus for one fuzz target into a directory of your choosing.

    python fuzz/seeds.py header /tmp/mlxfit-corpus/header
    python fuzz/seeds.py config /tmp/mlxfit-corpus/config
    python fuzz/seeds.py cache /tmp/mlxfit-corpus/cache
    python fuzz/seeds.py render /tmp/mlxfit-corpus/render

libFuzzer adds the inputs it finds interesting to the first corpus directory it is given, so
point it at a scratch directory, never at the repository.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import seed_cache_entry, seed_configs, seed_headers


def write_seeds(kind: str, directory: str | Path) -> int:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if kind == "header":
        # fuzz_header.py reads the first byte as the mode: even = a file as-is.
        blobs = [b"\0" + h for h in seed_headers()]
    elif kind == "config":
        # fuzz_config.py: first byte even = config.json bytes as-is.
        blobs = [b"\0" + json.dumps(c).encode() for c in seed_configs()]
    elif kind == "cache":
        # fuzz_cache.py: first byte even = the entry as-is, odd = structure-aware mutation.
        entry = seed_cache_entry("acme/tiny", "0" * 40, "https://huggingface.co")
        blobs = [b"\0" + entry, b"\1" + bytes(range(64))]
    elif kind == "render":
        # fuzz_render.py: any bytes pick the strings.
        blobs = [b"[/]\x1b]0;t\x07" * 4, bytes(range(256))]
    else:
        raise SystemExit(f"unknown kind {kind!r} (header, config, cache or render)")
    for i, b in enumerate(blobs):
        (d / f"seed-{i:03d}").write_bytes(b)
    return len(blobs)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(f"{write_seeds(sys.argv[1], sys.argv[2])} seeds written to {sys.argv[2]}")
