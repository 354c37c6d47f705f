"""From a Hub snapshot to a ModelSource: the snapshot (fresh or from mlxfit's cache) is staged
as a throw-away folder that looks like the repo (the fetched JSON, header-only shard stubs with
a sparse hole up to the real file size, empty placeholders for the other files whose names
matter) and read by the very code that reads a local folder (``sources.folder.load_folder``), so a
Hub model is validated exactly as a downloaded one; errors are relabelled ``repo@commit/file``.
Also ``HubTransfer``, the record of what reading the model cost, attached to the result.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from mlxfit.errors import MlxfitError, SourceError, WeightsError
from mlxfit.sources.folder import load_folder
from mlxfit.sources.hub.cache import JSON_NAMES, Snapshot, is_shard_name, snapshot_label
from mlxfit.sources.hub.http import short_reason
from mlxfit.sources.source import INDEX_NAME, HubTransfer
from mlxfit.writefile import create_sparse, write_file

if TYPE_CHECKING:
    from mlxfit.sources.source import ModelSource


# --- rebuilding a ModelSource from a snapshot -------------------------------------------------


def _safe_relpath(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name)
    if p.is_absolute() or not p.parts or any(part in ("", ".", "..") for part in p.parts):
        return None
    return p


def _index_targets(snap: Snapshot) -> set[str]:
    try:
        weight_map = json.loads(snap.files[INDEX_NAME])["weight_map"]
        return {v for v in weight_map.values() if isinstance(v, str)}
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError):  # garbled: the
        return set()  # folder reader (sources._index_shards) says which


def _materialize(folder: Path, snap: Snapshot) -> None:
    """A throw-away folder that looks like the repo to sources._load_folder: the fetched JSON,
    header-only shard stubs (8 + N bytes, then a sparse hole up to the real file size) and an
    empty placeholder for each other file whose name matters (other *.safetensors: notes; files
    the index lists: the missing-shard check)."""
    written = set(snap.files) | {n for n, _, _ in snap.shards}
    wanted = _index_targets(snap)
    for name, _ in snap.siblings:
        # mlx-lm's glob and the notes see top-level *.safetensors only: a nested one is staged
        # (folders made) only when the index names it, so a listing cannot make many folders
        top = "/" not in name and name.endswith(".safetensors")
        if name in written or not (top or name in wanted):
            continue
        rel = _safe_relpath(name)
        if rel is None:
            continue
        target = folder.joinpath(*rel.parts)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            create_sparse(target, b"", 0)
        except (OSError, ValueError):  # "a" and "a/b" both listed: keep whichever came first
            continue
    # Names were checked when the snapshot was read (cache.py); checked again here because this
    # is where a bad one would write outside the folder: plain names of the kinds a fetch makes.
    label = snapshot_label(snap.repo_id, snap.commit)
    for name, data in snap.files.items():
        if name not in JSON_NAMES:
            raise SourceError(f"{label}: refusing to stage a file named {name!r}")
        write_file(folder / name, data)
    for name, size, raw in snap.shards:
        if not is_shard_name(name):
            raise SourceError(f"{label}: refusing to stage a shard named {name!r}")
        try:
            create_sparse(folder / name, raw, size)
        except (OSError, ValueError) as e:
            raise WeightsError(f"{label}/{name}: cannot stage its "
                               f"header for checking ({short_reason(e)})") from None


def _relabel(e: MlxfitError, folder: Path, label: str) -> MlxfitError:
    msg = str(e).replace(str(folder) + os.sep, label + "/").replace(str(folder), label)
    return type(e)(msg)


def to_source(snap: Snapshot, transfer: HubTransfer, notes: tuple[str, ...] = ()) -> ModelSource:
    label = snapshot_label(snap.repo_id, snap.commit)
    try:
        with tempfile.TemporaryDirectory(prefix="mlxfit-hub-") as tmp:
            folder = Path(tmp) / "snapshot"
            folder.mkdir()
            _materialize(folder, snap)
            try:
                src = load_folder(folder, snap.repo_id, "hub", snap.commit)
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
