"""A local stand-in for the Hugging Face Hub, for tests and the benchmark (stdlib only).

It serves the endpoints huggingface_hub 2.x calls to read a model without downloading it:

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``?blobs=true`` adds file
  sizes and LFS info to ``siblings``), as ``HfApi.model_info(files_metadata=True)`` asks;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}`` with ``Range``: small files directly (200/206),
  ``*.safetensors`` as LFS files, redirected (302, ``X-Linked-Size``) to a second server on
  another port standing for the CDN (a different origin, as cas-bridge.xethub.hf.co is), which
  serves ranges and never needs the token.

Errors carry the headers huggingface_hub reads (``X-Error-Code``: RepoNotFound, GatedRepo,
RevisionNotFound, EntryNotFound). Like the real Hub: an unknown or private repo is 401 without a
token and 404 with one; a gated repo's model info is public but its files are 401 without a
token and 403 with one that has not been granted access.

Like today's Hub (Dec 2026), optionally: small files answer a 307 with a *relative* Location to
``/api/resolve-cache/models/{repo}/{sha}/{file}?etag=...`` (``json_redirect``); every CDN link
is signed (an HMAC over path, expiry and a per-redirect id) and expires (``url_ttl``); in
``range_bound`` mode a link answers only the Range it was first used with (another gets 403
"Auth failed: invalid range", or hangs with ``range_bound="hang"``); every Hub answer carries
``RateLimit: "<bucket>";r=<left>;t=<seconds to the window's end>`` and ``RateLimit-Policy``, and
a bucket with a ``quota`` answers 429 (RateLimit r=0, no Retry-After) once it is spent.

Faults are injected per request: a fixed latency on every request, and rules matching a path
fragment (and optionally a range start) that answer a status (429 then 200, 500 forever...),
delay the answer, cut the connection in the middle of a body, hold it open half-sent
(``hold``), or drip the body (``drip``) or the headers (``drip_headers``) a byte at a time. Every request is logged with the
body bytes sent, so tests can assert that no tensor data ever left the server.

Models are folders built by the tests (sparse shards for big ones): files are served from disk.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

CHUNK = 64 * 1024


@dataclass
class Logged:
    server: str  # "hub" or "cdn"
    method: str
    path: str  # without the query
    query: str
    range: str | None
    status: int
    sent: int  # body bytes written
    authorization: str | None


@dataclass
class Rule:
    match: str  # substring of the path
    status: int | None = None  # answer this status instead
    body: bytes | None = None  # ... with this body (default: a JSON error)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # sleep this long first (then answer normally, or with status)
    drop: bool = False  # send the headers and half the body, then cut the connection
    drip: float = 0.0  # send the body one byte every this many seconds (a slow-drip server)
    hold: float = 0.0  # send the headers and half the body, then hold the connection this long
    drip_headers: float = 0.0  # send the status line, then header bytes one every this long
    range_start: int | None = None  # only requests whose Range starts here
    method: str | None = None
    server: str | None = None  # only requests to this server ("hub" or "cdn")
    times: int | None = None  # how many requests it applies to (None: all)
    hits: int = 0


@dataclass
class Repo:
    repo_id: str
    commits: dict[str, Path] = field(default_factory=dict)  # sha -> folder
    refs: dict[str, str] = field(default_factory=dict)  # branch / tag -> sha
    gated: bool = False
    private: bool = False
    granted: set[str] = field(default_factory=set)  # tokens with access


class FakeHub:
    """Start with ``FakeHub().start()`` (or as a context manager); ``url`` is the HF_ENDPOINT."""

    def __init__(self, *, latency: float = 0.0, redirect_lfs: bool = True,
                 honor_range: bool = True, valid_tokens: tuple[str, ...] = (),
                 json_redirect: bool = False, range_bound: bool | str = False,
                 url_ttl: float = 3600.0, quota: dict[str, int] | None = None,
                 window: float = 300.0):
        self.latency = latency
        self._in_flight = 0
        self.max_in_flight = 0  # the most requests in their latency at once (parallelism)
        self.json_redirect = json_redirect  # small files: 307 to /api/resolve-cache/...
        self.range_bound = range_bound  # a CDN link serves its first Range only (or "hang")
        self.url_ttl = url_ttl  # seconds a signed CDN link lives
        self.quota = dict(quota or {})  # bucket ("api", "resolvers") -> requests per window
        self.window = window  # seconds of a fixed rate-limit window
        self._window_start = time.monotonic()
        self._used: dict[str, int] = {}
        self._secret = hashlib.sha256(str(time.time_ns()).encode()).digest()
        self._uids = itertools.count(1)
        self._bound: dict[str, str | None] = {}  # link id -> the Range it was first used with
        self.redirect_lfs = redirect_lfs
        self.honor_range = honor_range  # False: answer 200 with the whole file, as some proxies do
        self.valid_tokens = set(valid_tokens)
        self.repos: dict[str, Repo] = {}
        self.rules: list[Rule] = []
        self.log: list[Logged] = []
        self.lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.url = self.cdn_url = ""

    # -- lifecycle
    def start(self) -> FakeHub:
        for role in ("hub", "cdn"):
            srv = _Server(("127.0.0.1", 0), _Handler)
            srv.hub, srv.role = self, role
            threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True, name=f"fakehub-{role}").start()
            self._servers.append(srv)
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        return self

    def stop(self) -> None:
        for srv in self._servers:
            srv.shutdown()
            srv.server_close()
        self._servers = []

    def __enter__(self) -> FakeHub:  # noqa: PYI034 (3.10 has no typing.Self)
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- content
    def add_model(self, repo_id: str, folder: Path, *, revision: str = "main",
                  commit: str | None = None, gated: bool = False, private: bool = False,
                  granted: tuple[str, ...] = ()) -> str:
        """Publish ``folder`` as a commit of ``repo_id`` and point ``revision`` at it."""
        repo = self.repos.setdefault(repo_id, Repo(repo_id))
        sha = commit or hashlib.sha1(f"{repo_id}:{folder}:{len(repo.commits)}".encode()).hexdigest()
        repo.commits[sha] = folder
        repo.refs[revision] = sha
        repo.gated = repo.gated or gated
        repo.private = repo.private or private
        repo.granted.update(granted)
        self.valid_tokens.update(granted)
        return sha

    def fault(self, match: str, **kw: Any) -> Rule:
        rule = Rule(match, **kw)
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.log.clear()

    # -- what happened
    def requests(self, server: str | None = None) -> list[Logged]:
        with self.lock:
            return [e for e in self.log if server is None or e.server == server]

    def bytes_sent(self, server: str | None = None) -> int:
        return sum(e.sent for e in self.requests(server))

    # -- internals used by the handler
    def _rule_for(self, method: str, path: str, range_start: int | None,
                  role: str = "hub") -> Rule | None:
        with self.lock:
            for r in self.rules:
                if r.match not in path or (r.method and r.method != method):
                    continue
                if r.server is not None and r.server != role:
                    continue
                if r.range_start is not None and r.range_start != range_start:
                    continue
                if r.times is not None and r.hits >= r.times:
                    continue
                r.hits += 1
                return r
        return None

    def _take(self, bucket: str) -> tuple[bool, dict[str, str]]:
        """Count one request against ``bucket``: (allowed, the RateLimit headers to send)."""
        with self.lock:
            now = time.monotonic()
            if now - self._window_start >= self.window:
                self._window_start, self._used = now, {}
            used = self._used[bucket] = self._used.get(bucket, 0) + 1
            left = max(1, math.ceil(self._window_start + self.window - now))
        q = self.quota.get(bucket, 1_000_000)
        return used <= q, {"RateLimit": f'"{bucket}";r={max(0, q - used)};t={left}',
                           "RateLimit-Policy": f'"fixed window";"{bucket}";q={q};'
                                               f"w={self.window:g}"}

    def _sign(self, path: str, expires: int, uid: str) -> str:
        return hmac.new(self._secret, f"{path}|{expires}|{uid}".encode(),
                        hashlib.sha256).hexdigest()[:32]

    def _bind(self, uid: str, rng: str | None) -> bool:
        """True when a link may serve ``rng``: its first use, or the same range again."""
        with self.lock:
            first = self._bound.setdefault(uid, rng)
        return first == rng

    def _record(self, entry: Logged) -> None:
        with self.lock:
            self.log.append(entry)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # socketserver's 5 drops SYNs when 64 workers connect at once
    hub: FakeHub
    role: str

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout tests) is not an error worth printing


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def _parse_range(value: str | None, size: int) -> tuple[int, int] | None | str:
    """(start, end inclusive), None without a Range, "bad" when unsatisfiable."""
    if not value:
        return None
    m = _RANGE.match(value.strip())
    if not m or (not m.group(1) and not m.group(2)):
        return "bad"
    if not m.group(1):  # suffix: the last N bytes
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n and size else "bad"
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) else size - 1
    if start >= size or end < start:
        return "bad"
    return start, min(end, size - 1)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real Hub
    # Buffered: the last bytes of a response leave at the flush after do_GET returns, i.e. after
    # the request is logged, so a client never sees an answer the log does not show yet.
    wbufsize = 1 << 16
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing
    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def _serve(self, method: str) -> None:
        hub = self.server.hub
        parts = urlsplit(self.path)
        self._method, self._sent, self._status = method, 0, 0
        self._rl: dict[str, str] = {}
        self._path, self._query = unquote(parts.path), parts.query
        rng = self.headers.get("Range")
        m = _RANGE.match(rng.strip()) if rng else None
        range_start = int(m.group(1)) if m and m.group(1) else None
        if parts.path.startswith("/__fakehub__/"):
            self._control(parts.path)  # for a server in another process (the benchmark)
            return
        try:
            if hub.latency:
                # Requests whose latency overlaps: how many the client had in flight at once.
                with hub.lock:
                    hub._in_flight += 1
                    hub.max_in_flight = max(hub.max_in_flight, hub._in_flight)
                try:
                    time.sleep(hub.latency)
                finally:
                    with hub.lock:
                        hub._in_flight -= 1
            rule = hub._rule_for(method, self._path, range_start, self.server.role)
            if self.server.role == "hub":
                bucket = "resolvers" if ("/resolve/" in self._path or "/resolve-cache/"
                                         in self._path) else "api"
                allowed, self._rl = hub._take(bucket)
                if not allowed:
                    self._error(429, "", {}, "You have been rate-limited; you can retry this "
                                f"action in about {self._rl['RateLimit'].rsplit('t=', 1)[1]} s")
                    return
            if rule and rule.delay:
                time.sleep(rule.delay)
            if rule and rule.drip_headers:  # headers that never end (the client gives up)
                self._status = 200
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(100_000):
                    self.wfile.flush()
                    time.sleep(rule.drip_headers)
                    self.wfile.write(b"a")
                return
            if rule and rule.status and rule.body is not None:
                self._send(rule.status, rule.body, rule.headers)
            elif rule and rule.status:
                self._error(rule.status, rule.headers.get("X-Error-Code", ""), rule.headers)
            elif self.server.role == "cdn":
                self._cdn(rule)
            elif parts.path.startswith("/api/resolve-cache/models/"):
                self._resolve_cache(self._path[len("/api/resolve-cache/models/"):], rule)
            elif parts.path.startswith("/api/models/"):
                self._model_info(parts.path[len("/api/models/"):], parts.query)
            elif "/resolve/" in parts.path:
                self._resolve(parts.path, rule)
            else:
                self._error(404, "", {})
        finally:
            hub._record(Logged(self.server.role, method, self._path, self._query, rng,
                               self._status, self._sent, self.headers.get("Authorization")))

    def end_headers(self) -> None:
        for k, v in getattr(self, "_rl", {}).items():
            self.send_header(k, v)
        super().end_headers()

    def _control(self, path: str) -> None:
        hub = self.server.hub
        if path.endswith("/clear"):
            hub.clear()
            body: Any = {"ok": True}
        else:
            body = [vars(e) for e in hub.requests()]
        self._send(200, json.dumps(body).encode())

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:] if auth.startswith("Bearer ") else None

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        self._status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self._method != "HEAD" and body:
            self.wfile.write(body)
            self._sent += len(body)

    def _error(self, status: int, code: str, headers: dict[str, str], message: str = "") -> None:
        h = {k: v for k, v in headers.items()}
        if code:
            h["X-Error-Code"] = code
        if message:
            h["X-Error-Message"] = message
        self._send(status, json.dumps({"error": message or code or str(status)}).encode(), h)

    # -- the Hub API
    def _access(self, repo: Repo | None, files: bool) -> bool:
        """False (after answering) when the caller may not see the repo (or its files)."""
        token = self._token()
        known = token in self.server.hub.valid_tokens
        if repo is None or (repo.private and token not in repo.granted):
            self._error(404 if known else 401, "RepoNotFound", {},
                        "Repository not found" if known else "Invalid username or password.")
            return False
        if files and repo.gated and token not in repo.granted:
            if known:
                self._error(403, "GatedRepo", {}, f"Access to model {repo.repo_id} is restricted "
                            "and you are not in the authorized list.")
            else:
                self._error(401, "GatedRepo", {}, f"Access to model {repo.repo_id} is restricted. "
                            "You must have access to it and be authenticated to access it.")
            return False
        return True

    def _commit(self, repo: Repo, rev: str) -> str | None:
        if rev in repo.commits:
            return rev
        return repo.refs.get(rev)

    def _model_info(self, rest: str, query: str) -> None:
        if "/revision/" in rest:
            rid, rev = rest.split("/revision/", 1)
            rev = unquote(rev)
        else:
            rid, rev = rest, "main"
        repo = self.server.hub.repos.get(unquote(rid).strip("/"))
        if not self._access(repo, files=False):
            return
        assert repo is not None
        sha = self._commit(repo, rev)
        if sha is None:
            self._error(404, "RevisionNotFound", {}, f"Invalid rev id: {rev}")
            return
        folder = repo.commits[sha]
        blobs = parse_qs(query).get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for p in sorted(folder.rglob("*")):
            if not p.is_file():
                continue
            s: dict[str, Any] = {"rfilename": p.relative_to(folder).as_posix()}
            if blobs:
                size = p.stat().st_size
                s["size"] = size
                s["blobId"] = hashlib.sha1(s["rfilename"].encode() + sha.encode()).hexdigest()
                if p.suffix == ".safetensors":
                    s["lfs"] = {"size": size, "sha256": hashlib.sha256(s["blobId"].encode())
                                .hexdigest(), "pointerSize": 135}
            siblings.append(s)
        info = {"_id": sha[:24], "id": repo.repo_id, "modelId": repo.repo_id,
                "private": repo.private, "gated": "manual" if repo.gated else False, "disabled": False, "sha": sha,
                "tags": [], "siblings": siblings}
        self._send(200, json.dumps(info).encode())

    def _resolve(self, path: str, rule: Rule | None) -> None:
        head, tail = path.lstrip("/").split("/resolve/", 1)
        repo = self.server.hub.repos.get(unquote(head))
        if not self._access(repo, files=True):
            return
        assert repo is not None
        rev, _, fname = tail.partition("/")
        sha = self._commit(repo, unquote(rev))
        if sha is None:
            self._error(404, "RevisionNotFound", {}, f"Invalid rev id: {unquote(rev)}")
            return
        fname = unquote(fname)
        file = repo.commits[sha] / fname
        if not fname or ".." in Path(fname).parts or not file.is_file():
            self._error(404, "EntryNotFound", {"X-Repo-Commit": sha}, f"{fname} does not exist")
            return
        size = file.stat().st_size
        etag = hashlib.sha256(f"{sha}/{fname}".encode()).hexdigest()
        meta = {"X-Repo-Commit": sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        hub = self.server.hub
        if hub.redirect_lfs and fname.endswith(".safetensors"):
            path = f"/cdn/{quote(repo.repo_id)}/{sha}/{quote(fname)}"
            expires, uid = int(time.time() + hub.url_ttl), f"u{next(hub._uids)}"
            loc = (f"{hub.cdn_url}{path}?X-Xet-Cas-Uid={uid}&Expires={expires}"
                   f"&Signature={hub._sign(unquote(path), expires, uid)}")
            self._send(302, b"", {**meta, "Location": loc, "X-Linked-Size": str(size),
                                  "X-Linked-ETag": f'"{etag}"'})
            return
        if hub.json_redirect:  # relative, same origin: the token may follow it
            loc = (f"/api/resolve-cache/models/{quote(repo.repo_id)}/{sha}/{quote(fname)}"
                   f"?%2F{quote(fname)}=&etag=%22{etag}%22")
            self._send(307, b"", {**meta, "Location": loc})
            return
        self._file(file, meta, rule)

    def _resolve_cache(self, rest: str, rule: Rule | None) -> None:
        m = re.match(r"(.+)/([0-9a-f]{40})/(.+)$", rest)
        repo = self.server.hub.repos.get(m.group(1)) if m else None
        if not self._access(repo, files=True):
            return
        assert repo is not None and m is not None
        file = repo.commits.get(m.group(2), Path("/nonexistent")) / m.group(3)
        if ".." in Path(m.group(3)).parts or not file.is_file():
            self._error(404, "EntryNotFound", {}, f"{m.group(3)} does not exist")
            return
        self._file(file, {"X-Repo-Commit": m.group(2)}, rule)

    def _cdn(self, rule: Rule | None) -> None:
        m = re.match(r"/cdn/(.+)/([0-9a-f]{40})/(.+)$", self._path)
        repo = self.server.hub.repos.get(m.group(1)) if m else None
        if m is None or repo is None or m.group(2) not in repo.commits:
            self._error(404, "", {})
            return
        file = repo.commits[m.group(2)] / m.group(3)
        if ".." in Path(m.group(3)).parts or not file.is_file():
            self._error(404, "", {})
            return
        hub = self.server.hub
        q = {k: v[0] for k, v in parse_qs(self._query).items()}
        uid, expires = q.get("X-Xet-Cas-Uid", ""), q.get("Expires", "")
        if not expires.isdigit() or not hmac.compare_digest(
                q.get("Signature", ""), hub._sign(self._path, int(expires), uid)):
            self._send(403, b"Auth failed: bad signature", content_type="text/plain")
            return
        if int(expires) < time.time():
            self._send(403, b"Auth failed: expired", content_type="text/plain")
            return
        if hub.range_bound and not hub._bind(uid, self.headers.get("Range")):
            if hub.range_bound == "hang":  # reported too: the request never comes back
                time.sleep(30)
                self.close_connection = True
                return
            self._send(403, b"Auth failed: invalid range", content_type="text/plain")
            return
        self._file(file, {"Accept-Ranges": "bytes"}, rule)

    def _file(self, file: Path, meta: dict[str, str], rule: Rule | None) -> None:
        size = file.stat().st_size
        rng = _parse_range(self.headers.get("Range"), size) if self.server.hub.honor_range else None
        if rng == "bad":
            self._send(416, b"", {**meta, "Content-Range": f"bytes */{size}"})
            return
        start, end = (0, size - 1) if rng is None else rng  # type: ignore[misc]
        length = max(0, end - start + 1)
        self._status = 200 if rng is None else 206
        self.send_response(self._status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        if rng is not None:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        for k, v in meta.items():
            self.send_header(k, v)
        self.end_headers()
        if self._method == "HEAD":
            return
        limit = length // 2 if rule and (rule.drop or rule.hold) else length
        step = 1 if rule and rule.drip else CHUNK
        with open(file, "rb") as f:
            f.seek(start)
            left = limit
            while left > 0:
                if rule and rule.drip:
                    self.wfile.flush()
                    time.sleep(rule.drip)
                chunk = f.read(min(step, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                self._sent += len(chunk)
                left -= len(chunk)
        if rule and rule.hold:
            self.wfile.flush()
            time.sleep(rule.hold)
        if rule and (rule.drop or rule.hold):
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main() -> None:
    """Serve models from another process (the benchmark does, so that the server's Python does
    not compete with the client's for one interpreter lock):

        python tests/hub_server.py --latency 0.05 --model org/name=/path/to/folder [...]

    Prints one JSON line {"url", "cdn_url", "commits": {repo: sha}}, then serves until stdin
    closes. GET /__fakehub__/log returns the request log, /__fakehub__/clear empties it.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--model", action="append", default=[], metavar="REPO=FOLDER")
    ap.add_argument("--today", action="store_true",
                    help="answer as today's Hub: 307 for small files, range-bound CDN links")
    args = ap.parse_args()
    hub = FakeHub(latency=args.latency, json_redirect=args.today,
                  range_bound=args.today).start()
    commits = {}
    for spec in args.model:
        repo, folder = spec.split("=", 1)
        commits[repo] = hub.add_model(repo, Path(folder))
    print(json.dumps({"url": hub.url, "cdn_url": hub.cdn_url, "commits": commits}), flush=True)
    sys.stdin.read()
    hub.stop()


if __name__ == "__main__":
    main()
