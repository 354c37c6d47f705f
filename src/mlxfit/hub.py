"""Read a model on the Hugging Face Hub without downloading it: config.json, the shard index,
kv_config.json and the safetensors *headers* of each shard, through huggingface_hub's HTTP
session and Range requests. Never tensor data.

Requests, in the order they are made (all through ``huggingface_hub.utils.get_session()``, the
client huggingface_hub itself uses, so HF_ENDPOINT, proxies and offline mode behave the same):

1. ``GET {endpoint}/api/models/{repo}[/revision/{rev}]?blobs=true``: what
   ``HfApi.model_info(files_metadata=True)`` asks; gives the commit sha and every file with its
   size. One round trip.
2. In parallel (a thread pool), pinned to that commit so every file comes from one snapshot:
   - ``GET {endpoint}/{repo}/resolve/{sha}/config.json`` (and the index, kv_config.json);
   - for each ``model*.safetensors`` (the files mlx-lm globs): ``Range: bytes=0-7`` (the header
     length N), then ``Range: bytes=8-{7+N}`` (the header) sent straight to the URL the first
     request was redirected to (the CDN), so a shard costs two round trips plus one redirect.
     The token is only ever sent to the endpoint's own origin.

Bytes transferred are the model-info JSON, the small JSON files and 8 + N per shard, counted
from the responses (``HubTransfer``). What was read is validated by the very code that reads a
local folder (``sources._load_folder`` over a throw-away folder of header-only stubs), then kept
in a metadata cache keyed by endpoint, repo and commit, so the next run needs no network and
works under HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import dataclasses
import gzip
import json
import os
import re
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from mlxfit.errors import ConfigError, MlxfitError, SourceError, WeightsError
from mlxfit.safetensors_header import MAX_HEADER_BYTES

if TYPE_CHECKING:
    from mlxfit.sources import ModelSource

DEFAULT_ENDPOINT = "https://huggingface.co"
CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"
KV_CONFIG_NAME = "kv_config.json"
SHARD_GLOB = "model*.safetensors"  # what mlx-lm loads (mlx_lm.utils.load_model globs it)
CACHE_SCHEMA = 1

# Tunables, read at call time (tests and the benchmark set them).
RETRIES = 4  # extra attempts after the first, for 408/429/5xx, timeouts and cut connections
BACKOFF_SECONDS = 0.5  # first wait; doubles up to MAX_WAIT_SECONDS
MAX_WAIT_SECONDS = 8.0  # also caps a server's Retry-After
MAX_WORKERS = 64  # concurrent requests; 100 shards = 2 waves
REF_TTL_SECONDS = 24 * 3600  # a branch or tag -> commit mapping is trusted this long offline-free
MAX_JSON_BYTES = 64_000_000  # config/index/kv_config: an index of 200,000 tensors is ~15 MB
MAX_INFO_BYTES = 64_000_000
TIMEOUT_SECONDS: float | None = None  # per request; None: HF_HUB_DOWNLOAD_TIMEOUT, else 10

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_HEX40 = re.compile(r"[0-9a-f]{40}")
_LOGIN = "log in with `hf auth login` or set HF_TOKEN"
_OFFLINE_HINT = "HF_HUB_OFFLINE=1 works for models already cached"


class _Cancelled(MlxfitError):
    """Another request of the same fetch failed: stop quietly (never shown)."""


class HubUnreachable(SourceError):
    """The Hub could not be asked (network, timeouts, 429/5xx after retries): a cached copy,
    even an old one, is still a good answer."""


@dataclass(frozen=True)
class HubTransfer:
    """What reading a Hub model cost: for ``--verbose``."""

    requests: int  # HTTP requests made by this call (redirect hops and retries included)
    bytes: int  # response body bytes received by this call
    from_cache: bool  # metadata came from mlxfit's cache (requests is then 0, or 1 to check a ref)
    commit: str
    fetched_at: str  # when the metadata was read from the Hub (ISO 8601, UTC)
    header_bytes: int = 0  # of those bytes: 8 + N per shard, when fetched now
    shards: int = 0

    def describe(self) -> str:
        if self.from_cache:
            net = "no network" if self.requests == 0 else (
                f"{self.requests} request{'s' * (self.requests != 1)}, {self.bytes:,} bytes "
                "to check the commit")
            return (f"Hub metadata from mlxfit's cache (commit {self.commit[:12]}, read "
                    f"{self.fetched_at}; {net})")
        return (f"read from the Hub: {self.requests} requests, {self.bytes:,} bytes "
                f"({self.shards} safetensors headers = {self.header_bytes:,} bytes, plus JSON); "
                "no tensor data")


# --- environment, read at call time ---------------------------------------------------------
# huggingface_hub freezes HF_ENDPOINT and HF_HUB_OFFLINE in its constants at import; a test or
# a long-lived process that changes them would be ignored, so they are read here on each call.


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def is_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it, at call time."""
    return _truthy(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE"))


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def cache_root() -> Path:
    """mlxfit's own cache: $MLXFIT_CACHE_DIR, else $XDG_CACHE_HOME/mlxfit, else ~/.cache/mlxfit."""
    explicit = os.environ.get("MLXFIT_CACHE_DIR")
    if explicit:
        return Path(os.path.expandvars(os.path.expanduser(explicit)))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlxfit"


def hub_cache_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """Where Hub metadata is kept: <cache root>/hub/<endpoint host>/models--org--name/."""
    return Path(root) / "hub" if root is not None else cache_root() / "hub"


def is_repo_id(spec: str) -> bool:
    """Could the Hub have a model called ``spec``? (huggingface_hub's own validator.)"""
    _huggingface_hub()
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(spec)
    except HFValidationError:
        return False
    return True


def _endpoint_slug(ep: str) -> str:
    parts = urlsplit(ep)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", (parts.netloc + parts.path).strip("/")) or "hub"


def _repo_dir(root: Path, ep: str, repo_id: str) -> Path:
    return root / _endpoint_slug(ep) / ("models--" + repo_id.replace("/", "--"))


def _ref_file(repo_dir: Path, revision: str) -> Path:
    return repo_dir / "refs" / quote(revision, safe="")


def _entry_file(repo_dir: Path, commit: str) -> Path:
    return repo_dir / "snapshots" / f"{commit}.json.gz"


def _label(repo_id: str, commit: str) -> str:
    return f"{repo_id}@{commit[:12]}"


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


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


# --- rebuilding a ModelSource from a snapshot -------------------------------------------------


def _safe_relpath(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name)
    if p.is_absolute() or not p.parts or any(part in ("", ".", "..") for part in p.parts):
        return None
    return p


def _index_targets(snap: _Snapshot) -> set[str]:
    try:
        weight_map = json.loads(snap.files[INDEX_NAME])["weight_map"]
        return {v for v in weight_map.values() if isinstance(v, str)}
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError):  # garbled: the
        return set()  # folder reader (sources._index_shards) says which


