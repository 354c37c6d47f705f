"""A model folder as mlx-lm loads it: config.json and the model*.safetensors shards (every
source ends here: a folder, an HF cache snapshot, a Hub snapshot of header stubs)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mlxfit.errors import ConfigError, SourceError, WeightsError
from mlxfit.localfile import read_regular, why
from mlxfit.settings import MAX_JSON_BYTES
from mlxfit.sources.safetensors_header import read_headers
from mlxfit.sources.source import INDEX_NAME, ModelSource


def read_config(path: Path) -> dict[str, Any]:
    """config.json as a dict. Python's json accepts the bare Infinity/NaN tokens real configs
    carry (a Nemotron config has one), so no custom parser is needed."""
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{path}: broken symlink -> {os.readlink(path)}", file=str(path))
    try:
        data = json.loads(read_regular(path, MAX_JSON_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing (every model folder needs config.json)",
                          file=str(path)) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {why(e)}", file=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid UTF-8", file=str(path)) from None
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}",
            file=str(path)) from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply", file=str(path)) from None
    except ValueError:  # an integer literal past sys.get_int_max_str_digits() (4,300 digits)
        raise ConfigError(f"{path}: a number with too many digits", file=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a JSON object, got a {type(data).__name__}",
                          file=str(path))
    return data


def _check_link(path: Path) -> None:
    # HF snapshots are symlinks into blobs/: follow them, but say so when one leads nowhere.
    if path.is_symlink() and not path.exists():
        raise WeightsError(f"broken symlink {path} -> {os.readlink(path)}")


def _index_shards(folder: Path, index: Path) -> list[Path]:
    try:
        data = json.loads(read_regular(index, MAX_JSON_BYTES).decode("utf-8"))
    except OSError as e:
        raise WeightsError(f"{index}: cannot read: {why(e)}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightsError(f"{index}: garbled index ({e})".replace("\n", " ")) from None
    except (RecursionError, ValueError):  # nested too deeply; a 4,300+ digit integer
        raise WeightsError(f"{index}: garbled index (nested too deeply or a huge number)") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(v, str) for v in weight_map.values())
    ):
        raise WeightsError(f"{index}: garbled index (no weight_map of tensor -> file)")
    shards: list[Path] = []
    for fname in dict.fromkeys(weight_map.values()):  # first-seen order, no duplicates
        rel = os.path.normpath(fname)
        # A hostile index must not send us reading arbitrary files outside the model folder.
        if os.path.isabs(rel) or rel == ".." or rel.startswith(".." + os.sep):
            raise WeightsError(f"{index}: shard {fname!r} is outside the model folder")
        shard = folder / rel
        _check_link(shard)
        if not shard.is_file():
            raise WeightsError(f"missing shard {fname} listed in index {index}")
        shards.append(shard)
    return shards


def _folder_shards(folder: Path) -> tuple[list[Path], tuple[str, ...]]:
    """Shards mlx-lm loads: it globs ``model*.safetensors`` (mlx_lm/utils.py load_model) and
    never reads the index; the index, when present, tells us whether a shard is missing."""
    index = folder / INDEX_NAME
    _check_link(index)
    listed: set[str] = set()
    if index.exists():
        listed = {p.name for p in _index_shards(folder, index)}  # raises on a missing shard
    shards = []
    for p in sorted(folder.glob("model*.safetensors")):
        _check_link(p)
        if p.is_file():  # a directory named model.safetensors is not a shard
            shards.append(p)
    notes: tuple[str, ...] = ()
    # e.g. Mistral's consolidated.safetensors beside the sharded copy: mlx-lm skips it.
    others = sorted(p.name for p in folder.glob("*.safetensors")
                    if not p.name.startswith("model") and p.name != INDEX_NAME)
    if shards and others:
        notes = ("not loaded by mlx-lm (it reads model*.safetensors), not counted: "
                 + ", ".join(others),)
    extra = sorted({p.name for p in shards} - listed) if listed else []
    if extra:
        notes += (f"not in {INDEX_NAME} but loaded by mlx-lm's glob: {', '.join(extra)}",)
    if not shards:
        names = sorted(
            p.name for p in folder.iterdir() if p.name != "config.json" and p.name[0] != "."
        )
        found = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise WeightsError(
            f"no model*.safetensors in {folder} (found: {found or 'nothing else'})"
        )
    _check_numbered_shards(folder, shards)
    return shards, notes


_NUMBERED = r"^model-(\d+)-of-(\d+)\.safetensors$"  # compiled on first use (re caches it): start-up

# The most shards the "-of-N" parts of a folder's names may claim, all groups together: the
# biggest checkpoints have ~1,000 shards (the Hub reader plans at most HubSettings.max_shards,
# 4,096). A name claiming more (model-00001-of-99999999999) is refused before anything is
# counted: listing the shards it says are missing would never end.
MAX_NAMED_SHARDS = 100_000


def missing_numbered_shards(names: Iterable[str]) -> list[str]:
    """The shards absent by their siblings' names: model-00002-of-00003.safetensors says there
    are three (an interrupted download without an index, which mlx-lm's glob would load short).
    Grouped by the "of" part as written; other names are ignored. WeightsError when the names
    claim more than MAX_NAMED_SHARDS shards."""
    seen: dict[str, set[int]] = {}  # the "of" part as written -> shard numbers present
    claimed = 0
    for name in names:
        m = re.match(_NUMBERED, name)
        if m:
            total = m.group(2)
            if total not in seen:
                # at most 1,000 digits (a Hub name's bound), under int()'s 4,300-digit limit
                claimed += int(total) if len(total.lstrip("0")) <= 7 else MAX_NAMED_SHARDS + 1
                if claimed > MAX_NAMED_SHARDS:
                    shown = name if len(name) <= 80 else name[:60] + "..."
                    raise WeightsError(
                        f"the shard name {shown!r} says there are more shards than any "
                        f"checkpoint has (at most {MAX_NAMED_SHARDS:,} in all are accepted)")
            seen.setdefault(total, set()).add(int(m.group(1)))
    return [f"model-{i:0{len(total)}d}-of-{total}.safetensors"
            for total, have in sorted(seen.items(), key=lambda kv: (int(kv[0]), kv[0]))
            for i in range(1, int(total) + 1) if i not in have]


def _check_numbered_shards(folder: Path, shards: list[Path]) -> None:
    """A half-downloaded folder without an index would otherwise be sized short."""
    missing = missing_numbered_shards(p.name for p in shards)
    if missing:
        of = missing[0][missing[0].rindex("-of-"):]
        group = [n for n in missing if n.endswith(of)]
        raise WeightsError(f"missing shard {missing[0]} in {folder} ({len(group)} of "
                           f"{int(of[4:-len('.safetensors')])} missing: half-downloaded?)")


def unreadable_error(e: OSError, where: Path) -> SourceError:
    return SourceError(f"{e.filename or where}: cannot read: {e.strerror or e}")


def load_folder(
    folder: Path, name: str, kind: str, revision: str | None, notes: tuple[str, ...] = ()
) -> ModelSource:
    try:
        config = read_config(folder / "config.json")
        shards, shard_notes = _folder_shards(folder)
        tensors = read_headers(shards)
        # A Hub snapshot's stubs are sparse up to the real file size, so this holds there too.
        download = sum(p.stat().st_size for p in shards)
    except OSError as e:  # a folder we may not list or search (chmod 000): stat, glob, iterdir
        raise unreadable_error(e, folder) from None
    return ModelSource(
        name=name,
        kind=kind,
        location=str(folder),
        config=config,
        tensors=tuple(tensors),
        files=tuple(str(p) for p in shards),
        revision=revision,
        notes=notes + shard_notes,
        download_bytes=download,
    )
