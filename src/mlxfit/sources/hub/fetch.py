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
   - for each ``model*.safetensors`` (the files mlx-lm globs): ``Range: bytes=0-99999`` (the
     header length N and, for ~97 % of shards, the whole header: huggingface_hub's rule), and
     only when the header is longer, the rest from the resolve URL again (a fresh redirect: a
     signed CDN link may answer only the range it was first used with). One round trip plus
     one redirect for most shards. The token is only ever sent to the endpoint's own origin.

Bytes transferred are the model-info JSON, the small JSON files and the first 100 KB of each
shard (of which only 8 + N are kept), counted from the responses (``HubTransfer``). What was read is validated by the very code that reads a
local folder (``sources.folder._load_folder`` over a throw-away folder of header-only stubs), then kept
in a metadata cache keyed by endpoint, repo and commit, so the next run needs no network and
works under HF_HUB_OFFLINE=1.

The code is split by concern: ``http`` (requests, retries, range reads, one-line errors),
``plan`` (the model info, the plan, the parallel reads), ``cache`` (the metadata cache on disk)
and ``snapshot`` (a snapshot to a validated ModelSource). This module holds the entry points;
the endpoint, offline mode, timeout and tunables come from ``mlxfit.settings.HubSettings``
(read from the environment at call time: huggingface_hub freezes HF_ENDPOINT and HF_HUB_OFFLINE
at its import).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from mlxfit.errors import HubUnreachable, MlxfitError, SourceError
from mlxfit.settings import Settings, from_environ
from mlxfit.sources.hub.cache import (
    Snapshot,
    cached_commit,
    entry_file,
    hub_cache_dir,
    read_entry,
    repo_cache_dir,
    write_entry,
    write_ref,
)
from mlxfit.sources.hub.http import Http, require_hf_http
from mlxfit.sources.hub.plan import fetch_snapshot, model_info_within_deadline
from mlxfit.sources.hub.snapshot import to_source
from mlxfit.sources.redact import redact_text
from mlxfit.sources.revision import check_revision
from mlxfit.sources.source import HubTransfer

if TYPE_CHECKING:
    from mlxfit.sources.source import ModelSource


def is_repo_id(spec: str) -> bool:
    """Could the Hub have a model called ``spec``? (huggingface_hub's own validator.)"""
    require_hf_http()
    # huggingface_hub is heavy: imported only when a repo id is checked
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(spec)
    except HFValidationError:
        return False
    return True


class _Progress:
    """A Rich spinner, then shards done / total, on stderr; transient (gone when done)."""

    def __init__(self, enabled: bool, repo_id: str):
        self.p: Any = None
        self.spin: Any = None
        if not enabled:
            return
        # rich is heavy: only a terminal shows the progress display
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
    """The message without the token, nor any user:password a URL in it carries."""
    msg = redact_text(str(e))
    if token and token in msg:
        msg = msg.replace(token, "***")
    return e if msg == str(e) else type(e)(msg)


# --- the entry points -------------------------------------------------------------------------


def load_cached(repo_id: str, revision: str | None = None, *,
                cache_dir: str | os.PathLike[str] | None = None,
                ref_ttl: float | None = None,
                settings: Settings | None = None) -> ModelSource | None:
    """The model from mlxfit's Hub metadata cache, never the network; None when not cached
    (or, with ``ref_ttl``, when the branch/tag mapping is older than that many seconds)."""
    check_revision(revision)
    s = settings or from_environ()
    repo_dir = repo_cache_dir(hub_cache_dir(cache_dir, settings=s), s.hub.endpoint, repo_id)
    commit, age = cached_commit(repo_dir, revision)
    if commit is None or (ref_ttl is not None and age > ref_ttl):
        return None
    try:
        snap = read_entry(entry_file(repo_dir, commit), repo_id, commit, s.hub.endpoint,
                           s.hub.max_cache_entry_bytes)
    except ValueError as e:
        raise SourceError(f"mlxfit's Hub metadata cache for {repo_id}: {e}; delete it and "
                          "run again online") from None
    if snap is None:
        return None
    return to_source(snap, HubTransfer(0, 0, True, snap.commit, snap.fetched_at))


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
    settings: Settings | None = None,
) -> ModelSource:
    """``repo_id`` at ``revision`` (default main) as a ModelSource of kind "hub".

    From mlxfit's metadata cache when it holds that commit (a branch or tag is re-checked with
    one request once its cached commit is older than ``ref_ttl``, default a day; offline, never),
    else from the Hub: headers and small JSON only, in parallel, then cached. ``progress`` shows a
    transient Rich progress on stderr. ``source.transfer`` says what it cost. Raises one-line
    SourceError / WeightsError / ConfigError, never with the token in it. ``settings``
    (default: from the environment now) gives the endpoint, offline mode and the tunables; the
    keyword arguments override them.
    """
    check_revision(revision)
    hub = (settings or from_environ()).hub
    root = hub_cache_dir(cache_dir, settings=settings)
    ep = hub.endpoint
    offline = hub.offline if offline is None else offline
    ttl = hub.ref_ttl_seconds if ref_ttl is None else ref_ttl
    repo_dir = repo_cache_dir(root, ep, repo_id)
    commit, age = cached_commit(repo_dir, revision)
    cached: Snapshot | None = None
    corrupt: str | None = None
    if commit is not None:
        try:
            cached = read_entry(entry_file(repo_dir, commit), repo_id, commit, ep,
                                 hub.max_cache_entry_bytes)
        except ValueError as e:
            corrupt = str(e)
    if cached is not None and (offline or age <= ttl):
        return to_source(cached, HubTransfer(0, 0, True, cached.commit, cached.fetched_at))
    if offline:
        why = f"its cached metadata is unusable ({corrupt})" if corrupt else "it is not cached"
        raise SourceError(f"{repo_id}: HF_HUB_OFFLINE=1 is set, so the Hub was not asked, and "
                          f"{why} in mlxfit's Hub metadata cache at {root}")

    require_hf_http()
    http = None
    bar = _Progress(progress, repo_id)
    try:
        http = Http(repo_id, revision, ep, token,
                     timeout if timeout is not None else hub.timeout,
                     retries=hub.retries, backoff=hub.backoff_seconds,
                     max_wait=hub.max_wait_seconds, max_body=hub.max_json_bytes,
                     implicit_token=hub.implicit_token,
                     request_deadline=hub.request_deadline_seconds,
                     fetch_deadline=hub.fetch_deadline_seconds)
        try:
            info = model_info_within_deadline(http, revision, hub.max_info_bytes)
        except HubUnreachable as e:
            if cached is None:
                raise
            note = (f"could not check the Hub for a newer commit ({e}); using metadata "
                    f"cached {cached.fetched_at}")
            return to_source(cached, HubTransfer(http.requests, http.bytes, True, cached.commit,
                                                  cached.fetched_at), (note,))
        commit = info["sha"]
        if cached is None or cached.commit != commit:
            try:
                cached = read_entry(entry_file(repo_dir, commit), repo_id, commit, ep,
                                     hub.max_cache_entry_bytes)
            except ValueError:
                cached = None  # corrupt: fetch it again and overwrite
        if cached is not None:
            write_ref(repo_dir, revision, commit)
            return to_source(cached, HubTransfer(http.requests, http.bytes, True, commit,
                                                  cached.fetched_at))
        snap = fetch_snapshot(http, info, bar.shards(), max_workers or hub.max_workers,
                              hub.max_json_bytes, hub.max_shards)
        bar.stop()
        header_bytes = sum(len(raw) for _, _, raw in snap.shards)
        transfer = HubTransfer(http.requests, http.bytes, False, commit, snap.fetched_at,
                               header_bytes, len(snap.shards), http.unasked, http.discarded)
        src = to_source(snap, transfer)  # validates: an invalid model is never cached
        notes: tuple[str, ...] = ()
        entry = snap.to_json()
        try:
            if len(entry) > hub.max_cache_entry_bytes:  # it could never be read back
                raise OSError(f"the entry would be {len(entry):,} bytes, over the "
                              f"{hub.max_cache_entry_bytes:,}-byte cap")
            # read back with the reader's own checks first: never written, then called corrupt
            write_entry(entry_file(repo_dir, commit), entry, repo_id, commit, ep,
                        hub.max_cache_entry_bytes)
            write_ref(repo_dir, revision, commit)
        except OSError as e:
            why = e.strerror or str(e)
            notes = (f"could not write mlxfit's Hub metadata cache at {repo_dir}: {why}",)
        return dataclasses.replace(src, notes=src.notes + notes)
    except MlxfitError as e:
        raise _scrub(e, http.token if http else None) from None
    finally:
        bar.stop()
