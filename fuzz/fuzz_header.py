"""atheris fuzz target: mlxfit's safetensors header reader on arbitrary files.

    python fuzz/fuzz_header.py [libFuzzer flags] CORPUS_DIR      (see fuzz/README.md)

Contract checked on every input: read_header / read_headers either return tensors whose byte
sizes tile the data region exactly (the number mlxfit reports is the file's), or raise
WeightsError with one line naming the file. Any other exception, a hang (-timeout) or memory
past -rss_limit_mb is a finding.

The first input byte picks how the rest becomes files, so the fuzzer also gets past the
length checks instead of spending every run on "header length runs past the end":
  mode & 3 == 0 or 2  the bytes are the whole file
  mode & 3 == 1       the bytes are a header; framed with its true length and a (sparse) data
                      region as long as the largest data_offsets end it mentions
  mode & 3 == 3       as 1, but split in two shards at the second byte (read_headers)
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["mlxfit"]):
    from mlxfit.errors import WeightsError
    from mlxfit.model.tensors import DTYPE_BYTES
    from mlxfit.sources.safetensors_header import read_header, read_headers

from _common import check_one_line, scratch_dir

_DIR = scratch_dir("header")
_PATHS = [os.path.join(_DIR, f"{os.getpid()}-model-0000{i}.safetensors") for i in (1, 2)]
_END = re.compile(rb'"data_offsets"\s*:\s*\[\s*\d+\s*,\s*(\d{1,13})\s*\]')
_MAX_DATA = 1 << 40  # sparse: a hole costs nothing on disk


def _write(path: str, raw: bytes, data_size: int = 0) -> None:
    with open(path, "wb") as f:
        f.write(raw)
        if data_size:
            f.truncate(len(raw) + data_size)


def _framed(path: str, body: bytes) -> None:
    ends = [int(m) for m in _END.findall(body)]
    data = max(ends, default=0)
    _write(path, len(body).to_bytes(8, "little") + body, data if data <= _MAX_DATA else 0)


def _check_tensors(path: str, tensors: list) -> None:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
    data_region = os.path.getsize(path) - 8 - n
    total = 0
    for t in tensors:
        expect = DTYPE_BYTES[t.dtype]
        for d in t.shape:
            assert type(d) is int and d >= 0, t
            expect *= d
        assert t.nbytes == expect, t
        total += t.nbytes
    assert total == data_region, (total, data_region)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    mode, body = data[0] & 3, data[1:]
    if mode in (0, 2):
        _write(_PATHS[0], body)
        paths = _PATHS[:1]
    elif mode == 1:
        _framed(_PATHS[0], body)
        paths = _PATHS[:1]
    else:
        cut = body[0] * len(body) // 256 if body else 0
        _framed(_PATHS[0], body[1:cut + 1])
        _framed(_PATHS[1], body[cut + 1:])
        paths = _PATHS
    try:
        if len(paths) == 1:
            tensors = read_header(paths[0])
        else:
            tensors = read_headers(paths)
    except WeightsError as e:
        msg = str(e)
        check_one_line(msg)
        assert any(p in msg for p in paths), f"error does not name the file: {msg!r}"
        return
    if len(paths) == 1:
        _check_tensors(paths[0], tensors)
    else:
        names = [t.name for t in tensors]
        assert len(names) == len(set(names)), "a tensor name in two shards was accepted"
        for p in paths:
            _check_tensors(p, read_header(p))


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
