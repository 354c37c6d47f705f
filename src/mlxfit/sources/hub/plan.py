"""What to read from the Hub for one model, and reading it: the model info (one request: the
commit sha and every file with its size), the plan (the ``model*.safetensors`` shards mlx-lm
would load, or a one-line error before any file is fetched), then config.json, the shard index,
kv_config.json and each shard's safetensors header fetched in parallel on a thread pool, pinned
to that commit. A shard costs two Range requests (8 bytes for the header length N, then the N
header bytes, sent straight to the CDN URL the first was redirected to); never tensor data. The
first failure cancels the rest. Returns a ``_Snapshot``; caching and validation are the
caller's.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
from datetime import datetime, timezone
from fnmatch import fnmatch
from typing import Any
from urllib.parse import quote

from mlxfit.errors import (
    Cancelled,
    ConfigError,
    HubUnreachable,
    MlxfitError,
    SourceError,
    WeightsError,
)
from mlxfit.sources.hub.cache import (
    _HEX40,
    CONFIG_NAME,
    KV_CONFIG_NAME,
    _label,
    _Snapshot,
)
from mlxfit.sources.hub.http import _Http
from mlxfit.sources.safetensors_header import MAX_HEADER_BYTES
from mlxfit.sources.source import INDEX_NAME

SHARD_GLOB = "model*.safetensors"  # what mlx-lm loads (mlx_lm.utils.load_model globs it)


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _resolve_url(ep: str, repo_id: str, commit: str, name: str) -> str:
    # huggingface_hub is heavy: imported only when the Hub is read
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, name, revision=commit, endpoint=ep)


def _model_info(http: _Http, revision: str | None, max_info_bytes: int) -> dict[str, Any]:
    ep, repo = http.endpoint, http.repo_id
    url = f"{ep}/api/models/{repo}" + (
        "" if revision is None else f"/revision/{quote(revision, safe='')}")
    body = http.get(url, "model info", params={"blobs": True}, limit=max_info_bytes)
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
        if target == url or isinstance(e, (HubUnreachable, Cancelled)):
            raise
        rest = http.get(url, name, start=8, length=n)  # the signed URL may have expired
    if len(rest.data) != n:
        raise WeightsError(f"{http.repo_id}/{name}: the Hub sent {len(rest.data)} of the {n} "
                           "header bytes asked for (the file is shorter than it says)")
    return size, raw + rest.data, n


def _fetch(http: _Http, info: dict[str, Any], progress: Any, max_workers: int,
           max_json_bytes: int) -> _Snapshot:
    repo_id, ep = http.repo_id, http.endpoint
    commit = info["sha"]
    siblings = _siblings(info)
    sizes = dict(siblings)
    shards = _plan(repo_id, commit, siblings)
    jsons = [n for n in (CONFIG_NAME, INDEX_NAME, KV_CONFIG_NAME) if n in sizes]
    for n in jsons:
        if (sizes[n] or 0) > max_json_bytes:
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
