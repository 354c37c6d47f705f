"""The built-in catalog: shipped manifests are self-consistent and reproduce real repo sizes.

These tests read only the shipped manifests (no mlx needed). The regeneration check at the
end runs only where mlx-lm is installed at the version that generated the catalog.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from mlxfit import catalog
from mlxfit.catalog import CatalogEntry, catalog_ids, load_entry
from mlxfit.errors import SourceError

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"

# total_size of real model.safetensors.index.json files (see scripts/catalog_configs/).
KNOWN_SIZES = {
    "mlx-community/Qwen3-8B-4bit": 4_607_731_712,  # = georgehenney/Qwen3-8B-heretic-mlx-4bit
    "LiquidAI/LFM2.5-1.2B-Instruct-mlx-4bit": 658_503_168,
    "meta-llama/Llama-3.2-3B": 6_425_499_648,
}
REQUIRED = [
    "mlx-community/Qwen3-8B-4bit",
    "mlx-community/Llama-3.1-8B-Instruct-4bit",
    "mlx-community/Qwen3-30B-A3B-4bit",
    "mlx-community/gemma-3-27b-it-4bit",
    "mlx-community/gpt-oss-20b-MXFP4-Q8",
    "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit",
    "mlx-community/Qwen3-4B-Instruct-2507-4bit",
    "mlx-community/Qwen3-4B-Instruct-2507-8bit",
    "mlx-community/Qwen3-4B-Instruct-2507-bf16",
    "mlx-community/Qwen3-30B-A3B-Instruct-2507-4bit",
    "mlx-community/Qwen3-30B-A3B-Instruct-2507-8bit",
]


def entry(repo_id: str) -> CatalogEntry:
    e = load_entry(repo_id)
    assert e is not None, repo_id
    return e


def test_required_ids_present() -> None:
    ids = catalog_ids()
    assert set(REQUIRED) <= set(ids)
    assert ids == sorted(ids, key=str.lower)


@pytest.mark.parametrize("repo_id", catalog_ids())
def test_manifest_consistent(repo_id: str) -> None:
    e = entry(repo_id)
    assert e.repo_id == repo_id
    assert sum(t.nbytes for t in e.tensors) == e.total_bytes > 0
    names = [t.name for t in e.tensors]
    assert len(set(names)) == len(names)
    assert e.config["model_type"] and e.description
    assert set(e.generated_by) == {"mlx", "mlx_lm"}
    q = e.config.get("quantization")
    if q is not None:  # mlx-lm writes both blocks, identical
        assert e.config["quantization_config"] == q
        assert {"group_size", "bits", "mode"} <= set(q)
    # Every quantized weight has its scales; affine also has biases.
    by_name = {t.name: t for t in e.tensors}
    for t in e.tensors:
        if t.name.endswith(".scales"):
            assert by_name[t.name[: -len("scales")] + "weight"].dtype == "U32"


@pytest.mark.parametrize(("repo_id", "size"), KNOWN_SIZES.items())
def test_known_real_sizes(repo_id: str, size: int) -> None:
    assert entry(repo_id).total_bytes == size


def test_quantization_layout() -> None:
    # Qwen3 MoE routers stay 8-bit (mlx-lm's quant_predicate); experts are 4-bit.
    q = entry("mlx-community/Qwen3-30B-A3B-4bit").config["quantization"]
    assert q["model.layers.0.mlp.gate"] == {"group_size": 64, "bits": 8}
    assert (q["bits"], q["group_size"], q["mode"]) == (4, 64, "affine")
    # gpt-oss: experts MXFP4 (U8 scales, group 32), everything else affine 8-bit.
    g = entry("mlx-community/gpt-oss-20b-MXFP4-Q8")
    q = g.config["quantization"]
    assert (q["bits"], q["group_size"], q["mode"]) == (4, 32, "mxfp4")
    assert q["model.layers.0.self_attn.q_proj"] == {"group_size": 64, "bits": 8, "mode": "affine"}
    t = {x.name: x for x in g.tensors}
    assert t["model.layers.0.mlp.experts.down_proj.scales"].dtype == "U8"
    assert t["model.layers.0.mlp.experts.down_proj.weight"].shape == (32, 2880, 2880 * 4 // 32)
    # bf16 entry: nothing quantized, tied embeddings -> no lm_head.
    b = entry("mlx-community/Qwen3-4B-Instruct-2507-bf16")
    assert "quantization" not in b.config
    assert {x.dtype for x in b.tensors} == {"BF16"}
    assert not any(x.name.startswith("lm_head") for x in b.tensors)
    assert b.config["max_position_embeddings"] == 262144


def _vit_block_params(h: int, i: int) -> int:
    # q,k,v,o (fused or not) with biases + fc1/fc2 with biases + two LayerNorms (w, b).
    return 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h


def _base_config(name: str) -> dict[str, Any]:
    return json.loads((SCRIPTS / "catalog_configs" / name).read_text())


def _unquantized_bytes(e: CatalogEntry, elem_bytes: int = 2) -> int:
    """Bytes of the same tensors before quantization (bf16), from the packed shapes."""
    q = e.config["quantization"]
    names = {t.name for t in e.tensors}
    total = 0
    for t in e.tensors:
        stem = t.name.rsplit(".", 1)[0]
        packed = f"{stem}.scales" in names and t.dtype == "U32"
        if t.name.endswith((".scales", ".biases")) and f"{stem}.scales" in names:
            continue  # quantization metadata, not in the bf16 checkpoint
        if packed:
            bits = q.get(stem, q)["bits"]
            total += math.prod(t.shape[:-1]) * (t.shape[-1] * 32 // bits) * elem_bytes
        else:
            total += t.nbytes
    return total


def test_medgemma_bf16_is_text_plus_siglip() -> None:
    """google/medgemma-27b-it (bf16, 54,864,813,280 B) = Gemma 3 27B text + SigLIP + projector.

    The text part is the gemma-3-27b-it-4bit manifest unpacked back to bf16; the vision tower
    (dropped by mlx-lm's gemma3 sanitize) is counted by hand from vision_config.
    """
    cfg = _base_config("google__medgemma-27b-it.json")
    v, text_hidden = cfg["vision_config"], cfg["text_config"]["hidden_size"]
    h, p = v["hidden_size"], v["patch_size"]
    vision = (
        h * v["num_channels"] * p * p
        + h  # patch conv + bias
        + (v["image_size"] // p) ** 2 * h  # position embedding
        + v["num_hidden_layers"] * _vit_block_params(h, v["intermediate_size"])
        + 2 * h  # post_layernorm
        + h * text_hidden
        + h  # multi_modal_projector: input projection + soft-emb RMSNorm
    )
    text = _unquantized_bytes(entry("mlx-community/gemma-3-27b-it-4bit"))
    assert text + 2 * vision == 54_864_813_280


def test_qwen35_mlx_8bit_is_text_plus_bf16_vision() -> None:
    """mlx-community/Qwen3.5-9B-MLX-8bit (10,426,433,504 B) = mlx-lm's 8-bit text model +
    the bf16 Qwen3-VL-style vision tower its converter kept (mlx-lm drops it on load)."""
    v = _base_config("mlx-community__Qwen3.5-9B-MLX-8bit.json")["vision_config"]
    h, i, m = v["hidden_size"], v["intermediate_size"], v["spatial_merge_size"]
    merged = h * m * m
    assert v["deepstack_visual_indexes"] == []  # each would add another merger
    vision = (
        h * v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
        + h
        + v["num_position_embeddings"] * h
        + v["depth"] * _vit_block_params(h, i)
        + 2 * h
        + merged * merged
        + merged
        + v["out_hidden_size"] * merged
        + v["out_hidden_size"]
    )
    text = entry("mlx-community/Qwen3.5-9B-MLX-8bit").total_bytes
    assert text + 2 * vision == 10_426_433_504


def test_lookup_is_case_insensitive() -> None:
    a = entry("mlx-community/Qwen3-8B-4bit")
    b = entry("MLX-COMMUNITY/qwen3-8b-4BIT")
    assert a == b and b.repo_id == "mlx-community/Qwen3-8B-4bit"


@pytest.mark.parametrize("repo_id", ["mlx-community/no-such-model", "", "Qwen3-8B-4bit"])
def test_unknown_is_none(repo_id: str) -> None:
    assert load_entry(repo_id) is None


def test_corrupt_manifest_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "catalog_dir", lambda: tmp_path)
    (tmp_path / "org__bad.json.gz").write_bytes(b"not gzip")
    doc = {
        "schema": 1,
        "repo_id": "org/sum",
        "description": "",
        "generated_by": {},
        "config": {"model_type": "x"},
        "tensors": [["w", "BF16", [2, 3]]],
        "total_bytes": 7,
    }
    (tmp_path / "org__sum.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert catalog_ids() == ["org/bad", "org/sum"]
    for rid in ("org/bad", "org/sum"):
        with pytest.raises(SourceError) as err:
            load_entry(rid)
        assert "\n" not in str(err.value)


def test_manifests_match_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regenerate every entry with mlx-lm and compare with the shipped files."""
    mlx_lm = pytest.importorskip("mlx_lm")
    spec = importlib.util.spec_from_file_location("gen_catalog", SCRIPTS / "gen_catalog.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gen_catalog", gen)  # dataclasses look their module up
    spec.loader.exec_module(gen)
    assert sorted((e.repo_id for e in gen.ENTRIES), key=str.lower) == catalog_ids()
    for e in gen.ENTRIES:
        shipped = entry(e.repo_id)
        if shipped.generated_by["mlx_lm"] != mlx_lm.__version__:
            pytest.skip(f"catalog made with mlx-lm {shipped.generated_by['mlx_lm']}")
        config, tensors, total = gen.build(e)
        assert (config, total) == (shipped.config, shipped.total_bytes), e.repo_id
        assert [[t.name, t.dtype, list(t.shape)] for t in shipped.tensors] == tensors