def _materialize(folder: Path, snap: _Snapshot) -> None:
    """A throw-away folder that looks like the repo to sources._load_folder: the fetched JSON,
    header-only shard stubs (8 + N bytes, then a sparse hole up to the real file size) and an
    empty placeholder for each other file whose name matters (other *.safetensors: notes; files
    the index lists: the missing-shard check)."""
    written = set(snap.files) | {n for n, _, _ in snap.shards}
    wanted = _index_targets(snap)
    for name, _ in snap.siblings:
        if name in written or not (name.endswith(".safetensors") or name in wanted):
            continue
        rel = _safe_relpath(name)
        if rel is None:
            continue
        target = folder.joinpath(*rel.parts)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        except (OSError, ValueError):  # "a" and "a/b" both listed: keep whichever came first
            continue
    for name, data in snap.files.items():
        (folder / name).write_bytes(data)
    for name, size, raw in snap.shards:
        try:
            with open(folder / name, "wb") as f:
                f.write(raw)
                f.truncate(max(size, len(raw)))  # a hole: costs no disk on APFS, ext4, tmpfs
        except (OSError, ValueError) as e:
            raise WeightsError(f"{_label(snap.repo_id, snap.commit)}/{name}: cannot stage its "
                               f"header for checking ({_short(e)})") from None


def _relabel(e: MlxfitError, folder: Path, label: str) -> MlxfitError:
    msg = str(e).replace(str(folder) + os.sep, label + "/").replace(str(folder), label)
    return type(e)(msg)


