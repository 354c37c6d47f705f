"""mlxfit's Hub metadata cache on disk: one gzipped JSON snapshot per commit (``Snapshot``:
the model info's file list, config.json, the shard index, kv_config.json and each shard's
safetensors header, as fetched) under <cache root>/hub/<endpoint host>/models--org--name/
snapshots/, plus refs/ mapping a branch or tag to its commit, whose age (the file's mtime) is
checked against a TTL by the caller. Keyed by endpoint, repo and commit; every write is atomic
(a temporary file, then ``os.replace``), and a corrupt entry is reported as a ValueError naming
the file. No network, and nothing here knows about HTTP.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from mlxfit.localfile import read_regular
from mlxfit.settings import MAX_FILE_BYTES, Settings, from_environ
from mlxfit.sources.hf_cache import cache_dirname
from mlxfit.sources.redact import redact_url
from mlxfit.writefile import write_file

CONFIG_NAME = "config.json"
KV_CONFIG_NAME = "kv_config.json"
CACHE_SCHEMA = 1

HEX40 = re.compile(r"[0-9a-f]{40}")


def hub_cache_dir(root: str | os.PathLike[str] | None = None, *,
                  settings: Settings | None = None) -> Path:
    """Where Hub metadata is kept: <cache root>/hub/<endpoint host>/models--org--name/, the
    cache root being ``root`` or ``Settings.cache_dir`` ($MLXFIT_CACHE_DIR,
    $XDG_CACHE_HOME/mlxfit, ~/.cache/mlxfit)."""
    return Path(root) / "hub" if root is not None else (settings or from_environ()).hub_cache_dir


def _endpoint_slug(ep: str) -> str:
    # hostname and port only: credentials in HF_ENDPOINT (user:pass@) never name a directory
    parts = urlsplit(ep)
    try:
        host = (parts.hostname or "") + (f"_{parts.port}" if parts.port else "")
    except ValueError:  # a port that is not a number
        host = parts.hostname or ""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", (host + parts.path).strip("/")) or "hub"


def repo_cache_dir(root: Path, ep: str, repo_id: str) -> Path:
    return root / _endpoint_slug(ep) / cache_dirname(repo_id)


def _ref_file(repo_dir: Path, revision: str) -> Path:
    return repo_dir / "refs" / quote(revision, safe="")


def entry_file(repo_dir: Path, commit: str) -> Path:
    return repo_dir / "snapshots" / f"{commit}.json.gz"


def snapshot_label(repo_id: str, commit: str) -> str:
    return f"{repo_id}@{commit[:12]}"


# --- the metadata cache ---------------------------------------------------------------------


@dataclass
class Snapshot:
    """Everything read from the Hub for one commit: enough to rebuild the model's metadata."""

    repo_id: str
    commit: str
    endpoint: str
    fetched_at: str
    siblings: list[tuple[str, int | None]]
    files: dict[str, bytes]  # config.json, index, kv_config.json as fetched
    shards: list[tuple[str, int, bytes]]  # (name, file size, first 8 + N bytes)
    requests: int = 0
    bytes: int = 0

    def to_json(self) -> bytes:
        b64 = lambda b: base64.b64encode(b).decode("ascii")
        doc = {
            "schema": CACHE_SCHEMA,
            "repo_id": self.repo_id,
            "commit": self.commit,
            "endpoint": self.endpoint,
            "fetched_at": self.fetched_at,
            "siblings": [[n, s] for n, s in self.siblings],
            "files": {n: b64(b) for n, b in self.files.items()},
            "shards": [[n, s, b64(raw)] for n, s, raw in self.shards],
            "transfer": {"requests": self.requests, "bytes": self.bytes},
        }
        return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), compresslevel=6)

    @staticmethod
    def from_json(data: bytes, *, limit: int = 512_000_000) -> Snapshot:
        """A cache entry read back as untrusted input (a hand-edited or planted file is just
        another hostile source): inflated at most ``limit`` bytes, every field of its type,
        file names plain and of the kinds a fetch writes, sizes bounded. ValueError if not."""
        doc = json.loads(_inflate(data, limit))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")  # noqa: TRY004 (the caller catches ValueError)
        if doc.get("schema") != CACHE_SCHEMA:
            raise ValueError(f"schema {_shown(doc.get('schema'))}")
        transfer = _field(doc, "transfer", dict)
        siblings = []
        for item in _field(doc, "siblings", list):
            n, s = _pair(item, "siblings")
            siblings.append((_sibling_name(n), None if s is None else _size(s, "a sibling")))
        files = {}
        for n, b in _field(doc, "files", dict).items():
            if n not in JSON_NAMES:
                raise ValueError(f"a file {_shown(n)} that a fetch never writes")
            files[n] = _unb64(b)
        shards = []
        for item in _field(doc, "shards", list):
            if not isinstance(item, list) or len(item) != 3:
                raise ValueError("a shard that is not [name, size, header]")
            shards.append((_shard_name(item[0]), _size(item[1], "a shard"), _unb64(item[2])))
        if len({n for n, _, _ in shards}) != len(shards):
            raise ValueError("a shard listed twice")
        return Snapshot(
            repo_id=_field(doc, "repo_id", str),
            commit=_field(doc, "commit", str),
            endpoint=_field(doc, "endpoint", str),
            fetched_at=_field(doc, "fetched_at", str),
            siblings=siblings,
            files=files,
            shards=shards,
            requests=_size(transfer.get("requests"), "requests"),
            bytes=_size(transfer.get("bytes"), "bytes"),
        )


JSON_NAMES = ("config.json", "model.safetensors.index.json", "kv_config.json")
_SHARD_NAME = re.compile(r"model[^/\\\x00-\x1f\x7f-\x9f]*\.safetensors")  # the plan's glob, no path


