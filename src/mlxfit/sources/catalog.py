"""The built-in catalog: header-only descriptors of popular MLX models, shipped as gzip JSON.

Each file catalog_data/<org>__<name>.json.gz describes the repo <org>/<name> exactly as
mlx_lm.convert would write it (config.json + tensor names/dtypes/shapes, no weights); see
scripts/gen_catalog.py. Listing ids only reads file names; a manifest is parsed on demand.
Stdlib only, so the CLI stays fast and this works without mlx installed.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mlxfit.errors import SourceError
from mlxfit.model.tensors import DTYPE_BYTES, TensorInfo
from mlxfit.resources import catalog_dir

_SUFFIX = ".json.gz"
SCHEMA = 1


@dataclass(frozen=True)
class CatalogEntry:
    repo_id: str
    description: str
    config: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    total_bytes: int  # sum of tensor bytes: the safetensors index "total_size"
    generated_by: dict[str, str]  # {"mlx": version, "mlx_lm": version}


def _repo_id(path: Path) -> str:
    # "<org>__<name>.json.gz" -> "<org>/<name>"; Hub org names cannot contain "__".
    return path.name[: -len(_SUFFIX)].replace("__", "/", 1)


@lru_cache(maxsize=4)
def _index(directory: Path) -> dict[str, Path]:
    """Lower-cased repo id -> manifest path. Cached per directory (the catalog is read-only)."""
    if not directory.is_dir():
        return {}
    return {_repo_id(p).lower(): p for p in directory.glob("*__*" + _SUFFIX)}


def catalog_ids(directory: Path | None = None) -> list[str]:
    """Repo ids in the catalog (``directory``, default the built-in one), sorted
    case-insensitively. Parses no manifest."""
    d = directory if directory is not None else catalog_dir()
    return sorted((_repo_id(p) for p in _index(d).values()), key=str.lower)


def load_entry(repo_id: str, directory: Path | None = None) -> CatalogEntry | None:
    """The catalog entry for repo_id (case-insensitive) in ``directory`` (default the built-in
    catalog), or None if the catalog lacks it."""
    d = directory if directory is not None else catalog_dir()
    path = _index(d).get(repo_id.strip().lower())
    if path is None:
        return None
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        return _parse(doc, _repo_id(path))
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, RecursionError) as e:
        # json.JSONDecodeError and gzip.BadGzipFile are ValueError / OSError subclasses.
        raise SourceError(f"built-in catalog file {path.name} is corrupt: {e}") from None


def _parse(doc: dict[str, Any], expected_id: str) -> CatalogEntry:
    if doc["schema"] != SCHEMA:
        raise ValueError(f"schema {doc['schema']!r}, expected {SCHEMA}")
    if doc["repo_id"] != expected_id:
        raise ValueError(f"repo_id {doc['repo_id']!r} does not match the file name")
    if not isinstance(doc["config"], dict):
        raise TypeError("config is not an object")
    tensors = []
    for name, dtype, shape in doc["tensors"]:
        if not isinstance(name, str) or dtype not in DTYPE_BYTES:
            raise ValueError(f"bad tensor record {name!r} {dtype!r}")
        if not all(type(d) is int and d >= 0 for d in shape):  # bool is no dimension
            raise ValueError(f"bad shape for {name}: {shape!r}")
        tensors.append(TensorInfo.of(name, dtype, shape))
    total = sum(t.nbytes for t in tensors)
    # The stored total is redundant on purpose: it catches a truncated or edited tensor list.
    if doc["total_bytes"] != total:
        raise ValueError(f"total_bytes {doc['total_bytes']} != sum of tensors {total}")
    return CatalogEntry(
        repo_id=doc["repo_id"],
        description=str(doc["description"]),
        config=doc["config"],
        tensors=tuple(tensors),
        total_bytes=total,
        generated_by=dict(doc["generated_by"]),
    )
