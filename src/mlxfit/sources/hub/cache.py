"""mlxfit's Hub metadata cache on disk: one gzipped JSON snapshot per commit (``_Snapshot``:
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
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

from mlxfit.settings import Settings, from_environ
from mlxfit.sources.hf_cache import cache_dirname

CONFIG_NAME = "config.json"
KV_CONFIG_NAME = "kv_config.json"
CACHE_SCHEMA = 1

_HEX40 = re.compile(r"[0-9a-f]{40}")


def hub_cache_dir(root: str | os.PathLike[str] | None = None, *,
                  settings: Settings | None = None) -> Path:
    """Where Hub metadata is kept: <cache root>/hub/<endpoint host>/models--org--name/, the
    cache root being ``root`` or ``Settings.cache_dir`` ($MLXFIT_CACHE_DIR,
    $XDG_CACHE_HOME/mlxfit, ~/.cache/mlxfit)."""
    return Path(root) / "hub" if root is not None else (settings or from_environ()).hub_cache_dir


def _endpoint_slug(ep: str) -> str:
    parts = urlsplit(ep)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", (parts.netloc + parts.path).strip("/")) or "hub"


def _repo_dir(root: Path, ep: str, repo_id: str) -> Path:
    return root / _endpoint_slug(ep) / cache_dirname(repo_id)


def _ref_file(repo_dir: Path, revision: str) -> Path:
    return repo_dir / "refs" / quote(revision, safe="")


def _entry_file(repo_dir: Path, commit: str) -> Path:
    return repo_dir / "snapshots" / f"{commit}.json.gz"


def _label(repo_id: str, commit: str) -> str:
    return f"{repo_id}@{commit[:12]}"


# --- the metadata cache ---------------------------------------------------------------------


@dataclass
class _Snapshot:
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
    def from_json(data: bytes) -> _Snapshot:
        doc = json.loads(gzip.decompress(data))
        if doc["schema"] != CACHE_SCHEMA:
            raise ValueError(f"schema {doc['schema']!r}")
        unb64 = lambda s: base64.b64decode(s.encode("ascii"), validate=True)
        return _Snapshot(
            repo_id=str(doc["repo_id"]),
            commit=str(doc["commit"]),
            endpoint=str(doc["endpoint"]),
            fetched_at=str(doc["fetched_at"]),
            siblings=[(str(n), None if s is None else int(s)) for n, s in doc["siblings"]],
            files={str(n): unb64(b) for n, b in doc["files"].items()},
            shards=[(str(n), int(s), unb64(r)) for n, s, r in doc["shards"]],
            requests=int(doc["transfer"]["requests"]),
            bytes=int(doc["transfer"]["bytes"]),
        )


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_entry(path: Path) -> _Snapshot | None:
    """A cached snapshot; None if absent. A corrupt file raises ValueError naming it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return _Snapshot.from_json(data)
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, IndexError,
            RecursionError) as e:
        raise ValueError(f"{path} is corrupt ({type(e).__name__})") from None


def _read_ref(repo_dir: Path, revision: str) -> tuple[str | None, float]:
    """(commit, age in seconds) of a cached branch/tag, (None, inf) when unknown."""
    ref = _ref_file(repo_dir, revision)
    try:
        sha = ref.read_text().strip()
        age = time.time() - ref.stat().st_mtime
    except OSError:
        return None, float("inf")
    return (sha, age) if _HEX40.fullmatch(sha) else (None, float("inf"))


def _cached_commit(repo_dir: Path, revision: str | None) -> tuple[str | None, float]:
    if revision is not None and _HEX40.fullmatch(revision):
        return revision, 0.0  # a full commit sha never moves
    return _read_ref(repo_dir, revision or "main")


def _write_ref(repo_dir: Path, revision: str | None, commit: str) -> None:
    if revision is not None and _HEX40.fullmatch(revision):
        return
    try:
        _atomic_write(_ref_file(repo_dir, revision or "main"), commit.encode())
    except OSError:
        pass  # the snapshot is still cached by commit; the next run asks for the ref again