def _to_source(snap: _Snapshot, transfer: HubTransfer, notes: tuple[str, ...] = ()) -> ModelSource:
    from mlxfit.sources import _load_folder

    label = _label(snap.repo_id, snap.commit)
    try:
        with tempfile.TemporaryDirectory(prefix="mlxfit-hub-") as tmp:
            folder = Path(tmp) / "snapshot"
            folder.mkdir()
            _materialize(folder, snap)
            try:
                src = _load_folder(folder, snap.repo_id, "hub", snap.commit)
            except MlxfitError as e:
                raise _relabel(e, folder, label) from None
    except OSError as e:  # no writable temporary directory
        raise SourceError(f"{label}: cannot stage the headers for checking in "
                          f"{tempfile.gettempdir()}: {e.strerror or e}") from None
    resolve = f"{snap.endpoint}/{snap.repo_id}/resolve/{snap.commit}/"
    return dataclasses.replace(
        src,
        location=f"{snap.endpoint}/{snap.repo_id}/blob/{snap.commit}",
        files=tuple(resolve + Path(p).name for p in src.files),
        notes=src.notes + notes,
        transfer=transfer,
    )


# --- HTTP -------------------------------------------------------------------------------------


@dataclass
class _Body:
    data: bytes
    url: str  # after redirects
    total: int | None  # file size from Content-Range, when the server said


def _origin(url: str) -> tuple[str, str]:
    p = urlsplit(url)
    return p.scheme, p.netloc