def is_shard_name(n: str) -> bool:
    """A shard name a cache entry may hold: model*.safetensors, a plain name (no separator, no
    control character), so staging it can only ever write inside the staging folder."""
    return _SHARD_NAME.fullmatch(n) is not None


def _inflate(data: bytes, limit: int) -> bytes:
    """One gzip member, at most ``limit`` bytes once inflated (a bomb stops there)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    out = d.decompress(data, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        raise ValueError(f"inflates past {limit:,} bytes")
    if not d.eof:
        raise ValueError("truncated gzip")
    return out


def _shown(v: object) -> str:
    return repr(v)[:40]


def _field(doc: dict, key: str, kind: type) -> Any:
    v = doc.get(key)
    if type(v) is not kind:
        raise ValueError(f"{key!r} is {_shown(v)}, not a {kind.__name__}")
    return v


def _pair(item: object, what: str) -> tuple[Any, Any]:
    if not isinstance(item, list) or len(item) != 2:
        raise ValueError(f"an entry of {what!r} that is not a pair")
    return item[0], item[1]


def _size(v: object, what: str) -> int:
    if type(v) is not int or not 0 <= v <= MAX_FILE_BYTES:
        raise ValueError(f"{what} size {_shown(v)} (sizes are whole numbers 0 to 2^53)")
    return v


# Folders deep a repo's file may be: real repos nest a few levels (onnx/, openvino/...); a
# listing of names hundreds of levels deep is refused before any of it is staged.
MAX_PATH_DEPTH = 32


def path_too_deep(name: str) -> bool:
    return name.count("/") >= MAX_PATH_DEPTH


def _sibling_name(n: object) -> str:
    if type(n) is not str or not n or len(n) > 1000 or "\x00" in n:
        raise ValueError(f"a file name {_shown(n)}")
    if path_too_deep(n):
        raise ValueError(f"a file name more than {MAX_PATH_DEPTH} folders deep")
    return n


def _shard_name(n: object) -> str:
    if type(n) is not str or not is_shard_name(n):
        raise ValueError(f"a shard name {_shown(n)} (shards are model*.safetensors, no path)")
    return n


def _unb64(s: object) -> bytes:
    if type(s) is not str:
        raise ValueError(f"bytes given as {_shown(s)}")
    return base64.b64decode(s.encode("ascii"), validate=True)


def atomic_write(path: Path, data: bytes) -> None:
    write_file(path, data, make_parents=True)  # whole or not at all, never through a link


def read_entry(path: Path, repo_id: str, commit: str, endpoint: str,
                limit: int = 512_000_000) -> Snapshot | None:
    """The cached snapshot of ``repo_id`` at ``commit`` from ``endpoint``; None if absent. A
    file that is corrupt, not a regular file, over ``limit`` bytes inflated, or that describes
    another repo, commit or endpoint than its path raises ValueError naming it."""
    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    return _checked_entry(data, path, repo_id, commit, endpoint, limit)


def write_entry(path: Path, data: bytes, repo_id: str, commit: str, endpoint: str,
                limit: int) -> None:
    """Write a cache entry only if ``read_entry`` will take it back (the same cap, the same
    checks): an entry mlxfit wrote is never later called corrupt (one that compressed under
    the cap but inflated past it was). OSError, the old file kept, if it would not be."""
    def readable(b: bytes) -> None:
        if len(b) > limit:
            raise OSError(f"the entry would be {len(b):,} bytes, over the {limit:,}-byte cap")
        try:
            _checked_entry(b, path, repo_id, commit, endpoint, limit)
        except ValueError as e:
            raise OSError(f"it would not read back: {e}") from None

    write_file(path, data, make_parents=True, validate=readable)


def _checked_entry(data: bytes, path: Path, repo_id: str, commit: str, endpoint: str,
                   limit: int) -> Snapshot:
    try:
        snap = Snapshot.from_json(data, limit=limit)
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, IndexError,
            AttributeError, RecursionError, MemoryError) as e:
        why = str(e) if isinstance(e, ValueError) and str(e) else type(e).__name__
        raise ValueError(f"{path} is corrupt ({why})".replace("\n", " ")) from None
    for what, got, want in (("repo", snap.repo_id, repo_id), ("commit", snap.commit, commit),
                            ("endpoint", snap.endpoint, redact_url(endpoint))):
        if got != want:
            raise ValueError(f"{path} is corrupt (it holds {what} {got[:80]!r}, not the "
                             f"{what} its path names)")
    return snap


def _read_ref(repo_dir: Path, revision: str) -> tuple[str | None, float]:
    """(commit, age in seconds) of a cached branch/tag, (None, inf) when unknown."""
    ref = _ref_file(repo_dir, revision)
    try:
        sha = read_regular(ref, 4096).decode("ascii", "replace").strip()  # a FIFO never hangs
        age = time.time() - ref.stat().st_mtime
    except OSError:
        return None, float("inf")
    return (sha, age) if HEX40.fullmatch(sha) else (None, float("inf"))


def cached_commit(repo_dir: Path, revision: str | None) -> tuple[str | None, float]:
    if revision is not None and HEX40.fullmatch(revision):
        return revision, 0.0  # a full commit sha never moves
    return _read_ref(repo_dir, revision or "main")


def write_ref(repo_dir: Path, revision: str | None, commit: str) -> None:
    if revision is not None and HEX40.fullmatch(revision):
        return
    try:
        atomic_write(_ref_file(repo_dir, revision or "main"), commit.encode())
    except OSError:
        pass  # the snapshot is still cached by commit; the next run asks for the ref again
