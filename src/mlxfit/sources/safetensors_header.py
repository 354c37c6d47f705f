"""Read safetensors headers (never tensor data) into TensorInfo lists, strictly.

Layout: 8-byte little-endian length N, N bytes of UTF-8 JSON, then the data region.

Why our own bounded reader instead of ``safetensors.safe_open`` (evaluated with safetensors 0.8):
- ``safe_open`` needs a framework and imports it on open (framework="numpy" pulls in numpy,
  which mlxfit does not depend on, ~50 ms); names/dtypes/shapes come one ``get_slice`` per tensor.
- It memory-maps the whole file; we read exactly 8 + N bytes.
- Its checks are close to ours (header cap, contiguous offsets, exact coverage, integer shapes,
  string metadata) but it accepts sub-byte dtypes (F4, F6...) that DTYPE_BYTES cannot size, and
  its errors are generic ("incomplete metadata, file not fully covered") and do not name the file,
  where ours must say which file and what is wrong, on one line.
- It is not faster: 1,000 shards / 200,000 tensors into TensorInfo, warm cache, 2-core Linux VM
  (``python tests/st_helpers.py``): this reader 0.40 s; safe_open + get_slice 0.75-0.80 s
  (0.6 s with the collector paused as we do).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from mlxfit.errors import WeightsError
from mlxfit.localfile import open_regular, why
from mlxfit.model.tensors import DTYPE_BYTES, TensorInfo

# The safetensors format's own limit: a larger header is hostile, not a model.
MAX_HEADER_BYTES = 100_000_000
# All shards' headers together: the format's limit for one. The largest real checkpoints hold
# ~200,000 tensors (Kimi K2 4-bit), ~30 MB of headers; 25 maximal headers (2.5 GB, parsed to
# ~11 GB) are refused at the second, before it is read.
MAX_TOTAL_HEADER_BYTES = MAX_HEADER_BYTES
# The shortest tensor entry, '"":{"dtype":"I8","shape":[],"data_offsets":[0,0]}', is 49 bytes
# with one object and two arrays: a header with more objects or arrays per byte than that is
# not a tensor list, and is refused before json.loads builds them (99 MB of "{}," parsed to
# 2.6 GB).
_MIN_ENTRY_BYTES = 40


def _fail(path: Path | str, problem: str) -> WeightsError:
    # One line, always naming the file: callers quote tensor names with !r, and a newline
    # in a path is escaped here.
    return WeightsError(f"{path}: {problem}".replace("\n", "\\n"), file=str(path))


def _read_raw_header(path: Path, limit: int = MAX_HEADER_BYTES) -> tuple[bytes, int]:
    """Return (header bytes, data-region size) after bounding N against the file size and
    ``limit`` (what is left of the total for all shards)."""
    if path.is_dir():
        raise _fail(path, "is a directory, not a safetensors file")
    try:
        # Non-blocking and regular files only: a FIFO named *.safetensors must not hang us.
        with os.fdopen(open_regular(path), "rb") as f:
            return _read_open(f, path, limit)
    except OSError as e:
        raise _fail(path, f"cannot read: {why(e)}") from None


def _read_open(f: BinaryIO, path: Path, limit: int = MAX_HEADER_BYTES) -> tuple[bytes, int]:
    """``_read_raw_header`` on the file ``path`` opened as ``f``."""
    size = os.fstat(f.fileno()).st_size
    if size < 8:
        raise _fail(path, f"too short for a safetensors file ({size} bytes)")
    prefix = f.read(8)
    if len(prefix) != 8:  # shrank since fstat
        raise _fail(path, f"changed size while being read (was {size} bytes)")
    n = int.from_bytes(prefix, "little")
    # The length is not printed: a file that is not safetensors (a shard symlinked to a secret)
    # would have its first 8 bytes shown as a number.
    if n == 0:
        raise _fail(path, "header length is 0: not a safetensors file")
    if n > MAX_HEADER_BYTES:
        raise _fail(path, f"not a safetensors file (its header length exceeds the "
                          f"{MAX_HEADER_BYTES}-byte limit)")
    if n > limit:
        raise _fail(path, f"its header would take the headers read past "
                          f"{MAX_TOTAL_HEADER_BYTES:,} bytes in all, more than any real model's")
    if 8 + n > size:
        raise _fail(path, f"not a safetensors file, or truncated (its header length runs past "
                          f"the end of the file, {size} bytes)")
    raw = f.read(n)
    now = os.fstat(f.fileno()).st_size
    if len(raw) != n:  # the file shrank while we read it
        raise _fail(path, f"header cut short ({len(raw)} of {n} bytes)")
    if now != size:  # resized while we read: the data region we would size is not there
        raise _fail(path, f"changed size while being read ({size} bytes, then {now})")
    return raw, size - 8 - n


@contextmanager
def _gc_paused() -> Iterator[None]:
    # A header parses into ~5 containers per tensor, none of which can form a cycle, yet the
    # cyclic collector rescans them as they pile up: a third of a 200,000-tensor scan's time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_header(path: str | os.PathLike[str]) -> list[TensorInfo]:
    """Tensors of one safetensors file, in header order; WeightsError naming the file if invalid."""
    with _gc_paused():
        return _parse(Path(path))[0]


def _parse(p: Path, limit: int = MAX_HEADER_BYTES) -> tuple[list[TensorInfo], int]:
    """(the tensors, the header's length in bytes)."""
    raw, data_size = _read_raw_header(p, limit)
    # Only past 1 MB (where memory is at stake): a small header's __metadata__ strings may hold
    # JSON text, braces and all.
    entries = len(raw) // _MIN_ENTRY_BYTES + 2  # tensors, __metadata__ and the top object
    if len(raw) > 1 << 20 and (raw.count(b"{") > entries or raw.count(b"[") > 2 * entries):
        raise _fail(p, "header holds more objects or arrays than a tensor list could: "
                       "not a safetensors header")
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _fail(p, "header is not valid UTF-8") from None
    except json.JSONDecodeError as e:
        raise _fail(
            p, f"header is not valid JSON (line {e.lineno} column {e.colno}: {e.msg})"
        ) from None
    except RecursionError:  # e.g. 100,000 nested "[": the C decoder recurses per level
        raise _fail(p, "header JSON is nested too deeply") from None
    except ValueError:  # an integer literal past sys.get_int_max_str_digits() (4,300 digits)
        raise _fail(p, "header has a number with too many digits") from None
    if not isinstance(header, dict):
        raise _fail(p, f"header is a JSON {type(header).__name__}, not an object")

    tensors: list[TensorInfo] = []
    spans: list[tuple[int, int, str]] = []
    sizes, info = DTYPE_BYTES, TensorInfo  # locals: cheaper lookups in the hot loop
    # One flat loop with inline type checks: this runs 200,000 times on a big MoE checkpoint.
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(type(v) is str for v in entry.values()):
                raise _fail(p, "__metadata__ must map strings to strings")
            continue
        if type(entry) is not dict:
            raise _fail(p, f"tensor {name!r} is not an object")
        dtype = entry.get("dtype")
        shape = entry.get("shape")
        offsets = entry.get("data_offsets")
        if type(dtype) is not str or dtype not in sizes:  # a list or dict is unhashable
            raise _fail(p, f"tensor {name!r} has unknown dtype {dtype!r}")
        if type(shape) is not list:
            raise _fail(p, f"tensor {name!r} has invalid shape {shape!r}")
        nbytes = sizes[dtype]
        for d in shape:
            # type() rather than isinstance(): bool is an int subclass, and True is no dimension.
            if type(d) is not int or d < 0:
                raise _fail(p, f"tensor {name!r} has invalid shape {shape!r}")
            nbytes *= d
        if type(offsets) is not list or len(offsets) != 2:
            raise _fail(p, f"tensor {name!r} has invalid data_offsets {offsets!r}")
        begin, end = offsets
        if type(begin) is not int or type(end) is not int or begin < 0 or end < begin:
            raise _fail(p, f"tensor {name!r} has invalid data_offsets {offsets!r}")
        if end - begin != nbytes:
            raise _fail(
                p,
                f"tensor {name!r} ({dtype} {shape}) needs {nbytes} bytes "
                f"but data_offsets span {end - begin}",
            )
        tensors.append(info(name, dtype, tuple(shape), nbytes))
        spans.append((begin, end, name))

    # Offsets must tile the data region exactly: no gap (hidden bytes), no overlap (aliasing).
    spans.sort()
    expected = 0
    for begin, end, name in spans:
        if begin != expected:
            kind = "overlaps the previous tensor" if begin < expected else "leaves a gap"
            raise _fail(p, f"tensor {name!r} at offset {begin} {kind} (expected offset {expected})")
        expected = end
    if expected > data_size:
        raise _fail(
            p, f"truncated: header declares {expected} data bytes but only {data_size} are present"
        )
    if expected < data_size:
        raise _fail(p, f"{data_size - expected} bytes after the last tensor are not in the header")
    return tensors, len(raw)


def read_headers(paths: Iterable[str | os.PathLike[str]]) -> list[TensorInfo]:
    """Tensors of several shards (a model's) in order; a tensor name in two shards, or a shard
    without tensors, is an error."""
    out: list[TensorInfo] = []
    seen: set[str] = set()
    done: list[tuple[str, set[str]]] = []
    left = MAX_TOTAL_HEADER_BYTES
    with _gc_paused():
        for path in paths:
            tensors, n = _parse(Path(path), left)
            left -= n
            if not tensors:  # a model's shard: sized as nothing where mlx-lm loads nothing
                raise _fail(path, "holds no tensors: not a shard of a model")
            names = {t.name for t in tensors}
            if not seen.isdisjoint(names):
                # Names are unique within one file, so the clash is with an earlier shard.
                dup = min(seen & names)
                first = next(q for q, ns in done if dup in ns)
                raise _fail(path, f"tensor {dup!r} is also in {first}")
            seen |= names
            done.append((str(path), names))
            out.extend(tensors)
    return out
