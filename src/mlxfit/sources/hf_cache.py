"""The local Hugging Face cache: where it is, its `models--org--name` folders, refs and
snapshots, and what makes a snapshot an adapter, a drafter or incomplete."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlxfit.errors import SourceError
from mlxfit.localfile import read_regular
from mlxfit.settings import Settings, from_environ
from mlxfit.shown import name_list
from mlxfit.sources.folder import load_folder, read_config
from mlxfit.sources.source import ModelSource

# A drafter is named for it ("...-DRAFT", "...-draft-0.5B", "EAGLE3-...", "medusa-...") or its
# config says so (EAGLE's draft_vocab_size, Medusa's heads, an Eagle/Medusa/Drafter class).
# compiled on first use (re caches it): start-up
_DRAFT_NAME = r"(?i)draft|(^|[-_./])(eagle\d*|medusa|mtp)($|[-_./])"


_DRAFT_CLASS = r"(?i)draft|eagle|medusa"  # compiled on first use (re caches it): start-up


_DRAFT_KEYS = ("draft_vocab_size", "medusa_num_heads", "medusa_num_layers")


_ADAPTER_FILES = ("adapter_config.json", "adapters.safetensors", "adapter_model.safetensors")


def adapter_reason(files: Sequence[str]) -> str | None:
    """LoRA/PEFT adapters (mlx-lm writes adapters.safetensors + adapter_config.json, PEFT
    adapter_model.safetensors + adapter_config.json) need a base model: not loadable alone."""
    found = [f for f in _ADAPTER_FILES if f in files]
    return f"an adapter ({', '.join(found)}), not a model" if found else None


def drafter_reason(repo_id: str, config: dict[str, Any] | None) -> str | None:
    """A speculative-decoding draft model or head: meant to run beside a bigger model."""
    name = repo_id.rsplit("/", 1)[-1]
    if re.search(_DRAFT_NAME, name):
        return f"a speculative-decoding drafter (its name {name!r})"
    if config:
        for k in _DRAFT_KEYS:
            if k in config:
                return f"a speculative-decoding drafter (config has {k})"
        classes = [config.get("model_type")] + list(config.get("architectures") or [])
        for c in classes:
            if isinstance(c, str) and re.search(_DRAFT_CLASS, c):
                return f"a speculative-decoding drafter (config says {c})"
    return None


_REPO_DIR_PREFIX = "models--"


def cache_dirname(repo_id: str) -> str:
    """The cache folder of a model repo: "org/name" -> "models--org--name" (huggingface_hub's
    repo_folder_name for repo_type "model")."""
    return _REPO_DIR_PREFIX + repo_id.replace("/", "--")


def repo_id_of(dirname: str) -> str | None:
    """The repo id of a cache folder: "models--org--name" -> "org/name", "models--gpt2" ->
    "gpt2"; None for anything else (datasets--..., spaces--..., .locks). Hub ids cannot contain
    "--" (huggingface_hub's validate_repo_id), so the first "--" after the prefix separates org
    and name."""
    if not dirname.startswith(_REPO_DIR_PREFIX) or len(dirname) == len(_REPO_DIR_PREFIX):
        return None
    return dirname[len(_REPO_DIR_PREFIX):].replace("--", "/", 1)


# A ref file holds one 40-character commit hash: anything much longer is not one, and is
# refused unread like any local file mlxfit did not write (mlxfit.localfile).
REF_BYTES = 4096


def _read_ref(p: Path) -> str:
    return read_regular(p, REF_BYTES).decode().strip()


def _refs(repo_dir: Path) -> dict[str, list[str]]:
    """commit sha -> ref names pointing at it (refs/main, refs/pr/1, ...)."""
    out: dict[str, list[str]] = {}
    refs = repo_dir / "refs"
    try:
        for p in sorted(refs.rglob("*")):
            if p.is_file():
                sha = _read_ref(p)
                out.setdefault(sha, []).append(str(p.relative_to(refs)))
    except (OSError, UnicodeDecodeError):
        pass  # unreadable refs: snapshots are still ordered by time below
    return out


def snapshot_order(repo_dir: Path) -> list[Path]:
    """The snapshot refs/main points at first, then other refs', then newest first."""
    snaps = repo_dir / "snapshots"
    entries = [p for p in snaps.iterdir() if not p.name.startswith(".")]  # raises OSError
    refs = _refs(repo_dir)

    def key(p: Path) -> tuple[int, float, str]:
        names = refs.get(p.name, [])
        try:
            mtime = p.lstat().st_mtime
        except OSError:
            mtime = 0.0
        return (0 if "main" in names else 1 if names else 2, -mtime, p.name)

    return sorted(entries, key=key)


def hf_cache_ids() -> list[str]:

    root = hf_hub_cache_dir()
    if not root.is_dir():
        return []
    ids = (repo_id_of(p.name) for p in root.iterdir() if p.is_dir())
    return [i for i in ids if i is not None]


def hf_hub_cache_dir(settings: Settings | None = None) -> Path:
    """The hub cache directory for the environment as it is now (``Settings.hf_hub_cache``:
    huggingface_hub's precedence, applied at call time, not frozen at its import)."""
    return (settings or from_environ()).hf_hub_cache


def _listing(folder: Path, nested: bool = False) -> str:
    # refs can be nested (refs/pr/1); snapshot names are 40-hex shas, 12 chars identify them.
    if not folder.is_dir():
        return "none"
    if nested:
        names = [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()]
    else:
        names = [p.name[:12] for p in folder.iterdir()]
    return name_list(names) if names else "none"


def _refs_error(repo_id: str, cache: Path, e: Exception) -> SourceError:
    return SourceError(f"{repo_id} in the Hugging Face cache at {cache}: cannot read its refs "
                       f"({getattr(e, 'strerror', None) or e})")


_HEX = frozenset("0123456789abcdef")
MIN_PREFIX = 4  # as git: a shorter prefix of a commit hash is not accepted


def expand_revision(repo_dir: Path, revision: str) -> str:
    """``revision`` as the cache knows it: a ref name or a full snapshot hash as given; a
    unique prefix of a cached snapshot's hash (mlxfit prints 12 characters) as that hash."""
    rev = revision.strip().lower()
    if (repo_dir / "refs" / revision).is_file() or not MIN_PREFIX <= len(rev) < 40 \
            or not set(rev) <= _HEX:
        return revision
    try:
        snaps = sorted(p.name for p in (repo_dir / "snapshots").iterdir() if p.is_dir())
    except OSError:
        return revision
    hits = [s for s in snaps if s.startswith(rev)]
    if len(hits) > 1:
        raise SourceError(f"revision {revision} of {repo_id_of(repo_dir.name)} matches {len(hits)} cached "
                          f"snapshots ({', '.join(h[:12] for h in hits)}): give more of the hash")
    return hits[0] if hits else revision


def from_hf_cache(repo_id: str, revision: str | None, cache: Path) -> ModelSource | None:
    """A cached snapshot of repo_id, None when the repo is not in the cache at all. Resolved
    as huggingface_hub's try_to_load_from_cache does (refs/<rev> names a snapshot, else <rev>
    is one), but the ref is read through mlxfit.localfile (a regular file, 4 KB) and the hub
    library is not imported (~150 ms) to read one small file."""
    repo_dir = cache / cache_dirname(repo_id)
    if not repo_dir.is_dir():
        return None
    if revision:
        revision = expand_revision(repo_dir, revision)
    rev = revision or "main"
    refs, snaps = repo_dir / "refs", repo_dir / "snapshots"
    # A ref name stays inside refs/ (refs/pr/1 is nested); a snapshot is one folder name.
    in_refs = not Path(rev).is_absolute() and ".." not in Path(rev).parts
    try:
        sha = _read_ref(refs / rev) if in_refs and (refs / rev).is_file() else rev
    except (OSError, UnicodeDecodeError) as e:
        raise _refs_error(repo_id, cache, e) from None
    plain = sha not in ("", ".", "..") and "/" not in sha and "\\" not in sha
    if not plain or not (snaps / sha).is_dir():
        raise SourceError(
            f"revision {rev} of {repo_id} is not in the Hugging Face cache at {cache} "
            f"(refs: {_listing(refs, nested=True)}; snapshots: {_listing(snaps)})"
        )
    snapshot = snaps / sha
    if not (snapshot / "config.json").is_file():
        read_config(snapshot / "config.json")  # raises: missing or a broken symlink
    if not any(snapshot.glob("model*.safetensors")):
        held = sorted(p.name for p in snapshot.iterdir() if not p.name.startswith("."))
        raise NotDownloaded(
            f"{repo_id} in the Hugging Face cache at {cache}: snapshot {sha[:12]} holds "
            f"{', '.join(held[:6])}{', ...' if len(held) > 6 else ''} but no model*.safetensors "
            "(only the config was downloaded)")
    return load_folder(snapshot, repo_id, "hf-cache", snapshot.name)


class NotDownloaded(SourceError):
    """A cached snapshot with config.json and no weights (what transformers'
    ``AutoConfig.from_pretrained`` leaves): the Hub can still tell the headers."""