class _Http:
    """GETs through huggingface_hub's shared session: bounded retries with backoff, streamed
    bodies read only as far as needed, every failure turned into a one-line MlxfitError."""

    def __init__(self, repo_id: str, revision: str | None, ep: str, token: str | bool | None,
                 timeout: float | None):
        from huggingface_hub.utils import get_session

        self.repo_id, self.revision, self.endpoint = repo_id, revision, ep
        self.client = get_session()
        if not hasattr(self.client, "stream"):  # huggingface_hub < 1.0 hands out requests
            from huggingface_hub import __version__

            raise SourceError(f"reading the Hub needs huggingface_hub >= 1.0 (found {__version__}):"
                              " pip install -U huggingface_hub")
        self.x = __import__(type(self.client).__module__.split(".")[0])  # httpx2 (or httpx)
        # Not build_hf_headers(): in huggingface_hub 2.x its user-agent step may itself fetch
        # {endpoint}/api/agent-harnesses, a request we would neither want nor account for.
        self.token = _token_to_send(token)
        self.anon_headers = {"user-agent": _user_agent()}
        self.auth_headers = dict(self.anon_headers)
        if self.token:
            self.auth_headers["authorization"] = f"Bearer {self.token}"
        self.timeout = timeout if timeout is not None else _default_timeout()
        self.retries = RETRIES
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0
        self.cancelled = threading.Event()  # set when one request of the fetch has failed

    # -- accounting
    def _count(self, requests: int, nbytes: int) -> None:
        with self.lock:
            self.requests += requests
            self.bytes += nbytes

    def _headers_for(self, url: str) -> dict[str, str]:
        # The token goes to the endpoint's origin only, never to a CDN URL we were sent to.
        return self.auth_headers if _origin(url) == _origin(self.endpoint) else self.anon_headers

    # -- the one request loop
    def get(self, url: str, what: str, *, params: dict | None = None, start: int = 0,
            length: int | None = None, limit: int = MAX_JSON_BYTES) -> _Body:
        """Body of ``url`` (bytes start..start+length-1 when length is given, else at most
        ``limit`` bytes). 416 gives an empty body with the file size."""
        headers = dict(self._headers_for(url))
        if length is not None:
            headers["range"] = f"bytes={start}-{start + length - 1}"
        attempts = 1 + max(0, self.retries)
        wait = BACKOFF_SECONDS
        x = self.x
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            if self.cancelled.is_set():
                raise _Cancelled("cancelled")
            try:
                with self.client.stream("GET", url, headers=headers, params=params,
                                        timeout=self.timeout, follow_redirects=True) as r:
                    hops = 1 + len(r.history)
                    self._count(0, sum(h.num_bytes_downloaded for h in r.history))
                    status = r.status_code
                    if status in _RETRY_STATUS and not last:
                        self._count(hops, 0)
                        self.cancelled.wait(self._retry_after(r, wait))
                        wait = min(MAX_WAIT_SECONDS, wait * 2)
                        continue
                    if status == 416 and length is not None:
                        self._count(hops, r.num_bytes_downloaded)
                        return _Body(b"", str(r.url), _content_range_total(r))
                    if status >= 300:
                        self._count(hops, 0)
                        raise self._status_error(r, what, attempt)
                    body = self._read(r, what, start, length, limit, status)
                    self._count(hops, r.num_bytes_downloaded)
                    return body
            except MlxfitError:
                raise
            except x.ConnectError as e:
                # Refused, DNS, TLS: retrying in a second will not help; say so now.
                raise HubUnreachable(
                    f"cannot reach the Hub at {self.endpoint} to read {self._what(what)} "
                    f"({_short(e)}); check the connection and HF_ENDPOINT; {_OFFLINE_HINT}"
                ) from None
            except (x.TimeoutException, x.RemoteProtocolError, x.ReadError, x.CloseError) as e:
                self._count(1, 0)
                if last:
                    raise self._transport_error(e, what, attempts) from None
                self.cancelled.wait(wait)
                wait = min(MAX_WAIT_SECONDS, wait * 2)
            except x.TooManyRedirects:
                raise SourceError(f"the Hub at {self.endpoint} redirected {self._what(what)} "
                                  "in a loop") from None
            except (x.HTTPError, x.StreamError, x.InvalidURL) as e:
                raise SourceError(f"cannot read {self._what(what)} from the Hub at "
                                  f"{self.endpoint}: {_short(e)}") from None
            except Exception as e:
                from huggingface_hub.errors import OfflineModeIsEnabled

                if isinstance(e, OfflineModeIsEnabled):
                    raise SourceError(
                        f"{self.repo_id}: huggingface_hub is in offline mode (HF_HUB_OFFLINE was "
                        "set when it was imported), so the Hub was not asked") from None
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, r: Any, what: str, start: int, length: int | None, limit: int,
              status: int) -> _Body:
        total = _content_range_total(r)
        skip = 0
        if length is not None:
            if status == 206:
                got_start = _content_range_start(r)
                if got_start is not None and got_start != start:
                    raise WeightsError(f"{self._what(what)}: the server sent bytes from offset "
                                       f"{got_start}, not {start} as asked")
            else:  # 200: the range was ignored; stop reading as soon as we have ours
                skip = start
            want = length
        else:
            want = limit + 1
        out = bytearray()
        seen = 0
        for chunk in r.iter_bytes():
            seen += len(chunk)
            if skip:
                drop = min(skip, len(chunk))
                chunk, skip = chunk[drop:], skip - drop
            out += chunk[: want - len(out)]
            # A 206 of the size asked ends by itself, and its connection goes back to the pool.
            # Anything longer (a 200 for the whole file, a server sending more than asked) is
            # cut here: leaving the block closes the response, the rest is never read.
            if len(out) >= want and (status != 206 or seen > want):
                break
        if length is None and len(out) > limit:
            raise WeightsError(f"{self._what(what)} is larger than {limit:,} bytes: "
                               "not the small JSON file mlxfit expects")
        return _Body(bytes(out), str(r.url), total)

    def _retry_after(self, r: Any, default: float) -> float:
        value = r.headers.get("retry-after", "")
        if value.strip().isdigit():
            return min(MAX_WAIT_SECONDS, float(value))
        return default

    # -- messages (never the token: we compose them from status codes and names only)
    def _what(self, what: str) -> str:
        return f"{self.repo_id} {what}" if what == "model info" else f"{self.repo_id}/{what}"

    def _status_error(self, r: Any, what: str, attempts: int) -> MlxfitError:
        code = r.status_code
        ecode = r.headers.get("x-error-code", "")
        emsg = r.headers.get("x-error-message", "")
        repo, ep = self.repo_id, self.endpoint
        page = f"{ep}/{repo}"
        if ecode == "GatedRepo" or (code in (401, 403) and "gated" in emsg.lower()):
            if self.token:
                return SourceError(
                    f"{repo} is gated and this account has not been granted access ({code}): "
                    f"request it on {page} and wait for approval, or log in with an account "
                    "that has it (`hf auth login` or HF_TOKEN)")
            return SourceError(
                f"{repo} is gated ({code}): {_LOGIN}, and request access on {page} "
                "(it must be granted before its files can be read)")
        if ecode == "RevisionNotFound":
            return SourceError(f"revision {self.revision or 'main'} not found in {repo} on the "
                               f"Hub at {ep}")
        if ecode == "RepoNotFound" or (what == "model info" and code == 404):
            if code == 401 or not self.token:
                return SourceError(
                    f"{repo} not found on the Hub at {ep} ({code}), or it is private: "
                    f"if you have access, {_LOGIN}")
            return SourceError(f"{repo} not found on the Hub at {ep} ({code}; if it is private, "
                               "this token has no access to it)")
        if code == 401:
            if self.token:
                return SourceError(f"the Hub at {ep} rejected the token for {repo} (401): "
                                   f"{_LOGIN} again")
            return SourceError(f"{repo} needs authentication (401): {_LOGIN}; if it is gated, "
                               f"request access on {page}")
        if code == 403:
            return SourceError(
                f"access to {self._what(what)} denied (403): if {repo} is gated or private, "
                f"{_LOGIN} with an account that has been granted access on {page}")
        if code == 404:
            return WeightsError(f"{self._what(what)}: listed by the Hub but not found (404)")
        if code in _RETRY_STATUS:
            return HubUnreachable(
                f"the Hub at {ep} answered {code} {_reason(r)} for {self._what(what)} "
                f"{attempts} time{'s' * (attempts != 1)}; try again later ({_OFFLINE_HINT})")
        if 300 <= code < 400:
            return SourceError(f"the Hub at {ep} redirected {self._what(what)} ({code}) "
                               "without a usable location")
        return SourceError(f"the Hub at {ep} answered {code} {_reason(r)} for {self._what(what)}")

    def _transport_error(self, e: Exception, what: str, attempts: int) -> MlxfitError:
        x = self.x
        if isinstance(e, x.TimeoutException):
            return HubUnreachable(
                f"the Hub at {self.endpoint} did not answer within {self.timeout:g} s for "
                f"{self._what(what)} ({attempts} attempts; HF_HUB_DOWNLOAD_TIMEOUT sets the "
                f"limit); {_OFFLINE_HINT}")
        return HubUnreachable(
            f"connection cut while reading {self._what(what)} from {self.endpoint} "
            f"({attempts} attempts: {_short(e)}); try again; {_OFFLINE_HINT}")


