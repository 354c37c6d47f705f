"""The names shared by every source: the hub cache's models--org--name folders, the numbered
shards' completeness, and the dtype names (safetensors and mlx spellings)."""

from __future__ import annotations

from pathlib import Path

import pytest
from st_helpers import make_folder, write_sparse

from mlxfit.errors import WeightsError
from mlxfit.model.tensors import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    MLX_FLOAT_DTYPES,
    MLX_TO_SAFETENSORS,
    SAFETENSORS_TO_MLX,
    float_bytes,
)
from mlxfit.sources.folder import missing_numbered_shards
from mlxfit.sources.hf_cache import cache_dirname, repo_id_of
from mlxfit.sources.hub.cache import repo_cache_dir
from mlxfit.sources.resolve import resolve_model
from mlxfit.sources.safetensors_header import read_header
from mlxfit.verbs.pick import scan_cache

CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2}


# --------------------------------------------------------------------------- models--org--name


@pytest.mark.parametrize(("dirname", "repo_id"), [
    ("models--mlx-community--Qwen3-8B-4bit", "mlx-community/Qwen3-8B-4bit"),  # dashes in org
    ("models--org--a--b", "org/a--b"),  # the first "--" separates org and name
    ("models--gpt2", "gpt2"),  # a legacy id without an org
])
def test_repo_id_of_and_back(dirname: str, repo_id: str) -> None:
    assert repo_id_of(dirname) == repo_id
    assert cache_dirname(repo_id) == dirname


@pytest.mark.parametrize("dirname", ["datasets--org--data", "spaces--org--app", ".locks",
                                     "models--", "version.txt", "model--org--name"])
def test_not_a_model_folder(dirname: str) -> None:
    assert repo_id_of(dirname) is None


def test_cache_dirname_is_huggingface_hubs() -> None:
    fd = pytest.importorskip("huggingface_hub.file_download",
                             reason="huggingface_hub is not installed")
    for rid in ("mlx-community/Qwen3-8B-4bit", "gpt2"):
        assert cache_dirname(rid) == fd.repo_folder_name(repo_id=rid, repo_type="model")


def test_hub_metadata_cache_uses_the_same_folder_name() -> None:
    d = repo_cache_dir(Path("/r"), "https://huggingface.co", "mlx-community/Qwen3-8B-4bit")
    assert d.name == "models--mlx-community--Qwen3-8B-4bit"


def test_pick_scans_only_model_folders_and_names_them(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    for name in ("models--mlx-community--Qwen3-8B-4bit", "models--gpt2", "datasets--org--x",
                 ".locks"):
        (cache / name / "snapshots").mkdir(parents=True)
    loaded, skipped, _ = scan_cache(cache)
    assert loaded == []
    assert sorted((s.model, s.reason) for s in skipped) == [
        ("gpt2", "no snapshot (nothing downloaded)"),
        ("mlx-community/Qwen3-8B-4bit", "no snapshot (nothing downloaded)")]


# --------------------------------------------------------------------------- numbered shards


def _st(*names: str) -> list[str]:
    return [f"{n}.safetensors" for n in names]


def test_missing_numbered_shards() -> None:
    assert missing_numbered_shards(_st("model-00001-of-00003", "model-00003-of-00003")) == \
        _st("model-00002-of-00003")  # a gap
    assert missing_numbered_shards(_st("model-00002-of-00004")) == \
        _st("model-00001-of-00004", "model-00003-of-00004", "model-00004-of-00004")
    assert missing_numbered_shards(_st("model-00001-of-00002", "model-00002-of-00002")) == []
    assert missing_numbered_shards(_st("model-1-of-2")) == _st("model-2-of-2")
    # not numbered: mlx-lm's glob loads them, nothing names a sibling
    assert missing_numbered_shards(_st("model", "model-extra", "model-00001", "weights-1-of-2",
                                       "model-00001-of-00002.bak")) == []
    assert missing_numbered_shards(iter(_st("model-00001-of-00002"))) == \
        _st("model-00002-of-00002")  # any iterable of names


def test_folder_without_index_names_the_missing_shard(tmp_path: Path) -> None:
    spec = {"w": ("F32", [4])}
    folder = make_folder(tmp_path / "m", CONFIG, {
        "model-00001-of-00003.safetensors": spec,
        "model-00003-of-00003.safetensors": {"v": ("F32", [4])},
    })
    with pytest.raises(WeightsError) as e:
        resolve_model(str(folder))
    assert str(e.value) == (f"missing shard model-00002-of-00003.safetensors in {folder} "
                            "(1 of 3 missing: half-downloaded?)")
    write_sparse(folder / "model-00002-of-00003.safetensors", {"u": ("F32", [4])})
    assert len(resolve_model(str(folder)).files) == 3


# --------------------------------------------------------------------------- dtype names


def test_dtype_tables_agree() -> None:
    assert set(MLX_TO_SAFETENSORS.values()) <= set(DTYPE_BYTES)
    assert {m: s for s, m in SAFETENSORS_TO_MLX.items()} == MLX_TO_SAFETENSORS
    assert set(FLOAT_DTYPES) == {"F32", "BF16", "F16"}
    assert MLX_FLOAT_DTYPES == ("float32", "bfloat16", "float16")
    assert [float_bytes(d) for d in MLX_FLOAT_DTYPES] == [4, 2, 2]
    for other in ("uint32", "int8", "float64", "F32", "", None, ["bfloat16"]):
        assert float_bytes(other) is None


def test_dtype_names_are_mlxs(tmp_path: Path) -> None:
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed")
    for name, st_name in MLX_TO_SAFETENSORS.items():
        dt = getattr(mx, name, None) or getattr(mx, name + "_")
        assert str(dt).rsplit(".", 1)[-1] == name  # the spelling measure reads back
        assert mx.zeros((1,), dtype=dt).nbytes == DTYPE_BYTES[st_name]
        if name == "float64":  # mx.save_safetensors refuses float64
            continue
        path = tmp_path / f"{name}.safetensors"
        mx.save_safetensors(str(path), {"a": mx.zeros((3,), dtype=dt)},
                            metadata={"format": "mlx"})  # as mlx_lm.utils.save_model writes
        (t,) = read_header(path)
        assert (t.dtype, t.nbytes) == (st_name, 3 * DTYPE_BYTES[st_name])
