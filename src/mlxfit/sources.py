"""Find a model from what the user typed: a folder, the local Hugging Face cache, the catalog,
or the Hugging Face Hub (mlxfit.hub: headers over Range requests, cached).

Only config.json, the shard index and safetensors headers are read: never tensor data, never
model code; the network only for the Hub, and never under HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxfit.errors import ConfigError, SourceError, WeightsError
from mlxfit.safetensors_header import read_headers
from mlxfit.tensors import TensorInfo

if TYPE_CHECKING:
    from mlxfit.hub import HubTransfer

INDEX_NAME = "model.safetensors.index.json"
CATALOG_NOTE = "catalog descriptor: sizes from a header-only manifest, not a downloaded model"


@dataclass(frozen=True)
class ModelSource:
    name: str
    kind: str  # "folder" | "hf-cache" | "catalog" | "hub"
    location: str  # folder / snapshot path, "built-in catalog", or the Hub URL of the commit
    config: dict[str, Any]
    tensors: tuple[TensorInfo, ...]
    files: tuple[str, ...]  # shard paths / Hub resolve URLs, in reading order (catalog: empty)
    revision: str | None = None  # commit sha of an hf-cache snapshot or of the Hub model read
    notes: tuple[str, ...] = ()
    transfer: HubTransfer | None = None  # hub only: requests and bytes it took (for --verbose)


def read_config(path: Path) -> dict[str, Any]:
    """config.json as a dict. Python's json accepts the bare Infinity/NaN tokens real configs
    carry (a Nemotron config has one), so no custom parser is needed."""
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{path}: broken symlink -> {os.readlink(path)}")
    if not path.is_file():
        raise ConfigError(f"{path}: missing (every model folder needs config.json)")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid UTF-8") from None
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply") from None
    except ValueError:  # an integer literal past sys.get_int_max_str_digits() (4,300 digits)
        raise ConfigError(f"{path}: a number with too many digits") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a JSON object, got a {type(data).__name__}")
    return data


def _check_link(path: Path) -> None:
    # HF snapshots are symlinks into blobs/: follow them, but say so when one leads nowhere.
    if path.is_symlink() and not path.exists():
        raise WeightsError(f"broken symlink {path} -> {os.readlink(path)}")


def _index_shards(folder: Path, index: Path) -> list[Path]:
    try:
        data = json.loads(index.read_bytes().decode("utf-8"))
    except OSError as e:
        raise WeightsError(f"{index}: cannot read: {e.strerror or e}") from None
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


_NUMBERED = re.compile(r"^model-(\d+)-of-(\d+)\.safetensors$")


def _check_numbered_shards(folder: Path, shards: list[Path]) -> None:
    """model-0000i-of-0000n.safetensors names say how many shards there are: a half-downloaded
    folder without an index would otherwise be sized short."""
    seen: dict[str, set[int]] = {}  # the "of" part as written -> shard numbers present
    for p in shards:
        m = _NUMBERED.match(p.name)
        if m:
            seen.setdefault(m.group(2), set()).add(int(m.group(1)))
    for total, have in seen.items():
        missing = sorted(set(range(1, int(total) + 1)) - have)
        if missing:
            name = f"model-{missing[0]:0{len(total)}d}-of-{total}.safetensors"
            raise WeightsError(f"missing shard {name} in {folder} "
                               f"({len(missing)} of {int(total)} missing: half-downloaded?)")


def _unreadable(e: OSError, where: Path) -> SourceError:
    return SourceError(f"{e.filename or where}: cannot read: {e.strerror or e}")


def _load_folder(
    folder: Path, name: str, kind: str, revision: str | None, notes: tuple[str, ...] = ()
) -> ModelSource:
    try:
        config = read_config(folder / "config.json")
        shards, shard_notes = _folder_shards(folder)
        tensors = read_headers(shards)
    except OSError as e:  # a folder we may not list or search (chmod 000): stat, glob, iterdir
        raise _unreadable(e, folder) from None
    return ModelSource(
        name=name,
        kind=kind,
        location=str(folder),
        config=config,
        tensors=tuple(tensors),
        files=tuple(str(p) for p in shards),
        revision=revision,
        notes=notes + shard_notes,
    )


def hf_hub_cache_dir() -> Path:
    """The hub cache directory for the environment as it is now.

    huggingface_hub freezes constants.HF_HUB_CACHE when it is first imported, so a long-lived
    process (or a test that sets HF_HUB_CACHE) would see a stale value; this applies the same
    precedence as huggingface_hub.constants at call time.
    """
    home = os.getenv("HF_HOME") or os.path.join(
        os.getenv("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    default = os.getenv("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    cache = os.getenv("HF_HUB_CACHE") or default
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def _listing(folder: Path, nested: bool = False) -> str:
    # refs can be nested (refs/pr/1); snapshot names are 40-hex shas, 12 chars identify them.
    if not folder.is_dir():
        return "none"
    if nested:
        names = [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()]
    else:
        names = [p.name[:12] for p in folder.iterdir()]
    return ", ".join(sorted(names)) or "none"


def _refs_error(repo_id: str, cache: Path, e: Exception) -> SourceError:
    return SourceError(f"{repo_id} in the Hugging Face cache at {cache}: cannot read its refs "
                       f"({getattr(e, 'strerror', None) or e})")


def _from_hf_cache(repo_id: str, revision: str | None, cache: Path) -> ModelSource | None:
    """A cached snapshot of repo_id, None when the repo is not in the cache at all."""
    # The hub's folder name for a model repo; checked before importing huggingface_hub
    # (~150 ms), so a catalog or missing model never pays for it.
    if not (cache / ("models--" + repo_id.replace("/", "--"))).is_dir():
        return None
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.file_download import repo_folder_name

    try:
        repo_dir = cache / repo_folder_name(repo_id=repo_id, repo_type="model")
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache, revision=revision)
    except HFValidationError:
        return None  # not a repo id (e.g. "my model"): cannot be in the cache
    except (OSError, UnicodeDecodeError) as e:  # refs/<rev> unreadable or not text
        raise _refs_error(repo_id, cache, e) from None
    if not repo_dir.is_dir():
        return None
    rev = revision or "main"
    if not isinstance(found, str):
        snaps = repo_dir / "snapshots"
        refs = repo_dir / "refs"
        try:
            sha = (refs / rev).read_text().strip() if (refs / rev).is_file() else rev
        except (OSError, UnicodeDecodeError) as e:
            raise _refs_error(repo_id, cache, e) from None
        if not (snaps / sha).is_dir():
            raise SourceError(
                f"revision {rev} of {repo_id} is not in the Hugging Face cache at {cache} "
                f"(refs: {_listing(refs, nested=True)}; snapshots: {_listing(snaps)})"
            )
        read_config(snaps / sha / "config.json")  # raises: missing or a broken symlink
    snapshot = Path(found).parent
    return _load_folder(snapshot, repo_id, "hf-cache", snapshot.name)


def _from_catalog(spec: str, revision: str | None) -> ModelSource | None:
    try:
        from mlxfit.catalog import load_entry  # lazy: the catalog data is only read on demand
    except ModuleNotFoundError as e:
        if e.name != "mlxfit.catalog":
            raise
        return None
    entry = load_entry(spec)
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


def resolve_model(spec: str, revision: str | None = None, *, progress: bool = False) -> ModelSource:
    """Folder path, then local Hugging Face cache, then the built-in catalog, then the Hub
    (mlxfit's metadata cache first; under HF_HUB_OFFLINE=1 only that cache, never the network).
    ``progress`` shows a transient progress display on stderr while the Hub is read."""
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

    cache = hf_hub_cache_dir()
    try:
        found = _from_hf_cache(spec, revision, cache)
    except OSError as e:  # a cache directory we may not search or list
        raise SourceError(f"cannot read the Hugging Face cache at {cache}: "
                          f"{e.filename}: {e.strerror or e}") from None
    except SourceError:
        # The repo is cached but not this revision: the Hub can still tell its headers.
        from mlxfit import hub

        if revision is None or hub.is_offline():
            raise
        found = None
    found = found or _from_catalog(spec, revision)
    if found is not None:
        return found

    from mlxfit import hub  # only now: a folder, cached or catalog model never pays for it

    where = (f"{spec} not found: not a folder, not in the Hugging Face cache at {cache}, "
             "not in the built-in catalog")
    if not hub.is_repo_id(spec):
        raise SourceError(f"{where}, and not a Hugging Face repo id (org/name)")
    if hub.is_offline():
        cached = hub.load_cached(spec, revision)
        if cached is not None:
            return cached
        raise SourceError(f"{where}, not in mlxfit's Hub metadata cache at {hub.hub_cache_dir()}; "
                          "HF_HUB_OFFLINE=1 is set, so the Hub was not asked")
    return hub.fetch_model(spec, revision, progress=progress)