def _token_to_send(token: str | bool | None) -> str | None:
    """As huggingface_hub decides: an explicit string; False for none; otherwise HF_TOKEN or the
    stored login (``hf auth login``), unless HF_HUB_DISABLE_IMPLICIT_TOKEN is set."""
    if isinstance(token, str):
        return token or None
    if token is False:
        return None
    if token is None and _truthy(os.environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN")):
        return None
    from huggingface_hub.utils import get_token

    found = get_token()
    if token is True and not found:
        raise SourceError(f"no Hugging Face token found: {_LOGIN}")
    return found


def _user_agent() -> str:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours, theirs = version("mlxfit"), version("huggingface_hub")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        ours, theirs = "unknown", "unknown"
    return f"mlxfit/{ours}; hf_hub/{theirs}; python/{platform.python_version()}"


def _default_timeout() -> float:
    if TIMEOUT_SECONDS is not None:
        return TIMEOUT_SECONDS
    try:
        return float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or 10)
    except ValueError:
        return 10.0


def _huggingface_hub() -> None:
    """Import huggingface_hub's HTTP layer, or say in one line why it cannot be (it parses
    environment variables at import: HF_HUB_DOWNLOAD_TIMEOUT=0.5 makes it raise)."""
    try:
        import huggingface_hub.utils._http  # noqa: F401
    except (ImportError, ValueError, TypeError) as e:
        raise SourceError(f"cannot use huggingface_hub to read the Hub: {_short(e)}") from None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _reason(r: Any) -> str:
    return getattr(r, "reason_phrase", "") or ""


_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


def _content_range(r: Any) -> tuple[int | None, int | None]:
    m = _CONTENT_RANGE.match(r.headers.get("content-range", "").strip())
    if not m:
        return None, None
    start = int(m.group(1)) if m.group(1) else None
    total = int(m.group(3)) if m.group(3) != "*" else None
    return start, total


