"""Shared by the fuzz targets: where seeds come from and the one-line error contract.

Imported by fuzz_header.py / fuzz_config.py (run as scripts) and by seeds.py; stdlib only.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG_FIXTURES = REPO / "tests" / "fixtures" / "configs"


def scratch_dir(target: str) -> str:
    """Where a target writes its per-input files: $MLXFIT_FUZZ_SCRATCH (the CI runner points it
    at pytest's tmp_path), else a fixed directory per target on tmpfs when there is one
    (rewriting a file on ext4 costs milliseconds, a flush on truncate; on tmpfs microseconds).
    libFuzzer ends the process without running Python's atexit, so the fixed directory is
    reused rather than leaked; file names carry the pid, so -jobs/-fork workers do not collide.
    """
    explicit = os.environ.get("MLXFIT_FUZZ_SCRATCH")
    if explicit:
        d = Path(explicit)
    else:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        d = Path(base) / f"mlxfit-fuzz-{target}"
    d.mkdir(parents=True, exist_ok=True)
    return str(d)


# Findings reported to the owner of the module (docs/hardening.md, "Open"), tolerated here so a
# campaign keeps looking for new ones. Remove an entry when its fix lands.
KNOWN_MULTILINE = (
    "unknown block '",  # config.py _nemotron_h puts the raw pattern character in the message
)


def check_one_line(msg: str, must_start: str | None = None) -> None:
    """The CLI prints str(error) as its single stderr line: it must be one non-empty line."""
    assert msg, "empty error message"
    if not any(k in msg for k in KNOWN_MULTILINE):
        assert "\n" not in msg and "\r" not in msg, f"multi-line error: {msg!r}"
    if must_start is not None:
        assert msg.startswith(must_start), f"error does not name the file: {msg!r}"


def seed_configs() -> list[dict]:
    """Real config.json files of every family the tests know (tests/fixtures/configs)."""
    return [json.loads(p.read_text()) for p in sorted(CONFIG_FIXTURES.glob("*.json"))]


def frame(header: bytes | dict, data_size: int) -> bytes:
    """A safetensors file: 8-byte little-endian length, the header, data_size zero bytes."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * data_size


def seed_headers() -> list[bytes]:
    """Small valid files covering each dtype, zero-sized tensors, metadata and MLX's packed
    4-bit layout; the fuzzer mutates from these."""
    out = [frame({}, 0), frame({"__metadata__": {"format": "mlx"}}, 0)]
    from itertools import accumulate

    specs = [
        [("w", "BF16", [4, 8]), ("b", "F32", [8])],
        [("model.layers.0.mlp.down_proj.weight", "U32", [8, 2]),
         ("model.layers.0.mlp.down_proj.scales", "BF16", [8, 1]),
         ("model.layers.0.mlp.down_proj.biases", "BF16", [8, 1])],
        [("empty", "F16", [0, 3]), ("x", "I8", [3]), ("y", "F8_E4M3", [1, 1, 2])],
        [(f"t{i}", d, [i + 1]) for i, d in enumerate(
            ["BOOL", "U8", "U16", "I16", "U32", "I32", "U64", "I64", "F64", "C64"])],
    ]
    from mlxfit.model.tensors import DTYPE_BYTES

    for spec in specs:
        sizes = []
        for _, dtype, shape in spec:
            n = DTYPE_BYTES[dtype]
            for d in shape:
                n *= d
            sizes.append(n)
        ends = list(accumulate(sizes))
        header = {
            name: {"dtype": dtype, "shape": shape, "data_offsets": [end - size, end]}
            for (name, dtype, shape), size, end in zip(spec, sizes, ends)
        }
        out.append(frame(header, ends[-1]))
    return out


def seed_cache_entry(repo_id: str, commit: str, endpoint: str) -> bytes:
    """A real Hub metadata cache entry (what a fetch writes) of a two-shard model."""
    from mlxfit.sources.hub.cache import Snapshot

    def shard(names: list[str]) -> tuple[bytes, int]:
        header = {n: {"dtype": "BF16", "shape": [4, 8], "data_offsets": [i * 64, i * 64 + 64]}
                  for i, n in enumerate(names)}
        raw = json.dumps(header).encode()
        return struct.pack("<Q", len(raw)) + raw, 8 + len(raw) + 64 * len(names)

    config = {"model_type": "qwen3", "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
              "vocab_size": 4, "intermediate_size": 4, "max_position_embeddings": 4096}
    a, sa = shard(["model.embed_tokens.weight"])
    b, sb = shard(["model.layers.0.mlp.down_proj.weight"])
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    index = {"weight_map": {"model.embed_tokens.weight": names[0],
                            "model.layers.0.mlp.down_proj.weight": names[1]}}
    snap = Snapshot(repo_id=repo_id, commit=commit, endpoint=endpoint, fetched_at="now",
                     siblings=[(names[0], sa), (names[1], sb), ("config.json", 100),
                               ("model.safetensors.index.json", 100)],
                     files={"config.json": json.dumps(config).encode(),
                            "model.safetensors.index.json": json.dumps(index).encode()},
                     shards=[(names[0], sa, a), (names[1], sb, b)])
    return snap.to_json()
