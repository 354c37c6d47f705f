"""Find a model from what the user typed: a folder, the local Hugging Face cache, the catalog,
or the Hugging Face Hub (sources/hub: headers over Range requests, cached).

Only config.json, the shard index and safetensors headers are read: never tensor data, never
model code; the network only for the Hub, and never under HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path

from mlxfit.errors import HubUnreachable, SourceError, WeightsError
from mlxfit.settings import Settings, from_environ
from mlxfit.sources.catalog import catalog_ids, load_entry
from mlxfit.sources.folder import load_folder, unreadable_error
from mlxfit.sources.hf_cache import NotDownloaded, from_hf_cache, hf_hub_cache_dir, repo_id_of
from mlxfit.sources.revision import check_revision
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
        # The question before a download is how big it is (ux-3 F12): at least the tensors.
        download_bytes=sum(t.nbytes for t in entry.tensors),
        download_at_least=True,
    )


def known_ids(s: Settings) -> list[str]:
    """Every model id mlxfit can size offline: the catalog's and the cache's repos."""
    ids = list(catalog_ids(s.catalog_dir))
    try:
        cache = hf_hub_cache_dir(s)
        ids += [r for p in cache.iterdir() if (r := repo_id_of(p.name))] if cache.is_dir() else []
    except OSError:  # an unreadable cache: the catalog still suggests
        pass
    return ids


def did_you_mean(spec: str, s: Settings) -> str:
    """"did you mean X?" from the catalog and the cache, or "" when nothing is close: the same
    name under another org (or none), else ids a few edits away (any case)."""
    ids = {i.casefold(): i for i in known_ids(s)}
    want = spec.strip().casefold()
    name = want.rsplit("/", 1)[-1]
    hits = [i for k, i in ids.items() if k.rsplit("/", 1)[-1] == name and k != want]
    if not hits:
        hits = [ids[k] for k in difflib.get_close_matches(want, list(ids), n=3, cutoff=0.85)]
    if not hits:
        names = {k.rsplit("/", 1)[-1]: i for k, i in ids.items()}
        hits = [names[k] for k in difflib.get_close_matches(name, list(names), n=3, cutoff=0.85)]
    hits = list(dict.fromkeys(hits))  # best first (difflib's order), once each
    if not hits:
        return ""
    return "did you mean " + (hits[0] if len(hits) == 1 else
                              f"{', '.join(hits[:-1])} or {hits[-1]}") + "?"


def _with_hint(where: str, spec: str, s: Settings) -> str:
    hint = did_you_mean(spec, s)
    return f"{where}; {hint}" if hint else where


def resolve_model(spec: str, revision: str | None = None, *, progress: bool = False,
                  settings: Settings | None = None) -> ModelSource:
    """Folder path, then local Hugging Face cache, then the built-in catalog, then the Hub
    (mlxfit's metadata cache first; under HF_HUB_OFFLINE=1 only that cache, never the network).
    ``progress`` shows a transient progress display on stderr while the Hub is read.
    ``settings`` (default: from the environment now) says where the caches and the catalog are
    and how the Hub is asked."""
    if not spec.strip():  # Path("") is ".": never size the current folder by accident
        raise SourceError("no model given (the name is empty)")
    check_revision(revision)
    try:
        path = Path(spec).expanduser()
        is_dir = path.is_dir()
    except RuntimeError:  # "~nosuchuser/model": no such user
        raise SourceError(f"model folder {spec} does not exist (no such user's home)") from None
    except OSError as e:  # a parent we may not search
        raise unreadable_error(e, path) from None
    if is_dir:
        notes = (f"revision {revision} ignored for a local folder",) if revision else ()
        return load_folder(path, Path(os.path.abspath(path)).name, "folder", None, notes)
    if spec.startswith(("/", ".", "~")) or (os.sep in spec and path.exists()):
        if path.exists():
            raise SourceError(f"{spec} is not a folder (give the model folder holding config.json)")
        raise SourceError(f"model folder {spec} does not exist")

    s = settings or from_environ()
    cache = hf_hub_cache_dir(s)
    partial: tuple[str, ...] = ()
    not_cached: SourceError | None = None
    try:
        found = from_hf_cache(spec, revision, cache)
    except NotDownloaded as e:
        if s.hub.offline:
            raise SourceError(f"{e}; HF_HUB_OFFLINE=1 is set, so the Hub was not asked") from None
        found, partial = None, (f"{e}: the headers were read from the Hub",)
    except OSError as e:  # a cache directory we may not search or list
        raise SourceError(f"cannot read the Hugging Face cache at {cache}: "
                          f"{e.filename}: {e.strerror or e}") from None
    except SourceError as e:
        # The repo is cached but not this revision: the Hub can still tell its headers. The
        # catalog's one version never stands in for a snapshot the user named (a hash typo).
        if revision is None or s.hub.offline:
            raise
        found, not_cached = None, e
    except WeightsError as e:
        # A half-downloaded (or damaged) snapshot of a model the catalog knows: the catalog's
        # headers are the same files, so the answer does not wait for the download (ux-3 F18).
        found = _from_catalog(spec, None, s.catalog_dir) if revision is None else None
        if found is None:
            raise
        why = (f"the Hugging Face cache's copy cannot be read ({e}): sized from the built-in "
               "catalog's headers of the same repo")
        found = dataclasses.replace(found, notes=(*found.notes, why))
    if not_cached is None:  # a revision the cache lacks never falls back to the catalog (F2)
        found = found or _from_catalog(spec, revision, s.catalog_dir)
    if found is not None:
        return found

    # On demand: only a model found nowhere locally reaches the Hub code.
    from mlxfit.sources.hub import fetch as hub

    where = (f"{spec} not found: not a folder, not in the Hugging Face cache at {cache}, "
             "not in the built-in catalog")
    if not hub.is_repo_id(spec):
        raise SourceError(_with_hint(f"{where}, and not a Hugging Face repo id (org/name)",
                                     spec, s))
    if s.hub.offline:
        cached = hub.load_cached(spec, revision, settings=s)
        if cached is not None:
            return cached
        raise SourceError(_with_hint(
            f"{where}, not in mlxfit's Hub metadata cache at {s.hub_cache_dir}; "
            "HF_HUB_OFFLINE=1 is set, so the Hub was not asked", spec, s))
    try:
        src = hub.fetch_model(spec, revision, progress=progress, settings=s)
        return dataclasses.replace(src, notes=src.notes + partial) if partial else src
    except HubUnreachable as e:
        if not_cached is not None:  # the cache's refusal names its snapshots: the likely typo
            raise SourceError(f"{not_cached}; the Hub could not be asked ({e})",
                              param="revision") from None
        raise
    except SourceError as e:  # the Hub has no such repo (or refuses it): a near name may help
        hint = did_you_mean(spec, s)
        if not hint:
            raise
        raise SourceError(f"{e}; {hint}", param=e.param, file=e.file, field=e.field) from None