def _content_range_start(r: Any) -> int | None:
    return _content_range(r)[0]


def _content_range_total(r: Any) -> int | None:
    return _content_range(r)[1]


# --- fetching ---------------------------------------------------------------------------------


def _resolve_url(ep: str, repo_id: str, commit: str, name: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, name, revision=commit, endpoint=ep)


def _model_info(http: _Http, revision: str | None) -> dict[str, Any]:
    ep, repo = http.endpoint, http.repo_id
    url = f"{ep}/api/models/{repo}" + (
        "" if revision is None else f"/revision/{quote(revision, safe='')}")
    body = http.get(url, "model info", params={"blobs": True}, limit=MAX_INFO_BYTES)
    try:
        info = json.loads(body.data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deeply
        info = None
    sha = info.get("sha") if isinstance(info, dict) else None
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not _HEX40.fullmatch(sha) or not isinstance(siblings, list):
        raise SourceError(f"the Hub at {ep} sent an unreadable model info for {repo} "
                          "(no commit sha or file list)")
    return info


def _siblings(info: dict[str, Any]) -> list[tuple[str, int | None]]:
    out = []
    for s in info["siblings"]:
        if not isinstance(s, dict) or not isinstance(s.get("rfilename"), str):
            continue
        if "\x00" in s["rfilename"] or len(s["rfilename"]) > 1000:
            continue  # no file system takes it; not a name the Hub would list
        size = s.get("size")
        lfs = s.get("lfs")
        if type(size) is not int and isinstance(lfs, dict):
            size = lfs.get("size")
        out.append((s["rfilename"], size if type(size) is int and size >= 0 else None))
    return out


def _listing(names: list[str], limit: int = 12) -> str:
    shown = sorted(names)[:limit]
    return ", ".join(shown) + (", ..." if len(names) > limit else "") if shown else "nothing"


def _plan(repo_id: str, commit: str, siblings: list[tuple[str, int | None]]) -> list[str]:
    """The shards mlx-lm would load, or a one-line error before any file is fetched."""
    names = [n for n, _ in siblings]
    label = _label(repo_id, commit)
    shards = sorted(n for n in names if "/" not in n and fnmatch(n, SHARD_GLOB))
    if not shards:
        kinds = []
        if any(n.endswith(".gguf") for n in names):
            kinds.append("GGUF")
        if any(n.endswith((".bin", ".pt", ".pth")) for n in names):
            kinds.append("PyTorch .bin")
        other_st = [n for n in names if n.endswith(".safetensors")]
        why = (f"{' and '.join(kinds)} weights only, which mlx-lm does not load: look for an MLX "
               "or safetensors conversion of it" if kinds else
               "mlx-lm loads model*.safetensors" + (" and this repo's safetensors are named "
                                                    "otherwise" if other_st else ""))
        raise WeightsError(f"{label}: no {SHARD_GLOB} on the Hub ({why}; files: "
                           f"{_listing(names)})")
    if CONFIG_NAME not in names:
        raise ConfigError(f"{label}: no config.json on the Hub (files: {_listing(names)})")
    return shards


def _fetch_shard(http: _Http, url: str, name: str, size: int | None) -> tuple[int, bytes, int]:
    """(file size, first 8 + N bytes, N) of one shard: two Range requests, never tensor data."""
    first = http.get(url, name, start=0, length=8)
    size = size if size is not None else first.total
    if size is None:
        raise WeightsError(f"{http.repo_id}/{name}: the Hub gave no file size for it")
    raw = first.data
    if len(raw) < 8:
        return size, raw, 0  # the validator says "too short"
    n = int.from_bytes(raw, "little")
    if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
        return size, raw, 0  # the validator names the bad length; no point fetching it
    # Straight to where the first request was redirected (the CDN): one hop less.
    target = first.url
    try:
        rest = http.get(target, name, start=8, length=n)
    except MlxfitError as e:
        if target == url or isinstance(e, (HubUnreachable, _Cancelled)):
            raise
        rest = http.get(url, name, start=8, length=n)  # the signed URL may have expired
    if len(rest.data) != n:
        raise WeightsError(f"{http.repo_id}/{name}: the Hub sent {len(rest.data)} of the {n} "
                           "header bytes asked for (the file is shorter than it says)")
    return size, raw + rest.data, n


def _fetch(http: _Http, info: dict[str, Any], progress: Any, max_workers: int) -> _Snapshot:
    repo_id, ep = http.repo_id, http.endpoint
    commit = info["sha"]
    siblings = _siblings(info)
    sizes = dict(siblings)
    shards = _plan(repo_id, commit, siblings)
    jsons = [n for n in (CONFIG_NAME, INDEX_NAME, KV_CONFIG_NAME) if n in sizes]
    for n in jsons:
        if (sizes[n] or 0) > MAX_JSON_BYTES:
            raise WeightsError(f"{_label(repo_id, commit)}/{n} is {sizes[n]:,} bytes: "
                               "not the small JSON file mlxfit expects")
    task = progress.add_task(f"reading {repo_id} headers", total=len(shards)) if progress else None

    files: dict[str, bytes] = {}
    got: dict[str, tuple[int, bytes, int]] = {}
    pool = cf.ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(shards) + len(jsons))),
                                 thread_name_prefix="mlxfit-hub")
    try:
        futures: dict[cf.Future, tuple[str, str]] = {}
        for n in jsons:
            futures[pool.submit(http.get, _resolve_url(ep, repo_id, commit, n), n)] = ("json", n)
        for n in shards:
            url = _resolve_url(ep, repo_id, commit, n)
            futures[pool.submit(_fetch_shard, http, url, n, sizes.get(n))] = ("shard", n)
        for fut in cf.as_completed(futures):
            kind, name = futures[fut]
            result = fut.result()  # the first failure stops everything (finally: cancel)
            if kind == "json":
                files[name] = result.data
            else:
                got[name] = result
                if progress:
                    progress.advance(task)
    finally:
        # After a failure: queued requests are dropped, running ones stop at their next retry,
        # and we wait for them (the interpreter would at exit anyway) so that nothing touches
        # the network once we have answered.
        http.cancelled.set()
        pool.shutdown(wait=True, cancel_futures=True)
    return _Snapshot(
        repo_id=repo_id, commit=commit, endpoint=ep, fetched_at=_now(), siblings=siblings,
        files=files, shards=[(n, got[n][0], got[n][1]) for n in shards],
        requests=http.requests, bytes=http.bytes,
    )


