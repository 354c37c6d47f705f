from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from st_helpers import header_for, write_raw, write_real, write_sparse

from mlxfit.errors import WeightsError
from mlxfit.sources.safetensors_header import read_header, read_headers


def _reject(path: Path, fragment: str) -> None:
    with pytest.raises(WeightsError) as exc:
        read_header(path)
    msg = str(exc.value)
    assert str(path) in msg
    assert fragment in msg
    assert "\n" not in msg


# --- files written by the safetensors library itself -------------------------------------------


def test_real_file_names_dtypes_shapes(tmp_path: Path) -> None:
    arrays = {
        "model.embed_tokens.weight": np.zeros((10, 4), dtype=np.float16),
        "model.layers.0.mlp.up_proj.weight": np.zeros((3, 5, 7), dtype=np.float32),
        "packed": np.zeros((2, 8), dtype=np.uint32),
        "flag": np.zeros((3,), dtype=np.bool_),
        "scalar": np.zeros((), dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    p = write_real(tmp_path / "m.safetensors", arrays, metadata={"format": "mlx"})
    got = {t.name: t for t in read_header(p)}
    assert set(got) == set(arrays)
    for name, a in arrays.items():
        assert got[name].shape == a.shape
        assert got[name].nbytes == a.nbytes  # numpy's own count, not ours
    assert got["packed"].dtype == "U32"
    assert got["flag"].dtype == "BOOL"
    assert got["model.embed_tokens.weight"].dtype == "F16"
    # the data region is exactly the tensors: header-declared sizes cover the file
    n = int.from_bytes(p.read_bytes()[:8], "little")
    assert 8 + n + sum(a.nbytes for a in arrays.values()) == p.stat().st_size


def test_real_file_with_no_tensors(tmp_path: Path) -> None:
    p = write_real(tmp_path / "none.safetensors", {})
    assert read_header(p) == []


def test_sparse_20_gb_summed_exactly(tmp_path: Path) -> None:
    spec = {f"model.layers.{i}.w": ("BF16", [50_000, 40_000]) for i in range(5)}
    spec["model.norm.weight"] = ("F32", [4096])
    p = write_sparse(tmp_path / "big.safetensors", spec)
    tensors = read_header(p)
    assert sum(t.nbytes for t in tensors) == 20_000_000_000 + 16_384
    assert [t.name for t in tensors] == list(spec)


def _bytes_read_by_this_process() -> int | None:
    """rchar of /proc/self/io: every byte read() returned to this process (Linux; None
    elsewhere)."""
    try:
        with open("/proc/self/io") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("rchar:"))
    except (OSError, StopIteration):
        return None


def test_reads_only_the_header(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "big.safetensors", {"w": ("BF16", [100_000, 100_000])})
    with open(p, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
    before = _bytes_read_by_this_process()
    assert read_header(p)[0].nbytes == 20_000_000_000
    after = _bytes_read_by_this_process()
    if before is None or after is None:
        pytest.skip("no /proc/self/io to count the bytes read (the header was read correctly)")
    # 8 + n, plus at most one buffer of the open file and this count's own read: never the
    # 20 GB of tensor data.
    assert 8 + n <= after - before < 8 + n + 64 * 1024


def test_header_padding_spaces_are_allowed(tmp_path: Path) -> None:
    header, size = header_for({"w": ("F32", [2, 2])})
    raw = json.dumps(header).encode() + b"        "  # the format pads headers with spaces
    p = write_raw(tmp_path / "pad.safetensors", raw, size)
    assert read_header(p)[0].nbytes == 16


def test_zero_sized_tensors_share_an_offset(tmp_path: Path) -> None:
    header = {
        "a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "c": {"dtype": "U8", "shape": [0, 3], "data_offsets": [8, 8]},
    }
    p = write_raw(tmp_path / "z.safetensors", header, 8)
    assert [t.nbytes for t in read_header(p)] == [0, 8, 0]


# --- rejections: each names the file ----------------------------------------------------------

OK = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    "header, data_size, fragment",
    [
        ([1, 2], 0, "not an object"),
        ("just a string", 0, "not an object"),
        ({"__metadata__": ["x"], "w": OK}, 8, "__metadata__"),
        ({"__metadata__": {"k": 1}, "w": OK}, 8, "__metadata__"),
        ({"w": [1]}, 8, "not an object"),
        ({"w": {"shape": [2], "data_offsets": [0, 8]}}, 8, "unknown dtype None"),
        ({"w": {**OK, "dtype": "F4"}}, 8, "unknown dtype 'F4'"),
        ({"w": {**OK, "dtype": "f32"}}, 8, "unknown dtype"),
        ({"w": {**OK, "shape": 2}}, 8, "invalid shape"),
        ({"w": {**OK, "shape": [True, 2]}}, 8, "invalid shape"),
        ({"w": {**OK, "shape": [2.0]}}, 8, "invalid shape"),
        ({"w": {**OK, "shape": [-2]}}, 8, "invalid shape"),
        ({"w": {**OK, "shape": ["2"]}}, 8, "invalid shape"),
        ({"w": {**OK, "shape": None}}, 8, "invalid shape"),
        ({"w": {**OK, "data_offsets": [0]}}, 8, "invalid data_offsets"),
        ({"w": {**OK, "data_offsets": [0, 8, 9]}}, 8, "invalid data_offsets"),
        ({"w": {**OK, "data_offsets": [0.0, 8]}}, 8, "invalid data_offsets"),
        ({"w": {**OK, "data_offsets": [False, 8]}}, 8, "invalid data_offsets"),
        ({"w": {**OK, "data_offsets": [-8, 0]}}, 8, "invalid data_offsets"),
        ({"w": {**OK, "data_offsets": [8, 0]}}, 8, "invalid data_offsets"),
        ({"w": {**OK, "data_offsets": "0-8"}}, 8, "invalid data_offsets"),
        ({"w": {**OK, "data_offsets": [0, 12]}}, 12, "needs 8 bytes but data_offsets span 12"),
        ({"w": {**OK, "shape": [3]}}, 8, "needs 12 bytes"),
        # layout of the data region
        ({"w": {**OK, "data_offsets": [4, 12]}}, 12, "leaves a gap"),
        ({"a": OK, "b": {**OK, "data_offsets": [12, 20]}}, 20, "leaves a gap"),
        ({"a": OK, "b": {**OK, "data_offsets": [4, 12]}}, 12, "overlaps"),
        ({"a": OK, "b": OK}, 16, "overlaps"),
        ({"w": OK}, 5, "truncated: header declares 8 data bytes but only 5"),
        ({"w": OK}, 0, "truncated"),
        ({"w": OK}, 9, "1 bytes after the last tensor"),
    ],
)
def test_rejects_bad_header(tmp_path: Path, header: object, data_size: int, fragment: str) -> None:
    p = write_raw(tmp_path / "bad.safetensors", header, data_size)  # type: ignore[arg-type]
    _reject(p, fragment)


def test_rejects_zero_length(tmp_path: Path) -> None:
    _reject(write_raw(tmp_path / "z.safetensors", b"{}", 0, length=0), "header length is 0")


def test_rejects_huge_declared_length(tmp_path: Path) -> None:
    p = write_raw(tmp_path / "h.safetensors", b"{}", 0, length=100_000_001)
    _reject(p, "exceeds the 100000000-byte limit")


def test_rejects_length_past_end_of_file(tmp_path: Path) -> None:
    p = write_raw(tmp_path / "h.safetensors", b'{"w": 1}', 0, length=1000)
    _reject(p, "runs past the end of the file")


def test_rejects_file_shorter_than_length_prefix(tmp_path: Path) -> None:
    p = tmp_path / "short.safetensors"
    p.write_bytes(b"\x02\x00\x00")
    _reject(p, "too short")


def test_rejects_non_utf8(tmp_path: Path) -> None:
    _reject(write_raw(tmp_path / "u.safetensors", b'{"\xff\xfe": 1}', 0), "not valid UTF-8")


def test_rejects_invalid_json(tmp_path: Path) -> None:
    _reject(write_raw(tmp_path / "j.safetensors", b'{"w": {\n oops', 0), "line 2")


def test_rejects_gguf_renamed(tmp_path: Path) -> None:
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)  # length reads as ~12.9 GB
    _reject(p, "header length")


