"""Builders for safetensors files, model folders and a fake Hugging Face cache (no network).

Run by hand for the header-scan timing check (not a timed test: CI machines vary):
    /work/devenv/bin/python tests/st_helpers.py [n_shards] [tensors_per_shard]
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path
from typing import Any

from mlxfit.model.tensors import DTYPE_BYTES

Spec = dict[str, tuple[str, list[int]]]  # tensor name -> (dtype, shape)


def write_real(path: Path, arrays: dict[str, Any], metadata: dict[str, str] | None = None) -> Path:
    """A small genuine file written by the safetensors library itself (numpy arrays)."""
    from safetensors.numpy import save_file

    save_file(arrays, str(path), metadata=metadata)
    return path


def header_for(spec: Spec, metadata: dict[str, str] | None = None) -> tuple[dict, int]:
    """Header dict with contiguous offsets in the given order, and the data-region size."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, (dtype, shape) in spec.items():
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    return header, off


def write_raw(path: Path, header: Any, data_size: int, *, length: int | None = None) -> Path:
    """8-byte length + header (dict/list → JSON, bytes as-is), then a sparse data hole.

    `length` overrides the declared header length, for the hostile-length cases.
    """
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw) if length is None else length))
        f.write(raw)
        f.truncate(8 + len(raw) + data_size)  # a hole: 20 GB costs nothing on disk
    return path


def write_sparse(path: Path, spec: Spec, metadata: dict[str, str] | None = None) -> Path:
    header, size = header_for(spec, metadata)
    return write_raw(path, header, size)


def make_folder(
    folder: Path,
    config: dict[str, Any] | None,
    shards: dict[str, Spec],
    *,
    index: bool = False,
) -> Path:
    """A model folder: config.json, sparse shards and optionally model.safetensors.index.json."""
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    weight_map: dict[str, str] = {}
    total = 0
    for fname, spec in shards.items():
        write_sparse(folder / fname, spec)
        total += header_for(spec)[1]
        weight_map.update({name: fname for name in spec})
    if index:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
        )
    return folder


def make_hf_cache(
    cache: Path,
    repo_id: str,
    files: dict[str, bytes | Spec],
    *,
    commit: str,
    refs: tuple[str, ...] = ("main",),
) -> Path:
    """One snapshot in the hub cache layout; returns the snapshot folder.

    models--org--name/refs/<ref> holds the commit sha; snapshots/<sha>/<file> is a relative
    symlink into blobs/<hash>, exactly as huggingface_hub downloads lay it out.
    A Spec value becomes a sparse safetensors blob.
    """
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snap = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # the hub writes it without a newline
    for fname, content in files.items():
        key = hashlib.sha256(fname.encode() + commit.encode()).hexdigest()
        blob = blobs / key
        if isinstance(content, bytes):
            blob.write_bytes(content)
        else:
            write_sparse(blob, content)
        link = snap / fname
        link.parent.mkdir(parents=True, exist_ok=True)
        ups = len(Path(fname).parts) + 1  # snapshots/<sha>/[sub/]file -> ../../[../]blobs/<key>
        link.symlink_to(Path(*([".."] * ups), "blobs", key))
    return snap


def qwen3_8b_bf16_spec() -> Spec:
    """Qwen3-8B in bf16 as mlx-lm loads it (16.4 GB of tensors): embed and lm_head
    151936 x 4096; per layer q, o 4096 x 4096, k, v 1024 x 4096, q/k norms 128, gate/up
    12288 x 4096, down 4096 x 12288, two 4096 norms; a final norm."""
    spec: Spec = {
        "model.embed_tokens.weight": ("BF16", [151936, 4096]),
        "lm_head.weight": ("BF16", [151936, 4096]),
        "model.norm.weight": ("BF16", [4096]),
    }
    for i in range(36):
        p = f"model.layers.{i}."
        spec.update({
            p + "self_attn.q_proj.weight": ("BF16", [4096, 4096]),
            p + "self_attn.k_proj.weight": ("BF16", [1024, 4096]),
            p + "self_attn.v_proj.weight": ("BF16", [1024, 4096]),
            p + "self_attn.o_proj.weight": ("BF16", [4096, 4096]),
            p + "self_attn.q_norm.weight": ("BF16", [128]),
            p + "self_attn.k_norm.weight": ("BF16", [128]),
            p + "mlp.gate_proj.weight": ("BF16", [12288, 4096]),
            p + "mlp.up_proj.weight": ("BF16", [12288, 4096]),
            p + "mlp.down_proj.weight": ("BF16", [4096, 12288]),
            p + "input_layernorm.weight": ("BF16", [4096]),
            p + "post_attention_layernorm.weight": ("BF16", [4096]),
        })
    return spec


def make_qwen3_8b_bf16(folder: Path, config: dict[str, Any], n_shards: int) -> Path:
    """The sparse Qwen3-8B bf16 model in n contiguous model-0000i-of-0000n shards + index."""
    spec = qwen3_8b_bf16_spec()
    names = list(spec)
    per = -(-len(names) // n_shards)
    shards = {f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors":
              {n: spec[n] for n in names[s * per:(s + 1) * per]} for s in range(n_shards)}
    return make_folder(folder, config, shards, index=True)


def make_many_shards(folder: Path, n_shards: int, per_shard: int) -> list[Path]:
    """Sparse shards shaped like a real big checkpoint, for the timing check."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(n_shards):
        spec: Spec = {
            f"model.layers.{s}.block.{i}.mlp.down_proj.weight": ("BF16", [4096, 1024 + i])
            for i in range(per_shard)
        }
        paths.append(
            write_sparse(folder / f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors", spec)
        )
    return paths


def _time_scan(n_shards: int, per_shard: int) -> None:
    import tempfile
    import time

    from mlxfit.sources.safetensors_header import read_headers

    with tempfile.TemporaryDirectory() as d:
        paths = make_many_shards(Path(d), n_shards, per_shard)
        read_headers(paths)  # warm the page cache: we time parsing, not the disk
        t = time.perf_counter()
        tensors = read_headers(paths)
        ours = time.perf_counter() - t
        print(f"mlxfit reader: {len(paths)} shards, {len(tensors)} tensors in {ours:.3f} s")

        # The same job done with the library: names, dtypes, shapes into TensorInfo.
        t = time.perf_counter()
        from safetensors import safe_open

        from mlxfit.model.tensors import TensorInfo

        out = []
        for p in paths:
            with safe_open(str(p), framework="numpy") as f:  # imports numpy on first open
                for k in f.keys():  # noqa: SIM118 (safe_open handles are not iterable)
                    sl = f.get_slice(k)
                    out.append(TensorInfo.of(k, sl.get_dtype(), sl.get_shape()))
        print(
            f"safe_open + get_slice + TensorInfo (incl. numpy import): {len(out)} tensors in "
            f"{time.perf_counter() - t:.3f} s"
        )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    _time_scan(*(args + [1000, 200][len(args) :]))
