"""What to read from the Hub for one model, and reading it: the model info (one request: the
commit sha and every file with its size), the plan (the ``model*.safetensors`` shards mlx-lm
would load, or a one-line error before any file is fetched), then config.json, the shard index,
kv_config.json and each shard's safetensors header fetched in parallel on a thread pool, pinned
to that commit. A shard costs one Range request of its first 100 KB (the header length N and,
for nearly every shard, the whole header; a second request to the resolve URL when not), and
only the header is kept. The first failure cancels the rest. Returns a ``Snapshot``; caching and validation are the
caller's.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from fnmatch import fnmatch
from typing import Any
from urllib.parse import quote

from mlxfit.errors import (
    ConfigError,
    HubUnreachable,
    MlxfitError,
    SourceError,
    WeightsError,
)
from mlxfit.settings import MAX_FILE_BYTES
from mlxfit.sources.folder import missing_numbered_shards
from mlxfit.sources.hub.cache import (
    CONFIG_NAME,
    HEX40,
    KV_CONFIG_NAME,
    MAX_PATH_DEPTH,
    Snapshot,
    is_shard_name,
    path_too_deep,
    snapshot_label,
)
from mlxfit.sources.hub.http import Http
from mlxfit.sources.hub.parallel import run_parallel
from mlxfit.sources.safetensors_header import MAX_HEADER_BYTES
from mlxfit.sources.source import INDEX_NAME

SHARD_GLOB = "model*.safetensors"  # what mlx-lm loads (mlx_lm.utils.load_model globs it)


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _resolve_url(ep: str, repo_id: str, commit: str, name: str) -> str:
    # huggingface_hub is heavy: imported only when the Hub is read
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo_id, name, revision=commit, endpoint=ep)


def _model_info(http: Http, revision: str | None, max_info_bytes: int) -> dict[str, Any]:
    ep, repo = http.endpoint, http.repo_id
    url = f"{http.base}/api/models/{repo}" + (
        "" if revision is None else f"/revision/{quote(revision, safe='')}")
    body = http.get(url, "model info", params={"blobs": True}, limit=max_info_bytes)
    try:
        info = json.loads(body.data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deeply
        info = None
    sha = info.get("sha") if isinstance(info, dict) else None
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(sha, str) or not HEX40.fullmatch(sha) or not isinstance(siblings, list):
        raise SourceError(f"the Hub at {ep} sent an unreadable model info for {repo} "
                          "(no commit sha or file list)")
    return info


def model_info_within_deadline(http: Http, revision: str | None,
                               max_info_bytes: int) -> dict[str, Any]:
    """``_model_info`` on a daemon thread, waited for no longer than the fetch deadline: a
    server that drips even its response headers cannot hold the main thread (the body's
    drip is caught chunk by chunk in ``Http._read``), and Ctrl-C lands at once."""
    [(_, info)] = run_parallel([("info", lambda: _model_info(http, revision, max_info_bytes))],
                               1, threading.Event(), http.deadline, lambda: _too_slow(http))
    return info


def _siblings(info: dict[str, Any]) -> list[tuple[str, int | None]]:
    out = []
    for s in info["siblings"]:
        if not isinstance(s, dict) or not isinstance(s.get("rfilename"), str):
            continue
        if "\x00" in s["rfilename"] or len(s["rfilename"]) > 1000:
            continue  # no file system takes it; not a name the Hub would list
        if path_too_deep(s["rfilename"]):
            raise WeightsError(f"the Hub lists a file more than {MAX_PATH_DEPTH} folders deep "
                               f"({s['rfilename'][:60]!r}...): not a model repo mlxfit reads")
        size = s.get("size")
        lfs = s.get("lfs")
        if type(size) is not int and isinstance(lfs, dict):
            size = lfs.get("size")
        if type(size) is int and size > MAX_FILE_BYTES:
            raise WeightsError(f"{s['rfilename']!r}: the Hub lists it at {size:,} bytes, past "
                               "any real file (2^53)")
        out.append((s["rfilename"], size if type(size) is int and size >= 0 else None))
    return out


def _listing(names: list[str], limit: int = 12) -> str:
    shown = sorted(names)[:limit]
    return ", ".join(shown) + (", ..." if len(names) > limit else "") if shown else "nothing"


def _plan(repo_id: str, commit: str, siblings: list[tuple[str, int | None]],
          max_shards: int = 4096) -> list[str]:
    """The shards mlx-lm would load, or a one-line error before any file is fetched."""
    names = [n for n, _ in siblings]
    label = snapshot_label(repo_id, commit)
    shards = sorted(n for n in names if "/" not in n and fnmatch(n, SHARD_GLOB))
    odd = [n for n in shards if not is_shard_name(n)]
    if odd:
        raise WeightsError(f"{label}: the shard name {odd[0]!r} has a character no model "
                           "file name has (a control character or a backslash)")
    try:
        missing_numbered_shards(shards)  # its bound only: refused before any request
    except WeightsError as e:
        raise WeightsError(f"{label}: {e}") from None
    if len(shards) > max_shards:
        raise WeightsError(f"{label}: lists {len(shards):,} {SHARD_GLOB} files, more than the "
                           f"{max_shards:,} mlxfit reads (each costs two requests; "
                           "MLXFIT_HUB_MAX_SHARDS raises the cap)")
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


# The first read of a shard: huggingface_hub's rule (HfApi.parse_safetensors_file_metadata reads
# bytes 0-100000: "97% of safetensors files have a metadata size < 100kb"). One request holds
# the length and the whole header of nearly every shard; a longer header costs one more.
FIRST_READ_BYTES = 100_000


def _fetch_shard(http: Http, url: str, name: str, size: int | None) -> tuple[int, bytes, int]:
    """(file size, first 8 + N bytes, N) of one shard: one Range request of its first
    ``FIRST_READ_BYTES`` at the resolve URL, a second only when the header is longer. The
    second also goes to the resolve URL, for a fresh redirect: a signed CDN link may be bound
    to the range it was first used with (403, or no answer at all)."""
    want = FIRST_READ_BYTES if size is None else max(8, min(size, FIRST_READ_BYTES))
    first = http.get(url, name, start=0, length=want)
    size = size if size is not None else first.total
    if size is None:
        raise WeightsError(f"{http.repo_id}/{name}: the Hub gave no file size for it")
    if size > MAX_FILE_BYTES:
        raise WeightsError(f"{http.repo_id}/{name}: the Hub says it is {size:,} bytes, past "
                           "any real file (2^53)")
    raw = first.data
    if len(raw) < 8:
        return size, raw, 0  # the validator says "too short"
    n = int.from_bytes(raw[:8], "little")
    if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
        http.discard(len(raw) - 8)
        return size, raw[:8], 0  # the validator names the bad length; no point fetching it
    if len(raw) < 8 + n:
        rest = http.get(url, name, start=len(raw), length=8 + n - len(raw))
        if len(rest.data) != 8 + n - len(raw):
            raise WeightsError(f"{http.repo_id}/{name}: the Hub sent {len(raw) + len(rest.data)}"
                               f" of the {8 + n} header bytes asked for (the file is shorter "
                               "than it says)")
        raw += rest.data
    http.discard(len(raw) - 8 - n)  # the first read's tail: tensor bytes, never kept
    return size, raw[: 8 + n], n


def fetch_snapshot(http: Http, info: dict[str, Any], progress: Any, max_workers: int,
           max_json_bytes: int, max_shards: int = 4096) -> Snapshot:
    repo_id, base = http.repo_id, http.base
    commit = info["sha"]
    siblings = _siblings(info)
    sizes = dict(siblings)
    shards = _plan(repo_id, commit, siblings, max_shards)
    jsons = [n for n in (CONFIG_NAME, INDEX_NAME, KV_CONFIG_NAME) if n in sizes]
    for n in jsons:
        if (sizes[n] or 0) > max_json_bytes:
            raise WeightsError(f"{snapshot_label(repo_id, commit)}/{n} is {sizes[n]:,} bytes: "
                               "not the small JSON file mlxfit expects")
    task = progress.add_task(f"reading {repo_id} headers", total=len(shards)) if progress else None

    files: dict[str, bytes] = {}
    got: dict[str, tuple[int, bytes, int]] = {}
    jobs: list[tuple[tuple[str, str], Any]] = []
    for n in jsons:
        url = _resolve_url(base, repo_id, commit, n)
        jobs.append((("json", n), lambda url=url, n=n: http.get(url, n)))
    for n in shards:
        url = _resolve_url(base, repo_id, commit, n)
        jobs.append((("shard", n), lambda url=url, n=n: _fetch_shard(http, url, n, sizes.get(n))))
    def advance(key: tuple[str, str]) -> None:
        if progress and key[0] == "shard":
            progress.advance(task)

    for (kind, name), result in run_parallel(jobs, max_workers, http.cancelled, http.deadline,
                                             lambda: _too_slow(http), advance):
        if kind == "json":
            files[name] = result.data
        else:
            got[name] = result
    # A Hub (or a proxy) that echoes the token into what it serves must not get it printed or
    # cached: masked in every text kept, byte for byte (a header keeps its length N).
    hide = _masker(http.token)
    return Snapshot(
        repo_id=repo_id, commit=commit, endpoint=http.endpoint, fetched_at=_now(),
        siblings=[(hide(n), size) for n, size in siblings],
        files={n: hide(b) for n, b in files.items()},
        shards=[(n, got[n][0], hide(got[n][1])) for n in shards],
        requests=http.requests, bytes=http.bytes,
    )


def _masker(token: str | None) -> Any:
    """A function replacing ``token`` (str or UTF-8 bytes) by as many asterisks."""
    if not token:
        return lambda v: v
    t, tb = token, token.encode()

    def hide(v: Any) -> Any:
        if isinstance(v, bytes):
            return v.replace(tb, b"*" * len(tb)) if tb in v else v
        return v.replace(t, "*" * len(t)) if t in v else v

    return hide


def _too_slow(http: Http) -> MlxfitError:
    return HubUnreachable(
        f"reading {http.repo_id} from the Hub at {http.endpoint} did not finish within "
        f"{http.fetch_deadline:g} s (MLXFIT_HUB_FETCH_DEADLINE_SECONDS); try again later, or "
        "HF_HUB_OFFLINE=1 for models already cached")