class _Progress:
    """A Rich spinner, then shards done / total, on stderr; transient (gone when done)."""

    def __init__(self, enabled: bool, repo_id: str):
        self.p: Any = None
        self.spin: Any = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(stderr=True)
        if not console.is_terminal:
            return  # a log file or a pipe gets no spinner frames (nor a stray blank line)
        self.p = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                          MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=True)
        self.p.start()
        self.spin = self.p.add_task(f"asking the Hub about {repo_id}", total=None)

    def shards(self) -> Any:
        if self.p is not None and self.spin is not None:
            self.p.remove_task(self.spin)
            self.spin = None
        return self.p

    def stop(self) -> None:
        if self.p is not None:
            self.p.stop()
            self.p = None


def _scrub(e: MlxfitError, token: str | None) -> MlxfitError:
    if token and token in str(e):
        return type(e)(str(e).replace(token, "***"))
    return e


# --- the entry points -------------------------------------------------------------------------


def load_cached(repo_id: str, revision: str | None = None, *,
                cache_dir: str | os.PathLike[str] | None = None,
                ref_ttl: float | None = None) -> ModelSource | None:
    """The model from mlxfit's Hub metadata cache, never the network; None when not cached
    (or, with ``ref_ttl``, when the branch/tag mapping is older than that many seconds)."""
    ep = endpoint()
    repo_dir = _repo_dir(hub_cache_dir(cache_dir), ep, repo_id)
    commit, age = _cached_commit(repo_dir, revision)
    if commit is None or (ref_ttl is not None and age > ref_ttl):
        return None
    try:
        snap = _read_entry(_entry_file(repo_dir, commit))
    except ValueError as e:
        raise SourceError(f"mlxfit's Hub metadata cache for {repo_id}: {e}; delete it and "
                          "run again online") from None
    if snap is None:
        return None
    return _to_source(snap, HubTransfer(0, 0, True, snap.commit, snap.fetched_at))


