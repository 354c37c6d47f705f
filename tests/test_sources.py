from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from st_helpers import make_folder, make_hf_cache, write_real, write_sparse

from mlxfit.errors import ConfigError, SourceError, WeightsError
from mlxfit.model.tensors import TensorInfo
from mlxfit.settings import Settings, from_environ
from mlxfit.sources.hf_cache import hf_hub_cache_dir
from mlxfit.sources.resolve import resolve_model
from mlxfit.sources.source import CATALOG_NOTE

CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2}
SHA_A = "a" * 40
SHA_B = "b" * 40


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never look at the real user cache: point every hub variable into tmp_path."""
    cache = tmp_path / "hf" / "hub"
    for var in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@contextmanager
def raises(exc: type[Exception], *fragments: str) -> Iterator[None]:
    """pytest.raises plus: the one-line message contains every fragment (file names above all)."""
    with pytest.raises(exc) as info:
        yield
    msg = str(info.value)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    assert "\n" not in msg


# --- folders ----------------------------------------------------------------------------------


def test_folder_with_one_real_file(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    write_real(folder / "model.safetensors", {"w": np.zeros((3, 4), dtype=np.float32)})
    src = resolve_model(str(folder))
    assert (src.kind, src.name, src.location) == ("folder", "tiny-model", str(folder))
    assert src.config == CONFIG
    assert src.tensors == (TensorInfo("w", "F32", (3, 4), 48),)
    assert src.files == (str(folder / "model.safetensors"),)
    assert src.revision is None and src.notes == ()


def test_relative_and_home_specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_folder(tmp_path / "m", CONFIG, {"model.safetensors": {"w": ("BF16", [8])}})
    monkeypatch.chdir(tmp_path)
    assert resolve_model("./m").name == "m"
    assert resolve_model("m").kind == "folder"  # an existing folder wins over everything
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model("~/m").tensors[0].nbytes == 16


def test_sharded_folder_with_index(tmp_path: Path) -> None:
    shards = {
        "model-00002-of-00002.safetensors": {"lm_head.weight": ("BF16", [100, 64])},
        "model-00001-of-00002.safetensors": {
            "model.embed_tokens.weight": ("BF16", [100, 64]),
            "model.norm.weight": ("F32", [64]),
        },
    }
    folder = make_folder(tmp_path / "sharded", CONFIG, shards, index=True)
    write_sparse(folder / "consolidated.safetensors", {"x": ("BF16", [100, 64, 2])})
    src = resolve_model(str(folder))
    # mlx-lm globs model*.safetensors (sorted here), never the index's order.
    assert [Path(f).name for f in src.files] == sorted(shards)
    assert sum(t.nbytes for t in src.tensors) == 12800 + 12800 + 256
    assert any("consolidated.safetensors" in n and "not counted" in n for n in src.notes)


def test_folder_without_index_reads_model_star_shards_sorted(tmp_path: Path) -> None:
    """mlx-lm loads model*.safetensors only: adapters.safetensors is not the model."""
    folder = make_folder(
        tmp_path / "m",
        CONFIG,
        {"model-b.safetensors": {"y": ("U8", [3])}, "model-a.safetensors": {"x": ("U8", [2])},
         "adapters.safetensors": {"z": ("U8", [5])}},
    )
    (folder / "model-sub.safetensors").mkdir()  # not a file: skipped
    src = resolve_model(str(folder))
    assert [t.name for t in src.tensors] == ["x", "y"]
    assert any("adapters.safetensors" in n for n in src.notes)


def test_missing_shard_listed_in_index(tmp_path: Path) -> None:
    folder = make_folder(
        tmp_path / "m",
        CONFIG,
        {"model-1.safetensors": {"a": ("F32", [1])}, "model-2.safetensors": {"b": ("F32", [1])}},
        index=True,
    )
    (folder / "model-2.safetensors").unlink()
    with raises(WeightsError, "missing shard model-2.safetensors listed in index", str(folder)):
        resolve_model(str(folder))


@pytest.mark.parametrize(
    "content",
    [
        '{"weight_map": ',
        '{"metadata": {}}',
        '{"weight_map": {"a": 3}}',
        "[1]",
        '{"weight_map": []}',
        '{"weight_map": {}}',
    ],
)
def test_garbled_index(tmp_path: Path, content: str) -> None:
    folder = make_folder(tmp_path / "m", CONFIG, {"model.safetensors": {"a": ("F32", [1])}})
    (folder / "model.safetensors.index.json").write_text(content)
    with raises(WeightsError, str(folder / "model.safetensors.index.json"), "garbled index"):
        resolve_model(str(folder))


def test_index_cannot_point_outside_the_folder(tmp_path: Path) -> None:
    write_sparse(tmp_path / "elsewhere.safetensors", {"a": ("F32", [1])})
    folder = make_folder(tmp_path / "m", CONFIG, {})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../elsewhere.safetensors"}})
    )
    with raises(WeightsError, "outside the model folder", "elsewhere.safetensors"):
        resolve_model(str(folder))


def test_gguf_only_folder(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "g", CONFIG, {})
    (folder / "model.gguf").write_bytes(b"GGUF")
    (folder / "pytorch_model.bin").write_bytes(b"PK")
    with raises(
        WeightsError, f"no model*.safetensors in {folder} (found: model.gguf, pytorch_model.bin)"
    ):
        resolve_model(str(folder))


def test_empty_folder_reports_missing_config_first(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    with raises(ConfigError, str(tmp_path / "e" / "config.json"), "missing"):
        resolve_model(str(tmp_path / "e"))


def test_broken_symlink_shard(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m", CONFIG, {"model-1.safetensors": {"a": ("F32", [1])}})
    (folder / "model-2.safetensors").symlink_to(tmp_path / "blobs" / "nothing")
    with raises(WeightsError, "broken symlink", str(folder / "model-2.safetensors")):
        resolve_model(str(folder))


def test_broken_symlink_listed_in_index(tmp_path: Path) -> None:
    folder = make_folder(
        tmp_path / "m", CONFIG, {"model-1.safetensors": {"a": ("F32", [1])}}, index=True
    )
    (folder / "model-1.safetensors").rename(tmp_path / "moved")
    (folder / "model-1.safetensors").symlink_to(tmp_path / "gone")
    with raises(WeightsError, "broken symlink", "model-1.safetensors"):
        resolve_model(str(folder))


def test_symlinked_shards_are_followed(tmp_path: Path) -> None:
    write_sparse(tmp_path / "blob", {"a": ("BF16", [1000, 1000])})
    folder = make_folder(tmp_path / "m", CONFIG, {})
    (folder / "model.safetensors").symlink_to(tmp_path / "blob")
    assert resolve_model(str(folder)).tensors[0].nbytes == 2_000_000


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"a": 1,\n "b": }', "invalid JSON at line 2"),
        ("[1, 2]", "must be a JSON object"),
        ("", "invalid JSON at line 1"),
    ],
)
def test_garbled_config(tmp_path: Path, text: str, fragment: str) -> None:
    folder = make_folder(tmp_path / "m", None, {"model.safetensors": {"a": ("F32", [1])}})
    (folder / "config.json").write_text(text)
    with raises(ConfigError, str(folder / "config.json"), fragment):
        resolve_model(str(folder))


def test_config_not_utf8(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m", None, {"model.safetensors": {"a": ("F32", [1])}})
    (folder / "config.json").write_bytes(b'{"a": "\xff"}')
    with raises(ConfigError, str(folder / "config.json"), "UTF-8"):
        resolve_model(str(folder))


def test_config_with_bare_infinity(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m", None, {"model.safetensors": {"a": ("F32", [1])}})
    (folder / "config.json").write_text(
        '{"model_type": "nemotron_h", "time_step_limit": [0.0, Infinity]}'
    )
    assert resolve_model(str(folder)).config["time_step_limit"] == [0.0, float("inf")]


def test_bad_shard_error_names_the_shard(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m", CONFIG, {})
    (folder / "model.safetensors").write_bytes(b"\x00" * 8)
    with raises(WeightsError, str(folder / "model.safetensors"), "header length is 0"):
        resolve_model(str(folder))


def test_path_like_spec_that_does_not_exist(tmp_path: Path) -> None:
    for spec in (str(tmp_path / "nope"), "./nope-mlxfit-test", "~/nope-mlxfit-test"):
        with raises(SourceError, spec, "does not exist"):
            resolve_model(spec)


def test_path_to_a_file_is_not_a_folder(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "model.safetensors", {"a": ("F32", [1])})
    with raises(SourceError, str(p), "not a folder"):
        resolve_model(str(p))


# --- Hugging Face cache -----------------------------------------------------------------------


def cached_repo(
    cache: Path, repo: str = "org/tiny", commit: str = SHA_A, rows: int = 10, **kw
) -> Path:  # type: ignore[no-untyped-def]
    return make_hf_cache(
        cache,
        repo,
        {
            "config.json": json.dumps(CONFIG).encode(),
            "model.safetensors": {"model.embed_tokens.weight": ("BF16", [rows, 64])},
        },
        commit=commit,
        **kw,
    )


def test_fake_cache_has_the_hub_layout(isolated_cache: Path) -> None:
    from huggingface_hub import scan_cache_dir

    cached_repo(isolated_cache, refs=("main",))
    info = scan_cache_dir(isolated_cache)
    (repo,) = info.repos
    assert repo.repo_id == "org/tiny" and not info.warnings
    assert {r.commit_hash for r in repo.revisions} == {SHA_A}
    assert {ref for r in repo.revisions for ref in r.refs} == {"main"}


def test_resolves_from_hf_cache(isolated_cache: Path) -> None:
    snap = cached_repo(isolated_cache)
    src = resolve_model("org/tiny")
    assert (src.kind, src.name, src.revision) == ("hf-cache", "org/tiny", SHA_A)
    assert src.location == str(snap)
    assert src.files == (str(snap / "model.safetensors"),)
    assert Path(src.files[0]).is_symlink()
    assert src.tensors[0].nbytes == 1280
    assert src.config == CONFIG


def test_cache_dir_is_read_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "c1", tmp_path / "c2"
    cached_repo(first, rows=1)
    cached_repo(second, rows=2)
    monkeypatch.setenv("HF_HUB_CACHE", str(first))
    assert resolve_model("org/tiny").tensors[0].nbytes == 128
    monkeypatch.setenv("HF_HUB_CACHE", str(second))
    assert resolve_model("org/tiny").tensors[0].nbytes == 256


def test_hf_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hf_hub_cache_dir() == tmp_path / "home" / "hub"
    cached_repo(tmp_path / "home" / "hub")
    assert resolve_model("org/tiny").kind == "hf-cache"


def test_revision_lookup(isolated_cache: Path) -> None:
    cached_repo(isolated_cache, commit=SHA_A, rows=1, refs=("main",))
    cached_repo(isolated_cache, commit=SHA_B, rows=3, refs=("v2.0",))
    assert resolve_model("org/tiny").revision == SHA_A
    tagged = resolve_model("org/tiny", revision="v2.0")
    assert (tagged.revision, tagged.tensors[0].nbytes) == (SHA_B, 384)
    assert resolve_model("org/tiny", revision=SHA_B).tensors[0].nbytes == 384


def test_unknown_revision_lists_what_is_cached(isolated_cache: Path) -> None:
    cached_repo(isolated_cache, refs=("main",))
    with raises(SourceError, "revision v9", "org/tiny", str(isolated_cache), "main"):
        resolve_model("org/tiny", revision="v9")


def test_cached_repo_without_config(isolated_cache: Path) -> None:
    make_hf_cache(
        isolated_cache, "org/noconf", {"model.safetensors": {"a": ("F32", [1])}}, commit=SHA_A
    )
    with raises(ConfigError, "config.json", SHA_A, "missing"):
        resolve_model("org/noconf")


def test_cached_config_blob_deleted(isolated_cache: Path) -> None:
    snap = cached_repo(isolated_cache)
    (snap / "config.json").resolve().unlink()  # e.g. a half-finished `hf cache delete`
    with raises(ConfigError, str(snap / "config.json"), "broken symlink"):
        resolve_model("org/tiny")


def test_cached_snapshot_with_a_missing_shard(isolated_cache: Path) -> None:
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    make_hf_cache(
        isolated_cache,
        "org/partial",
        {
            "config.json": json.dumps(CONFIG).encode(),
            "model.safetensors.index.json": json.dumps(index).encode(),
            "model-1.safetensors": {"a": ("F32", [1])},
        },
        commit=SHA_A,
    )
    with raises(WeightsError, "missing shard model-2.safetensors"):
        resolve_model("org/partial")


def test_existing_folder_wins_over_the_cache(
    tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached_repo(isolated_cache)
    make_folder(tmp_path / "work" / "org" / "tiny", CONFIG, {"model.safetensors": {"a": ("U8", [1])}})
    monkeypatch.chdir(tmp_path / "work")
    assert resolve_model("org/tiny").kind == "folder"


# --- catalog and not found --------------------------------------------------------------------


def scratch_catalog(tmp_path: Path, repo_id: str) -> Settings:
    """Settings whose catalog is a folder holding one real entry file for ``repo_id``."""
    d = tmp_path / "catalog"
    d.mkdir(exist_ok=True)
    doc = {"schema": 1, "repo_id": repo_id, "description": "d", "config": dict(CONFIG),
           "tensors": [["model.embed_tokens.weight", "BF16", [10, 4]]], "total_bytes": 80,
           "generated_by": {"mlx": "0", "mlx_lm": "0"}}
    name = repo_id.replace("/", "__", 1) + ".json.gz"
    (d / name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return replace(from_environ(), catalog_dir=d)


def test_catalog_fallback(tmp_path: Path) -> None:
    settings = scratch_catalog(tmp_path, "Org/Model")
    src = resolve_model("org/model", revision="main", settings=settings)
    assert (src.kind, src.name, src.location) == ("catalog", "Org/Model", "built-in catalog")
    assert src.files == () and src.revision is None
    assert src.notes[0] == CATALOG_NOTE
    assert src.tensors[0].nbytes == 80
    with raises(SourceError, "not in the built-in catalog"):
        resolve_model("org/other", settings=settings)


def test_cache_wins_over_catalog(isolated_cache: Path, tmp_path: Path) -> None:
    settings = scratch_catalog(tmp_path, "org/tiny")
    assert resolve_model("org/tiny", settings=settings).kind == "catalog"
    cached_repo(isolated_cache)
    assert resolve_model("org/tiny", settings=settings).kind == "hf-cache"


def test_real_catalog_entry() -> None:
    from mlxfit.sources import catalog

    ids = catalog.catalog_ids()
    assert ids, "the built-in catalog ships entries"
    src = resolve_model(ids[0])
    assert src.kind == "catalog" and CATALOG_NOTE in src.notes
    assert sum(t.nbytes for t in src.tensors) == catalog.load_entry(ids[0]).total_bytes


@pytest.mark.parametrize("spec", ["nobody-mlxfit/not-a-model", "not a repo id", "a--b"])
def test_not_found_anywhere(spec: str, isolated_cache: Path) -> None:
    with raises(
        SourceError,
        f"{spec} not found: not a folder, not in the Hugging Face cache at {isolated_cache}",
        "not in the built-in catalog",
    ):
        resolve_model(spec)


def test_resolving_never_imports_model_code_or_numpy_for_folders(tmp_path: Path) -> None:
    # A folder resolution is stdlib only: run it in a fresh interpreter and look.
    import subprocess
    import sys

    make_folder(tmp_path / "m", CONFIG, {"model.safetensors": {"a": ("F32", [1])}})
    code = (
        "import sys; from mlxfit.sources.resolve import resolve_model; resolve_model(sys.argv[1]); "
        "bad = [m for m in ('numpy', 'torch', 'huggingface_hub', 'transformers') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_numbered_shard_missing_without_index(tmp_path: Path) -> None:
    """model-00002-of-00003 absent and no index: a half-downloaded folder, not a smaller model."""
    folder = make_folder(
        tmp_path / "m",
        CONFIG,
        {"model-00001-of-00003.safetensors": {"a": ("F32", [1])},
         "model-00003-of-00003.safetensors": {"b": ("F32", [1])}},
    )
    with raises(WeightsError, "model-00002-of-00003.safetensors", str(folder)):
        resolve_model(str(folder))
