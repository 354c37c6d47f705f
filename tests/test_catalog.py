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

from mlxfit.errors import SourceError
from mlxfit.sources.catalog import CatalogEntry, catalog_ids, load_entry

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"

# Real published totals of the very repos the entries stand for, to the byte: the
# safetensors index total_size, or a storage size that public model cards quote for a pinned
# revision of the repo (the sum of its tensor bytes).
KNOWN_SIZES = {
    # Shared fixtures (/work/shared/fixtures/configs/README.md).
    "mlx-community/Qwen3-8B-4bit": 4_607_731_712,  # = georgehenney/Qwen3-8B-heretic-mlx-4bit
    "LiquidAI/LFM2.5-1.2B-Instruct-mlx-4bit": 658_503_168,
    "meta-llama/Llama-3.2-3B": 6_425_499_648,
    # exo-explore/exo tests pin these model cards to verified snapshots (storage_size in bytes):
    # Llama-3.2-1B rev 08231374, Llama-3.2-3B rev 7f0dc925, Llama-3.1-8B rev 90215b22,
    # gpt-oss-20b rev 773a7da7, Qwen3-Coder-30B-A3B rev 6e302ea6, Llama-3.3-70B rev de2dfaf5,
    # Qwen3-Coder-Next rev 7b9321ea.
    "mlx-community/Llama-3.2-1B-Instruct-4bit": 695_242_752,
    "mlx-community/Llama-3.2-3B-Instruct-4bit": 1_807_423_488,
    "mlx-community/Llama-3.1-8B-Instruct-4bit": 4_517_404_672,
    "mlx-community/gpt-oss-20b-MXFP4-Q8": 12_076_119_168,
    "mlx-community/Qwen3-Coder-30B-A3B-Instruct-4bit": 17_180_913_664,
    "mlx-community/Llama-3.3-70B-Instruct-4bit": 39_688_355_840,
    "mlx-community/Qwen3-Coder-Next-4bit": 44_844_060_160,
    # exo model cards (resources/inference_model_cards/, main at b5375f8c; DeepSeek as quoted
    # from exo's card in a public DeepSeek advisor doc).
    "mlx-community/NVIDIA-Nemotron-Nano-9B-v2-4bits": 5_002_791_936,
    "mlx-community/NVIDIA-Nemotron-Nano-9B-v2-6bit": 7_224_298_496,
    "mlx-community/DeepSeek-V3-0324-4bit": 377_606_822_912,
}

# A different real repo with the same architecture and quantization, hence the same tensors:
# (twin repo, its published total). exo model cards, as above.
TWIN_SIZES = {
    # Llama-3.1-Nemotron-70B-Instruct is a Llama 3.1 70B fine-tune (same dims as Llama 3.3 70B).
    "mlx-community/Llama-3.3-70B-Instruct-4bit": (
        "mlx-community/Llama-3.1-Nemotron-70B-Instruct-HF-4bit",
        39_688_355_840,
    ),
    "mlx-community/Llama-3.3-70B-Instruct-8bit": (
        "mlx-community/Llama-3.1-Nemotron-70B-Instruct-HF-8bit",
        74_964_549_632,
    ),
    "mlx-community/Qwen3-30B-A3B-4bit": (
        "mlx-community/Qwen3-Coder-30B-A3B-Instruct-4bit",
        17_180_913_664,
    ),
    "mlx-community/Qwen3-30B-A3B-Instruct-2507-4bit": (
        "mlx-community/Qwen3-Coder-30B-A3B-Instruct-4bit",
        17_180_913_664,
    ),
    "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit": (
        "mlx-community/Qwen3-Coder-Next-4bit",
        44_844_060_160,
    ),
}

