"""mlxfit's Hub metadata cache read back as untrusted input (issue 13, class 1 and 5): a
hand-edited or planted entry whose names, types, sizes, gzip member or identity are wrong is a
one-line error offline and a cache miss online, and never writes outside the cache. Entries are
made for real: a model is fetched from the local Hub stand-in (tests/hub_server.py), then its
gzipped JSON is edited on disk. Canary files sit where a traversal name would write."""

from __future__ import annotations

import base64
import gzip
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hub_server import FakeHub
from st_helpers import qwen_tiny

from mlxfit.errors import SourceError
from mlxfit.sources.hub import fetch as mhub
from mlxfit.sources.hub.cache import Snapshot
from mlxfit.sources.resolve import resolve_model


def entry_of(cache_root: Path) -> Path:
    (entry,) = cache_root.rglob("*.json.gz")
    return entry


def edit(entry: Path, change) -> None:
    doc = json.loads(gzip.decompress(entry.read_bytes()))
    change(doc)
    entry.write_bytes(gzip.compress(json.dumps(doc).encode()))


def listing(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def cached(server: FakeHub, tmp_path: Path):
    """A model fetched once: (entry file, canary file, listing of everything outside the cache)."""
    server.add_model("acme/tiny", qwen_tiny(tmp_path / "tiny"))
    resolve_model("acme/tiny")
    canary = tmp_path / "canary.safetensors"
    canary.write_bytes(b"do not truncate me")
    return entry_of(tmp_path / "mlxfit-cache"), canary


B64 = base64.b64encode(b"x").decode()

HOSTILE = {
    "shard ../": lambda d, c: d["shards"][0].__setitem__(0, "../../../../../canary.safetensors"),
    "shard absolute": lambda d, c: d["shards"][0].__setitem__(0, str(c)),
    "shard model/../..": lambda d, c: d["shards"][0].__setitem__(
        0, "model/../../../../../../canary.safetensors"),
    "shard NUL": lambda d, c: d["shards"][0].__setitem__(0, "model\x00.safetensors"),
    "shard ESC": lambda d, c: d["shards"][0].__setitem__(0, "model\x1b]0;pwned\x07.safetensors"),
    "shard twice": lambda d, c: d["shards"].append(list(d["shards"][0])),
    "file ../": lambda d, c: d["files"].__setitem__("../../../../../canary.safetensors", B64),
    "file absolute": lambda d, c: d["files"].__setitem__(str(c), B64),
    "files null": lambda d, c: d.__setitem__("files", None),
    "shards null": lambda d, c: d.__setitem__("shards", None),
    "siblings dict": lambda d, c: d.__setitem__("siblings", {}),
    "sibling NUL": lambda d, c: d["siblings"].append(["a\x00b", 1]),
    "size 2^70": lambda d, c: d["shards"][0].__setitem__(1, 2**70),
    "size 2^53+1": lambda d, c: d["shards"][0].__setitem__(1, 2**53 + 1),
    "size -1": lambda d, c: d["shards"][0].__setitem__(1, -1),
    "size true": lambda d, c: d["shards"][0].__setitem__(1, True),
    "size float": lambda d, c: d["shards"][0].__setitem__(1, 1e30),
    "sibling size 2^70": lambda d, c: d["siblings"][0].__setitem__(1, 2**70),
    "header not base64": lambda d, c: d["shards"][0].__setitem__(2, "@@@"),
    "header null": lambda d, c: d["shards"][0].__setitem__(2, None),
    "transfer null": lambda d, c: d.__setitem__("transfer", None),
    "repo id": lambda d, c: d.__setitem__("repo_id", "evil/other"),
    "repo id ESC": lambda d, c: d.__setitem__("repo_id", "\x1b[2J\x1b]0;pwned\x07"),
    "commit": lambda d, c: d.__setitem__("commit", "f" * 40),
    "endpoint": lambda d, c: d.__setitem__("endpoint", "https://evil.example"),
    "schema": lambda d, c: d.__setitem__("schema", [1]),
    "not an object": lambda d, c: (d.clear(), d.update({"schema": 1, "files": []})),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_entry_is_refused_and_writes_nothing(cached, case: str, tmp_path: Path,
                                                     server: FakeHub,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    entry, canary = cached
    edit(entry, lambda d: HOSTILE[case](d, canary))
    outside = listing(tmp_path)
    # Offline: a one-line error naming the entry, nothing written anywhere.
    with pytest.raises(SourceError) as e:
        mhub.load_cached("acme/tiny")
    msg = str(e.value)
    assert "\n" not in msg and "is corrupt" in msg and str(entry) in msg, msg
    assert "\x1b" not in msg and "\x00" not in msg
    assert canary.read_bytes() == b"do not truncate me"
    assert listing(tmp_path) == outside
    # Online: a cache miss, so the Hub is asked again and the entry overwritten with a good one.
    before = len(server.requests())
    src = mhub.fetch_model("acme/tiny", ref_ttl=0)
    assert src.kind == "hub" and len(server.requests()) > before
    assert canary.read_bytes() == b"do not truncate me"
    assert mhub.load_cached("acme/tiny") is not None
    assert not (tmp_path.parent / "canary.safetensors").exists()


def test_the_unedited_entry_reads_back(cached) -> None:
    src = mhub.load_cached("acme/tiny")
    assert src is not None and src.transfer.from_cache


def _bomb(path: Path, inflated: int) -> None:
    """A real, valid gzip member of ``inflated`` zero bytes (2 MB on disk for 2 GiB), built in
    a second: after a full flush deflate restarts, so each 16 MiB block compresses to the same
    bytes, written N times; the trailer's CRC-32 and size are those of the whole."""
    block = b"\0" * (1 << 24)
    n = inflated // len(block)
    z = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate; the gzip framing is ours
    once = z.compress(block) + z.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(n):
        crc = zlib.crc32(block, crc)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\0\0\0\0\x00\xff")  # gzip header: deflate, no name
        for _ in range(n):
            f.write(once)
        f.write(z.flush(zlib.Z_FINISH))
        f.write(struct.pack("<II", crc, (n * len(block)) & 0xFFFFFFFF))


BOMB_CHILD = r"""
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from mlxfit.errors import SourceError
from mlxfit.sources.hub import fetch as mhub
t = time.monotonic()
try:
    mhub.load_cached("acme/tiny")
    print("READ")
except SourceError as e:
    print("ERR", str(e))
print("SECONDS", time.monotonic() - t)
print("MAXRSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_gzip_bomb_is_inflated_only_to_the_cap(cached, tmp_path: Path) -> None:
    """A 2 GB gzip member in place of the entry: refused once the inflated bytes pass the cap
    (512 MB by default; 64 MB here), in a child whose address space is limited to 1 GiB, so
    reading it all would fail with a MemoryError instead of the one-line error."""
    entry, _ = cached
    _bomb(entry, 2 << 30)
    assert entry.stat().st_size < 8_000_000
    child_env = dict(os.environ, MLXFIT_HUB_MAX_CACHE_ENTRY_BYTES="64000000",
                     PYTHONPATH=str(Path(__file__).resolve().parent.parent / "src"))
    r = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(1 << 30)], env=child_env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("ERR ") and "inflates past 64,000,000 bytes" in out[0], out
    print(out[1:])  # the measured bound, for the record (-s)


def test_from_json_refuses_wrong_types_without_a_traceback() -> None:
    good = {"schema": 1, "repo_id": "a/b", "commit": "0" * 40, "endpoint": "e",
            "fetched_at": "t", "siblings": [], "files": {}, "shards": [],
            "transfer": {"requests": 0, "bytes": 0}}
    Snapshot.from_json(gzip.compress(json.dumps(good).encode()))
    for key in good:
        for bad in (None, [], {}, "x", 2**70, True, -1):
            doc = dict(good, **{key: bad})
            if doc == good:
                continue
            try:
                Snapshot.from_json(gzip.compress(json.dumps(doc).encode()))
            except ValueError:
                continue
            assert key in ("endpoint", "fetched_at", "repo_id", "commit") and bad == "x" or (
                key in ("siblings", "shards") and bad == []) or (
                key == "files" and bad == {}), (key, bad)


