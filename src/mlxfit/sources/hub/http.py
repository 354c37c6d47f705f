"""HTTP for reading the Hub: GETs through huggingface_hub's shared session
(``huggingface_hub.utils.get_session()``, so HF_ENDPOINT, proxies and offline mode behave as in
huggingface_hub), bounded retries with backoff for 408/429/5xx, timeouts and cut connections,
Range reads streamed only as far as needed, the token sent to the endpoint's own origin only,
request and byte accounting, and every failure mapped to a one-line MlxfitError
(``HubUnreachable`` when the Hub could not be asked at all). The retry, backoff and timeout
settings are passed in by ``mlxfit.sources.hub.fetch`` from ``mlxfit.settings.HubSettings``.
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from mlxfit.errors import Cancelled, HubUnreachable, MlxfitError, SourceError, WeightsError
from mlxfit.settings import MAX_FILE_BYTES, check_hub_environment
from mlxfit.sources.redact import redact_text, redact_url

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# The longest wait a server may ask for (429/503 with RateLimit r=0;t=N or Retry-After) that is
# honoured: the Hub's rate-limit windows are fixed 5-minute windows (hub-docs rate-limits.md,
# `RateLimit-Policy: ...;w=300`). A longer ask, or one past the fetch deadline, fails at once.
RATE_LIMIT_MAX_WAIT = 300.0
_LOGIN = "log in with `hf auth login` or set HF_TOKEN"
_OFFLINE_HINT = "HF_HUB_OFFLINE=1 works for models already cached"


@dataclass
class _Body:
    data: bytes
    url: str  # after redirects
    total: int | None  # file size from Content-Range, when the server said


def _origin(url: str) -> tuple[str, str]:
    p = urlsplit(url)
    return p.scheme, p.netloc


class Http:
    """GETs through huggingface_hub's shared session: bounded retries with backoff, streamed
    bodies read only as far as needed, every failure turned into a one-line MlxfitError."""

    def __init__(self, repo_id: str, revision: str | None, ep: str, token: str | bool | None,
                 timeout: float, *, retries: int, backoff: float, max_wait: float,
                 max_body: int, implicit_token: bool = True,
                 request_deadline: float = 60.0, fetch_deadline: float = 300.0):
        # A malformed timeout or proxy variable was a huggingface_hub / httpx traceback.
        check_hub_environment()
        # huggingface_hub is heavy: imported only when the Hub is read
        from huggingface_hub.utils import get_session

        # ``base`` is what requests go to; ``endpoint`` is what messages and files show: the
        # same URL without any user:password HF_ENDPOINT carries.
        self.repo_id, self.revision, self.base = repo_id, revision, ep
        self.endpoint = redact_url(ep)
        self.request_deadline = request_deadline  # seconds per request, retries included
        self.fetch_deadline = fetch_deadline  # seconds for everything this Http asks
        self.started = time.monotonic()
        self.deadline = self.started + fetch_deadline
        self.client = get_session()
        if not hasattr(self.client, "stream"):  # huggingface_hub < 1.0 hands out requests
            from huggingface_hub import __version__

            raise SourceError(f"reading the Hub needs huggingface_hub >= 1.0 (found {__version__}):"
                              " pip install -U huggingface_hub")
        self.x = __import__(type(self.client).__module__.split(".")[0])  # httpx2 (or httpx)
        # Not build_hf_headers(): in huggingface_hub 2.x its user-agent step may itself fetch
        # {endpoint}/api/agent-harnesses, a request we would neither want nor account for.
        self.token = _token_to_send(token, implicit_token)
        self.anon_headers = {"user-agent": _user_agent()}
        self.auth_headers = dict(self.anon_headers)
        if self.token:
            self.auth_headers["authorization"] = f"Bearer {self.token}"
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff  # first wait; doubles up to max_wait
        self.max_wait = max_wait  # caps our own backoff (a server's ask: RATE_LIMIT_MAX_WAIT)
        self.max_body = max_body  # get()'s limit when none is given
        self.lock = threading.Lock()
        self.requests = 0
        self.bytes = 0
        self.unasked = 0  # bytes a server sent past the range asked (dropped unread)
        self.discarded = 0  # bytes asked for past a shard's header (the first read's tail)
        self.cancelled = threading.Event()  # set when one request of the fetch has failed

    # -- accounting
    def _count(self, requests: int, nbytes: int, unasked: int = 0) -> None:
        with self.lock:
            self.requests += requests
            self.bytes += nbytes
            self.unasked += unasked

    def discard(self, nbytes: int) -> None:
        with self.lock:
            self.discarded += nbytes

    def _headers_for(self, url: str) -> dict[str, str]:
        # The token goes to the endpoint's origin only, never to a CDN URL we were sent to.
        return self.auth_headers if _origin(url) == _origin(self.base) else self.anon_headers

    # -- the one request loop
    def get(self, url: str, what: str, *, params: dict | None = None, start: int = 0,
            length: int | None = None, limit: int | None = None) -> _Body:
        """Body of ``url`` (bytes start..start+length-1 when length is given, else at most
        ``limit`` bytes, default ``max_body``). 416 gives an empty body with the file size."""
        if limit is None:
            limit = self.max_body
        headers = dict(self._headers_for(url))
        if length is not None:
            headers["range"] = f"bytes={start}-{start + length - 1}"
        attempts = 1 + max(0, self.retries)
        wait = self.backoff
        x = self.x
        t0 = time.monotonic()
        deadline = min(t0 + self.request_deadline, self.deadline)
        for attempt in range(1, attempts + 1):
            last = attempt == attempts
            if self.cancelled.is_set():
                raise Cancelled("cancelled")
            if time.monotonic() >= deadline:
                raise self._deadline_error(what, t0, attempt - 1)
            answered = False
            try:
                with self.client.stream("GET", url, headers=headers, params=params,
                                        timeout=self.timeout, follow_redirects=True) as r:
                    hops = 1 + len(r.history)
                    self._count(0, sum(h.num_bytes_downloaded for h in r.history))
                    status = r.status_code
                    answered = True
                    if status in _RETRY_STATUS and not last:
                        self._count(hops, 0)
                        asked = server_wait(r.headers)
                        if asked is None:
                            self._pause(wait, deadline)
                            wait = min(self.max_wait, wait * 2)
                            continue
                        if asked > RATE_LIMIT_MAX_WAIT or \
                                time.monotonic() + asked > self.deadline:
                            raise self._wait_error(r, what, asked)
                        # The server said when to come back: that time is not it being slow,
                        # so it extends this request's deadline (never the fetch's).
                        deadline = min(self.deadline, deadline + asked)
                        self._pause(asked, deadline)
                        continue
                    if status == 416 and length is not None:
                        self._count(hops, r.num_bytes_downloaded)
                        return _Body(b"", str(r.url), _content_range(r, self._what(what))[1])
                    if status >= 300:
                        self._count(hops, 0)
                        raise self._status_error(r, what, attempt)
                    body = self._read(r, what, start, length, limit, status, t0, deadline)
                    asked = len(body.data) + (start if status == 200 else 0)
                    got = r.num_bytes_downloaded
                    self._count(hops, got, max(0, got - asked) if length is not None else 0)
                    return body
            except MlxfitError:
                raise
            except x.ConnectError as e:
                # Refused, DNS, TLS: retrying in a second will not help; say so now.
                raise HubUnreachable(
                    f"cannot reach the Hub at {self.endpoint} to read {self._what(what)} "
                    f"({short_reason(e)}); check the connection and HF_ENDPOINT; {_OFFLINE_HINT}"
                ) from None
            except (x.TimeoutException, x.RemoteProtocolError, x.ReadError, x.CloseError) as e:
                self._count(1, 0)
                if last:
                    raise self._transport_error(e, what, attempts, answered, t0) from None
                self._pause(wait, deadline)
                wait = min(self.max_wait, wait * 2)
            except x.TooManyRedirects:
                raise SourceError(f"the Hub at {self.endpoint} redirected {self._what(what)} "
                                  "in a loop") from None
            except (x.HTTPError, x.StreamError, x.InvalidURL) as e:
                raise SourceError(f"cannot read {self._what(what)} from the Hub at "
                                  f"{self.endpoint}: {short_reason(e)}") from None
            except Exception as e:
                # huggingface_hub is heavy: imported only when the Hub is read
                from huggingface_hub.errors import OfflineModeIsEnabled

                if isinstance(e, OfflineModeIsEnabled):
                    raise SourceError(
                        f"{self.repo_id}: huggingface_hub is in offline mode (HF_HUB_OFFLINE was "
                        "set when it was imported), so the Hub was not asked") from None
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _pause(self, seconds: float, deadline: float) -> None:
        """Wait before a retry: cut short by a cancellation, never past the deadline."""
        self.cancelled.wait(max(0.0, min(seconds, deadline - time.monotonic())))

    def _read(self, r: Any, what: str, start: int, length: int | None, limit: int,
              status: int, t0: float, deadline: float) -> _Body:
        got_start, total = _content_range(r, self._what(what))
        if total is not None and total > MAX_FILE_BYTES:
            raise WeightsError(f"{self._what(what)}: the Hub says the file is {total:,} bytes, "
                               "past any real file (2^53)")
        skip = 0
        if length is not None:
            if status == 206:
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
            # A server dripping a byte every few seconds never trips the read timeout: the
            # deadline and a cancellation (another request failed, Ctrl-C) are checked here.
            if self.cancelled.is_set():
                raise Cancelled("cancelled")
            if time.monotonic() >= deadline:
                raise self._deadline_error(what, t0, None)
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
                f"{attempts} time{'s' * (attempts != 1)}; {self._limits_hint(code)}"
                f"try again later ({_OFFLINE_HINT})")
        if 300 <= code < 400:
            return SourceError(f"the Hub at {ep} redirected {self._what(what)} ({code}) "
                               "without a usable location")
        return SourceError(f"the Hub at {ep} answered {code} {_reason(r)} for {self._what(what)}")

    def _wait_error(self, r: Any, what: str, asked: float) -> MlxfitError:
        left = self.deadline - time.monotonic()
        if asked > RATE_LIMIT_MAX_WAIT:
            why = f"more than the {RATE_LIMIT_MAX_WAIT:g} s mlxfit waits"
        else:
            why = (f"past the fetch deadline ({left:.0f} s left of "
                   f"{self.fetch_deadline:g} s, MLXFIT_HUB_FETCH_DEADLINE_SECONDS)")
        asked_s = f"{asked:,.0f} s" if asked < 1e15 else "forever"
        return HubUnreachable(
            f"the Hub at {self.endpoint} answered {r.status_code} {_reason(r)} for "
            f"{self._what(what)} and asked to wait {asked_s} before trying again, {why}; "
            f"{self._limits_hint(r.status_code)}try again later ({_OFFLINE_HINT})")

    def _limits_hint(self, code: int) -> str:
        return ("a token raises the Hub's rate limits (`hf auth login` or HF_TOKEN); "
                if code == 429 and not self.token else "")

    def _deadline_error(self, what: str, t0: float, attempts: int | None) -> MlxfitError:
        now = time.monotonic()
        if now >= self.deadline:
            limit, which = self.fetch_deadline, "MLXFIT_HUB_FETCH_DEADLINE_SECONDS"
        else:
            limit, which = self.request_deadline, "MLXFIT_HUB_REQUEST_DEADLINE_SECONDS"
        tries = f", {attempts} attempt{'s' * (attempts != 1)}" if attempts else ""
        return HubUnreachable(
            f"the Hub at {self.endpoint} was too slow with {self._what(what)}: not done after "
            f"{now - t0:.0f} s{tries} (limit {limit:g} s, {which}); {_OFFLINE_HINT}")

    def _transport_error(self, e: Exception, what: str, attempts: int, answered: bool = False,
                         t0: float | None = None) -> MlxfitError:
        x = self.x
        spent = f", {time.monotonic() - t0:.0f} s in all" if t0 is not None else ""
        if isinstance(e, x.TimeoutException):
            if answered:  # the status line came, then the body stalled (a 206 held open)
                return HubUnreachable(
                    f"the Hub at {self.endpoint} answered for {self._what(what)} but then sent "
                    f"nothing for {self.timeout:g} s ({attempts} attempts{spent}; "
                    f"HF_HUB_DOWNLOAD_TIMEOUT sets the limit); {_OFFLINE_HINT}")
            return HubUnreachable(
                f"the Hub at {self.endpoint} did not answer within {self.timeout:g} s for "
                f"{self._what(what)} ({attempts} attempts{spent}; HF_HUB_DOWNLOAD_TIMEOUT sets "
                f"the limit); {_OFFLINE_HINT}")
        return HubUnreachable(
            f"connection cut while reading {self._what(what)} from {self.endpoint} "
            f"({attempts} attempts: {short_reason(e)}); try again; {_OFFLINE_HINT}")


def _token_to_send(token: str | bool | None, implicit: bool = True) -> str | None:
    """As huggingface_hub decides: an explicit string; False for none; otherwise HF_TOKEN or the
    stored login (``hf auth login``), unless ``implicit`` is False (HF_HUB_DISABLE_IMPLICIT_TOKEN
    set: ``HubSettings.implicit_token``)."""
    if isinstance(token, str):
        return token or None
    if token is False:
        return None
    if token is None and not implicit:
        return None
    # huggingface_hub is heavy: imported only when the Hub is read
    from huggingface_hub import constants
    from huggingface_hub.utils import get_token

    if not any(os.environ.get(v) for v in ("HF_OIDC_RESOURCE", "HF_TOKEN",
                                             "HUGGING_FACE_HUB_TOKEN")):
        # get_token() would read the stored token with read_text(): a FIFO there never ends
        path = constants.HF_TOKEN_PATH
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise SourceError(f"the Hugging Face token file {path} (HF_TOKEN_PATH) is not a "
                              f"regular file: {_LOGIN}")
    try:
        found = get_token()
    except Exception as e:  # noqa: BLE001 - OIDCError, its exchange's HTTP errors, a bad file
        how = ("HF_OIDC_RESOURCE is set" if os.environ.get("HF_OIDC_RESOURCE") else
               f"reading {constants.HF_TOKEN_PATH}")
        raise SourceError(redact_text(
            f"cannot get the Hugging Face token ({how}): {short_reason(e)}"[:500])) from None
    if token is True and not found:
        raise SourceError(f"no Hugging Face token found: {_LOGIN}")
    return found


def _user_agent() -> str:
    # user-agent facts, looked up only when the Hub is read (start-up)
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours, theirs = version("mlxfit"), version("huggingface_hub")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        ours, theirs = "unknown", "unknown"
    return f"mlxfit/{ours}; hf_hub/{theirs}; python/{platform.python_version()}"


def require_hf_http() -> None:
    """Import huggingface_hub's HTTP layer, or say in one line why it cannot be (it parses
    environment variables at import: HF_HUB_DOWNLOAD_TIMEOUT=0.5 makes it raise)."""
    check_hub_environment()
    try:
        import huggingface_hub.utils._http  # noqa: F401
    except (ImportError, ValueError, TypeError) as e:
        raise SourceError(
            f"cannot use huggingface_hub to read the Hub: {short_reason(e)}") from None


def short_reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


_DIGITS = re.compile(r"[0-9]{1,15}")  # ASCII only: "²".isdigit() is True, float("²") fails
_RL_REMAINING = re.compile(r";\s*r\s*=\s*([0-9]{1,15})\s*(?:;|$)")
_RL_RESET = re.compile(r";\s*t\s*=\s*([0-9]{1,15})\s*(?:;|$)")


def server_wait(headers: Any) -> float | None:
    """Seconds a 429/5xx answer asks to wait, None when it does not say (or says nothing
    readable): the Hub's ``RateLimit: "<bucket>";r=0;t=<seconds>`` (IETF draft; what the Hub
    sends, without Retry-After; huggingface_hub waits t + 1), else ``Retry-After`` as seconds
    or an HTTP date. A value too long to be a number of seconds reads as forever."""
    waits = []
    for item in headers.get("ratelimit", "").split(","):
        rem, reset = _RL_REMAINING.search(item + ";"), _RL_RESET.search(item + ";")
        if rem and reset and int(rem.group(1)) == 0:
            waits.append(int(reset.group(1)) + 1.0)
    if waits:
        return max(waits)
    value = headers.get("retry-after", "").strip()
    if not value:
        return None
    if _DIGITS.fullmatch(value):
        return float(value)
    if value.isascii() and value.isdigit():
        return float("inf")  # thousands of digits: no number of seconds anyone would wait
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _reason(r: Any) -> str:
    return getattr(r, "reason_phrase", "") or ""


# Every number at most 16 digits (2^53, the largest file size, has 16): a longer one is refused
# before int() sees it (a 5,000-digit one would raise past Python's 4,300-digit limit).
_CONTENT_RANGE = re.compile(r"bytes[ \t]+(?:([0-9]{1,16})-([0-9]{1,16})|\*)/([0-9]{1,16}|\*)")


def _content_range(r: Any, label: str) -> tuple[int | None, int | None]:
    """(start, total) of the answer's Content-Range, (None, None) without one; WeightsError
    naming ``label`` for one that is not a byte range of a plausible file."""
    value = r.headers.get("content-range", "").strip()
    if not value:
        return None, None
    m = _CONTENT_RANGE.fullmatch(value)
    if not m:
        shown = repr(value[:40]) + (f" ... ({len(value):,} characters)" if len(value) > 40
                                    else "")
        raise WeightsError(f"{label}: the server sent an unreadable Content-Range {shown}")
    start = int(m.group(1)) if m.group(1) else None
    total = int(m.group(3)) if m.group(3) != "*" else None
    return start, total