def test_rejects_directory(tmp_path: Path) -> None:
    d = tmp_path / "dir.safetensors"
    d.mkdir()
    _reject(d, "is a directory")


def test_rejects_missing_file(tmp_path: Path) -> None:
    _reject(tmp_path / "gone.safetensors", "cannot read")


def test_rejects_unreadable_file(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "locked.safetensors", {"w": ("F32", [2])})
    if os.geteuid() != 0:
        p.chmod(0)
        _reject(p, "Permission denied")
    else:  # root reads through chmod 0: a file root cannot open either, a symlink loop
        loop = tmp_path / "loop.safetensors"
        loop.symlink_to(loop)
        _reject(loop, "cannot read: Too many levels of symbolic links")


def test_hostile_tensor_name_stays_on_one_line(tmp_path: Path) -> None:
    p = write_raw(tmp_path / "n.safetensors", {"evil\nname": {**OK, "dtype": "X"}}, 8)
    _reject(p, "unknown dtype")


# --- several shards ---------------------------------------------------------------------------


def test_read_headers_concatenates_in_order(tmp_path: Path) -> None:
    a = write_sparse(tmp_path / "a.safetensors", {"x": ("F32", [4]), "y": ("BF16", [3])})
    b = write_sparse(tmp_path / "b.safetensors", {"z": ("U8", [5])})
    tensors = read_headers([a, b])
    assert [(t.name, t.nbytes) for t in tensors] == [("x", 16), ("y", 6), ("z", 5)]


def test_read_headers_rejects_a_tensor_in_two_shards(tmp_path: Path) -> None:
    a = write_sparse(tmp_path / "a.safetensors", {"x": ("F32", [4])})
    b = write_sparse(tmp_path / "b.safetensors", {"w": ("F32", [1]), "x": ("F32", [4])})
    with pytest.raises(WeightsError) as exc:
        read_headers([a, b])
    assert str(b) in str(exc.value) and str(a) in str(exc.value) and "'x'" in str(exc.value)


def test_read_headers_names_the_bad_shard(tmp_path: Path) -> None:
    a = write_sparse(tmp_path / "a.safetensors", {"x": ("F32", [4])})
    b = write_raw(tmp_path / "b.safetensors", {"w": OK}, 4)
    with pytest.raises(WeightsError, match="b.safetensors"):
        read_headers([a, b])