# total_size of the bf16 source checkpoint (model.safetensors.index.json) that each entry was
# converted from: an entry unpacked back to bf16 must hold exactly those tensors. This checks
# every tensor name/shape of the architecture; the quantization on top is mlx-lm's own.
# Sources: public files quoting the index (weight-size tables, test fixtures, tutorials).
HF_CHECKPOINT_SIZES = {
    "mlx-community/Qwen3-4B-Instruct-2507-bf16": 8_044_936_192,  # Qwen/Qwen3-4B
    "mlx-community/Qwen3-8B-bf16": 16_381_470_720,  # Qwen/Qwen3-8B (399 tensors)
    "mlx-community/Qwen3-32B-4bit": 65_524_246_528,  # Qwen/Qwen3-32B
    "mlx-community/Qwen3-30B-A3B-8bit": 61_064_245_248,  # Qwen/Qwen3-30B-A3B(-Instruct-2507)
    "mlx-community/Qwen3-235B-A22B-4bit": 470_187_269_120,  # Qwen/Qwen3-235B-A22B
    "mlx-community/Qwen2.5-7B-Instruct-4bit": 15_231_233_024,  # Qwen/Qwen2.5-7B-Instruct
    "mlx-community/Qwen2.5-72B-Instruct-4bit": 145_412_407_296,  # Qwen/Qwen2.5-72B-Instruct
    "mlx-community/Meta-Llama-3.1-8B-Instruct-bf16": 16_060_522_496,  # meta-llama/Llama-3.1-8B
    "mlx-community/Llama-3.3-70B-Instruct-8bit": 141_107_412_992,  # meta-llama/Llama-3.1-70B
    "mlx-community/Mistral-7B-Instruct-v0.3-4bit": 14_496_047_104,  # mistralai/Mistral-7B-v0.3
    # mistralai/Devstral-Small-2507: the Mistral Small 3 24B architecture (params.json dims).
    "mlx-community/Mistral-Small-24B-Instruct-2501-4bit": 47_144_806_400,
    "mlx-community/Mixtral-8x7B-Instruct-v0.1-4bit": 93_405_585_408,  # Mixtral-8x7B
    "mlx-community/Phi-3-mini-4k-instruct-4bit": 7_642_159_104,  # microsoft/Phi-3-mini-4k
    "mlx-community/phi-4-8bit": 29_319_014_400,  # microsoft/phi-4
    "mlx-community/gemma-2-9b-it-4bit": 18_483_411_968,  # google/gemma-2-9b-it
    "mlx-community/DeepSeek-V2-Lite-Chat-4bit-mlx": 31_412_968_448,  # deepseek-ai/DeepSeek-V2-Lite
    # NVIDIA-Nemotron-Nano-9B-v2 bf16 weight bytes quoted by a public NIM benchmark script;
    # it also confirms the reconstructed Nemotron config.
    "mlx-community/NVIDIA-Nemotron-Nano-9B-v2-4bits": 17_776_454_656,
}

# Not confirmed against any published total (sizes follow from mlx-lm's classes and
# quantizer applied to a real config, and most architectures are checked above):
#   Qwen3-0.6B-4bit/-8bit/-bf16, Qwen3-8B-6bit/-8bit, Qwen3-32B-8bit, Qwen3-30B-A3B-6bit/
#   -8bit, Qwen3-30B-A3B-Instruct-2507-8bit, Qwen3-235B-A22B-4bit/-8bit,
#   Qwen3-Next-80B-A3B-Instruct-8bit, Qwen3-4B-Instruct-2507-4bit/-8bit,
#   Qwen2.5-7B-Instruct-4bit/-8bit, Qwen2.5-72B-Instruct-4bit, Meta-Llama-3.1-8B-Instruct-8bit,
#   Mistral-7B-Instruct-v0.3-4bit, Mistral-Small-24B-Instruct-2501-4bit/-8bit,
#   Mixtral-8x7B-Instruct-v0.1-4bit, Phi-3-mini-4k-instruct-4bit, phi-4-4bit/-8bit,
#   SmolLM3-3B-4bit/-8bit, DeepSeek-V2-Lite-Chat-4bit-mlx, Kimi-K2-Instruct-4bit,
#   gpt-oss-120b-MXFP4-Q8, GLM-4.5-Air-4bit, Qwen3-30B-A3B-4bit (twin only),
#   Qwen3-Next-80B-A3B-Instruct-4bit (twin only).
# mlx-vlm conversions on the Hub hold a vision tower mlx-lm drops, so their published totals
# are larger than these text-only descriptors: gemma-3-12b-it-4bit, gemma-3-27b-it-4bit/-8bit
# (text part checked via medgemma below), gemma-4-26b-a4b-it-4bit (exo's card: 15,608,614,044,
# not reproduced), Llama-4-Scout-17B-16E-Instruct-4bit. Sizes exo lists as round MiB values
# (e.g. Qwen3-0.6B-4bit 327 MiB) are estimates and were not used.

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


