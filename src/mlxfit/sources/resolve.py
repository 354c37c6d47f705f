"""Find a model from what the user typed: a folder, the local Hugging Face cache, the catalog,
or the Hugging Face Hub (sources/hub: headers over Range requests, cached).

Only config.json, the shard index and safetensors headers are read: never tensor data, never
model code; the network only for the Hub, and never under HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlxfit.errors import SourceError
from mlxfit.settings import Settings, from_environ
from mlxfit.sources.catalog import load_entry
from mlxfit.sources.folder import _load_folder, _unreadable
from mlxfit.sources.hf_cache import _from_hf_cache, hf_hub_cache_dir
from mlxfit.sources.source import CATALOG_NOTE, ModelSource


def _from_catalog(spec: str, revision: str | None, directory: Path) -> ModelSource | None:
    entry = load_entry(spec, directory)
    if entry is None:
        return None
    notes = (CATALOG_NOTE,)
    if revision is not None:
        notes += (f"revision {revision} ignored: the catalog has one version of each model",)
    return ModelSource(
        name=entry.repo_id,
        kind="catalog",
        location="built-in catalog",
        config=entry.config,
        tensors=tuple(entry.tensors),
        files=(),
        revision=None,
        notes=notes,
    )


def resolve_model(spec: str, revision: str | None = None, *, progress: bool = False,
                  settings: Settings | None = None) -> ModelSource:
    """Folder path, then local Hugging Face cache, then the built-in catalog, then the Hub
    (mlxfit's metadata cache first; under HF_HUB_OFFLINE=1 only that cache, never the network).
    ``progress`` shows a transient progress display on stderr while the Hub is read.
    ``settings`` (default: from the environment now) says where the caches and the catalog are
    and how the Hub is asked."""
    if not spec.strip():  # Path("") is ".": never size the current folder by accident
        raise SourceError("no model given (the name is empty)")
    try:
        path = Path(spec).expanduser()
        is_dir = path.is_dir()
    except RuntimeError:  # "~nosuchuser/model": no such user
        raise SourceError(f"model folder {spec} does not exist (no such user's home)") from None
    except OSError as e:  # a parent we may not search
        raise _unreadable(e, path) from None
    if is_dir:
        notes = (f"revision {revision} ignored for a local folder",) if revision else ()
        return _load_folder(path, Path(os.path.abspath(path)).name, "folder", None, notes)
    if spec.startswith(("/", ".", "~")) or (os.sep in spec and path.exists()):
        if path.exists():
            raise SourceError(f"{spec} is not a folder (give the model folder holding config.json)")
        raise SourceError(f"model folder {spec} does not exist")

    s = settings or from_environ()
    cache = hf_hub_cache_dir(s)
    try:
        found = _from_hf_cache(spec, revision, cache)
    except OSError as e:  # a cache directory we may not search or list
        raise SourceError(f"cannot read the Hugging Face cache at {cache}: "
                          f"{e.filename}: {e.strerror or e}") from None
    except SourceError:
        # The repo is cached but not this revision: the Hub can still tell its headers.
        if revision is None or s.hub.offline:
            raise
        found = None
    found = found or _from_catalog(spec, revision, s.catalog_dir)
    if found is not None:
        return found

    # On demand: only a model found nowhere locally reaches the Hub code.
    from mlxfit.sources.hub import fetch as hub

    where = (f"{spec} not found: not a folder, not in the Hugging Face cache at {cache}, "
             "not in the built-in catalog")
    if not hub.is_repo_id(spec):
        raise SourceError(f"{where}, and not a Hugging Face repo id (org/name)")
    if s.hub.offline:
        cached = hub.load_cached(spec, revision, settings=s)
        if cached is not None:
            return cached
        raise SourceError(f"{where}, not in mlxfit's Hub metadata cache at {s.hub_cache_dir}; "
                          "HF_HUB_OFFLINE=1 is set, so the Hub was not asked")
    return hub.fetch_model(spec, revision, progress=progress, settings=s)