def _cached_commit(repo_dir: Path, revision: str | None) -> tuple[str | None, float]:
    if revision is not None and _HEX40.fullmatch(revision):
        return revision, 0.0  # a full commit sha never moves
    return _read_ref(repo_dir, revision or "main")


def fetch_model(
    repo_id: str,
    revision: str | None = None,
    *,
    progress: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    token: str | bool | None = None,
    timeout: float | None = None,
    max_workers: int | None = None,
    ref_ttl: float | None = None,
    offline: bool | None = None,
) -> ModelSource:
    """``repo_id`` at ``revision`` (default main) as a ModelSource of kind "hub".

    From mlxfit's metadata cache when it holds that commit (a branch or tag is re-checked with
    one request once its cached commit is older than ``ref_ttl``, default a day; offline, never),
    else from the Hub: headers and small JSON only, in parallel, then cached. ``progress`` shows a
    transient Rich progress on stderr. ``source.transfer`` says what it cost. Raises one-line
    SourceError / WeightsError / ConfigError, never with the token in it.
    """
    ep = endpoint()
    offline = is_offline() if offline is None else offline
    ttl = REF_TTL_SECONDS if ref_ttl is None else ref_ttl
    repo_dir = _repo_dir(hub_cache_dir(cache_dir), ep, repo_id)
    commit, age = _cached_commit(repo_dir, revision)
    cached: _Snapshot | None = None
    corrupt: str | None = None
    if commit is not None:
        try:
            cached = _read_entry(_entry_file(repo_dir, commit))
        except ValueError as e:
            corrupt = str(e)
    if cached is not None and (offline or age <= ttl):
        return _to_source(cached, HubTransfer(0, 0, True, cached.commit, cached.fetched_at))
    if offline:
        why = f"its cached metadata is unusable ({corrupt})" if corrupt else "it is not cached"
        raise SourceError(f"{repo_id}: HF_HUB_OFFLINE=1 is set, so the Hub was not asked, and "
                          f"{why} in mlxfit's Hub metadata cache at {hub_cache_dir(cache_dir)}")

    _huggingface_hub()
    http = None
    bar = _Progress(progress, repo_id)
    try:
        http = _Http(repo_id, revision, ep, token, timeout)
        try:
            info = _model_info(http, revision)
        except HubUnreachable as e:
            if cached is None:
                raise
            note = (f"could not check the Hub for a newer commit ({e}); using metadata "
                    f"cached {cached.fetched_at}")
            return _to_source(cached, HubTransfer(http.requests, http.bytes, True, cached.commit,
                                                  cached.fetched_at), (note,))
        commit = info["sha"]
        if cached is None or cached.commit != commit:
            try:
                cached = _read_entry(_entry_file(repo_dir, commit))
            except ValueError:
                cached = None  # corrupt: fetch it again and overwrite
        if cached is not None:
            _write_ref(repo_dir, revision, commit)
            return _to_source(cached, HubTransfer(http.requests, http.bytes, True, commit,
                                                  cached.fetched_at))
        snap = _fetch(http, info, bar.shards(), max_workers or MAX_WORKERS)
        bar.stop()
        header_bytes = sum(len(raw) for _, _, raw in snap.shards)
        transfer = HubTransfer(http.requests, http.bytes, False, commit, snap.fetched_at,
                               header_bytes, len(snap.shards))
        src = _to_source(snap, transfer)  # validates: an invalid model is never cached
        notes: tuple[str, ...] = ()
        try:
            _atomic_write(_entry_file(repo_dir, commit), snap.to_json())
            _write_ref(repo_dir, revision, commit)
        except OSError as e:
            why = e.strerror or str(e)
            notes = (f"could not write mlxfit's Hub metadata cache at {repo_dir}: {why}",)
        return dataclasses.replace(src, notes=src.notes + notes)
    except MlxfitError as e:
        raise _scrub(e, http.token if http else None) from None
    finally:
        bar.stop()


def _write_ref(repo_dir: Path, revision: str | None, commit: str) -> None:
    if revision is not None and _HEX40.fullmatch(revision):
        return
    try:
        _atomic_write(_ref_file(repo_dir, revision or "main"), commit.encode())
    except OSError:
        pass  # the snapshot is still cached by commit; the next run asks for the ref again