@pytest.mark.parametrize(("repo_id", "twin"), TWIN_SIZES.items())
def test_same_architecture_twin_sizes(repo_id: str, twin: tuple[str, int]) -> None:
    assert entry(repo_id).total_bytes == twin[1], f"differs from {twin[0]}"


@pytest.mark.parametrize(("repo_id", "size"), HF_CHECKPOINT_SIZES.items())
def test_unpacked_to_bf16_matches_source_checkpoint(repo_id: str, size: int) -> None:
    assert _unquantized_bytes(entry(repo_id)) == size


def test_smollm3_matches_published_shard_files() -> None:
    """HuggingFaceTB/SmolLM3-3B's two shards are 4,966,315,264 + 1,183,919,744 bytes (a public
    mirror's file listing). A safetensors file is its tensor bytes plus an 8-byte length and a
    JSON header of a few hundred bytes per tensor, so the tensor total sits just below."""
    e = entry("mlx-community/SmolLM3-3B-8bit")
    headers = 4_966_315_264 + 1_183_919_744 - _unquantized_bytes(e)
    n_tensors = sum(1 for t in e.tensors if not t.name.endswith((".scales", ".biases")))
    assert 0 < headers < 200 * n_tensors


def test_catalog_breadth() -> None:
    """30+ models across the families mlxfit models: dense, MoE, sliding window, MLA, hybrid."""
    ids = catalog_ids()
    assert len(ids) >= 30
    types = {entry(i).config["model_type"] for i in ids}
    assert {"llama", "qwen3", "qwen3_moe", "gemma2", "gemma3", "deepseek_v3", "qwen3_next"} <= types
    assert {"nemotron_h", "lfm2", "gpt_oss", "glm4_moe", "phi3", "mixtral"} <= types
    # pick --catalog shows one row per quant: the main families come in several.
    for stem, tags in [
        ("mlx-community/Qwen3-8B-", ("4bit", "6bit", "8bit", "bf16")),
        ("mlx-community/Qwen3-0.6B-", ("4bit", "8bit", "bf16")),
        ("mlx-community/Qwen3-30B-A3B-", ("4bit", "6bit", "8bit")),
        ("mlx-community/Llama-3.3-70B-Instruct-", ("4bit", "8bit")),
    ]:
        assert {stem + t for t in tags} <= set(ids)
    bits = {
        (entry(i).config.get("quantization") or {}).get("bits")
        for i in ids
        if i.startswith("mlx-community/Qwen3-8B-")
    }
    assert bits == {4, 6, 8, None}


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
    q = e.config.get("quantization")
    if q is None:
        return e.total_bytes
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


@pytest.mark.parametrize(
    ("repo_id", "published"),
    [
        ("mlx-community/Qwen3.5-9B-MLX-8bit", 10_426_433_504),
        # exo's model card for mlx-community/Qwen3.5-9B-4bit (and -8bit: 10,426,433,504 too).
        ("mlx-community/Qwen3.5-9B-4bit", 5_950_062_560),
    ],
)
def test_qwen35_mlx_is_text_plus_bf16_vision(repo_id: str, published: int) -> None:
    """The published mlx-community Qwen3.5-9B repos = mlx-lm's quantized text model +
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
    text = entry(repo_id).total_bytes
    assert text + 2 * vision == published


def test_lookup_is_case_insensitive() -> None:
    a = entry("mlx-community/Qwen3-8B-4bit")
    b = entry("MLX-COMMUNITY/qwen3-8b-4BIT")
    assert a == b and b.repo_id == "mlx-community/Qwen3-8B-4bit"


@pytest.mark.parametrize("repo_id", ["mlx-community/no-such-model", "", "Qwen3-8B-4bit"])
def test_unknown_is_none(repo_id: str) -> None:
    assert load_entry(repo_id) is None


def test_corrupt_manifest_raises(tmp_path: Path) -> None:
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
    assert catalog_ids(tmp_path) == ["org/bad", "org/sum"]
    for rid in ("org/bad", "org/sum"):
        with pytest.raises(SourceError) as err:
            load_entry(rid, tmp_path)
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
