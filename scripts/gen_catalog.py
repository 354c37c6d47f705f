#!/usr/bin/env python
"""Regenerate mlxfit's built-in catalog: src/mlxfit/catalog_data/<org>__<name>.json.gz.

Each descriptor is what `mlx_lm.convert` would write for a model, minus the weight data:
the saved config.json and, for every tensor, its name, safetensors dtype and shape.
Instead of re-implementing mlx-lm's layer layout we build the model with mlx-lm's OWN
classes and quantize it with mlx-lm's OWN `quantize_model` (which applies the model's
`quant_predicate`, e.g. MoE routers kept at 8 bits), on the CPU. MLX is lazy: the random
initial weights and their quantized forms are never evaluated, so reading names, shapes and
dtypes costs milliseconds and almost no memory even for an 80B model.

What `convert` does, step by step, and how we mirror it without any checkpoint:
  1. load_model: build Model(ModelArgs.from_dict(config)); if the checkpoint is already
     quantized (gpt-oss ships MXFP4 experts), quantize the modules that have scales in the
     checkpoint; sanitize the weights and load them with strict=True. Strict loading means
     the saved tensors are exactly the model's parameter tree, so we feed sanitize() a
     stand-in checkpoint made of the model's own lazy parameters (in the checkpoint's dtypes,
     declared per entry) and let it adjust the module (e.g. gemma3 drops an absent lm_head).
  2. Cast floating parameters to config `torch_dtype` (or text_config `dtype`), honouring
     the model's `cast_predicate`.
  3. quantize_model(model, config, group_size, bits, mode) and save_config().

Known limits (documented so nobody trusts more than is true):
  * The config is the base config with convert's edits; convert also copies
    generation_config.json's eos_token_id into config.json, which we cannot know here.
  * Vision towers: mlx-lm's text models drop them in sanitize(), so `mlx_lm.convert` output
    has none. Repos converted with mlx-vlm (most mlx-community VLM repos) are larger.

Usage:  /work/devenv/bin/python scripts/gen_catalog.py [repo_id ...]
"""

from __future__ import annotations

import copy
import fnmatch
import gzip
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
from mlx import nn
from mlx.utils import tree_flatten, tree_map_with_path
from mlx_lm.convert import MODEL_CONVERSION_DTYPES
from mlx_lm.utils import _get_classes, quantize_model, save_config

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).resolve().parent / "catalog_configs"
OUT = ROOT / "src" / "mlxfit" / "catalog_data"

# MLX dtype -> safetensors dtype name (what mx.save_safetensors writes in the header).
ST_DTYPE = {
    mx.bool_: "BOOL",
    mx.uint8: "U8",
    mx.int8: "I8",
    mx.uint16: "U16",
    mx.int16: "I16",
    mx.float16: "F16",
    mx.bfloat16: "BF16",
    mx.uint32: "U32",
    mx.int32: "I32",
    mx.float32: "F32",
    mx.uint64: "U64",
    mx.int64: "I64",
    mx.complex64: "C64",
}


@dataclass(frozen=True)
class Entry:
    repo_id: str  # the converted repo this descriptor stands for
    base: str  # file in scripts/catalog_configs/
    description: str
    bits: int | None = None  # None: not quantized (convert without -q)
    group_size: int | None = None  # None: mlx-lm's default for the mode
    mode: str = "affine"
    # dtype of floating tensors in the source checkpoint; only visible in the output where
    # convert does not recast (cast_predicate False, or no torch_dtype in the config).
    checkpoint_dtype: str = "bfloat16"
    # Parameter-name suffixes the source checkpoint stores as float32 (e.g. Qwen3.5 A_log,
    # which its cast_predicate keeps out of the cast, so F32 survives into the MLX files).
    float32_in_checkpoint: tuple[str, ...] = ()
    # Tensors the model class creates but the source checkpoint does not hold (e.g. Gemma 3
    # ties lm_head to the embeddings without saying so in its config).
    checkpoint_lacks: tuple[str, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)  # applied to the base config


ENTRIES: list[Entry] = [
    Entry(
        "mlx-community/Qwen3-8B-4bit",
        "Qwen__Qwen3-8B.json",
        "Qwen3-8B, mlx-lm affine 4-bit, group 64.",
        bits=4,
        group_size=64,
    ),
    Entry(
        "mlx-community/Llama-3.1-8B-Instruct-4bit",
        "meta-llama__Meta-Llama-3.1-8B.json",
        "Llama 3.1 8B Instruct, mlx-lm affine 4-bit, group 64. Built from the Meta-Llama-3.1-8B"
        " base config: the Instruct model has identical dimensions (only eos_token_id differs).",
        bits=4,
        group_size=64,
    ),
    Entry(
        "mlx-community/Qwen3-30B-A3B-4bit",
        "Qwen__Qwen3-30B-A3B.json",
        "Qwen3-30B-A3B MoE (128 experts, 8 active), mlx-lm affine 4-bit, group 64;"
        " routers (mlp.gate) at 8 bits as mlx-lm keeps them.",
        bits=4,
        group_size=64,
    ),
    Entry(
        "mlx-community/gemma-3-27b-it-4bit",
        "google__medgemma-27b-it.json",
        "Gemma 3 27B IT, text-only as mlx-lm converts it (the SigLIP vision tower is"
        " dropped), affine 4-bit, group 64. Dimensions from the medgemma-27b-it config, which"
        " is the Gemma 3 27B architecture.",
        bits=4,
        group_size=64,
        checkpoint_lacks=("language_model.lm_head.weight",),
    ),
    Entry(
        "mlx-community/gpt-oss-20b-MXFP4-Q8",
        "openai__gpt-oss-20b.json",
        "gpt-oss-20b: experts kept in MXFP4 as published, every other linear/embedding"
        " quantized by mlx-lm to affine 8-bit group 64 (routers 8-bit group 64).",
        bits=8,
        group_size=64,
    ),
    Entry(
        "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit",
        "Qwen__Qwen3-Next-80B-A3B-Thinking.json",
        "Qwen3-Next-80B-A3B Instruct (hybrid Gated DeltaNet + attention, 512 experts),"
        " affine 4-bit group 64, routers and shared-expert gates at 8 bits. Built from the"
        " Thinking config: same dimensions.",
        bits=4,
        group_size=64,
    ),
    # Calibration set: one architecture at three precisions, dense and MoE.
    *[
        Entry(
            f"mlx-community/Qwen3-4B-Instruct-2507-{tag}",
            "Qwen__Qwen3-4B__variant.json",
            f"Qwen3-4B-Instruct-2507, {what}. Qwen3-4B dimensions with the 2507 long context"
            " (262144 positions, rope_theta 5e6); tied embeddings.",
            bits=bits,
            group_size=64 if bits else None,
            overrides={
                "max_position_embeddings": 262144,
                "rope_theta": 5000000,
                "tie_word_embeddings": True,
            },
        )
        for tag, bits, what in [
            ("4bit", 4, "mlx-lm affine 4-bit, group 64"),
            ("8bit", 8, "mlx-lm affine 8-bit, group 64"),
            ("bf16", None, "unquantized bfloat16"),
        ]
    ],
    *[
        Entry(
            f"mlx-community/Qwen3-30B-A3B-Instruct-2507-{b}bit",
            "Qwen__Qwen3-30B-A3B.json",
            f"Qwen3-30B-A3B-Instruct-2507 MoE, mlx-lm affine {b}-bit group 64, routers at"
            " 8 bits. Qwen3-30B-A3B dimensions with the 2507 long context (262144 positions,"
            " rope_theta 1e7).",
            bits=b,
            group_size=64,
            overrides={"max_position_embeddings": 262144, "rope_theta": 10000000},
        )
        for b in (4, 8)
    ],
    # Reproductions of real repositories whose total_size is known (checked in the tests).
    # mlx-lm loads meta-llama/Llama-3.2-3B as published: same tensors as a bf16 conversion.
    Entry(
        "meta-llama/Llama-3.2-3B",
        "meta-llama__Llama-3.2-3B.json",
        "Llama 3.2 3B base, bfloat16, unquantized (mlx-lm loads the published weights as is;"
        " tied embeddings, so no lm_head).",
    ),
    Entry(
        "LiquidAI/LFM2.5-1.2B-Instruct-mlx-4bit",
        "LiquidAI__LFM2.5-1.2B-Instruct-mlx-4bit.json",
        "LFM2.5-1.2B-Instruct (hybrid short-conv + attention), mlx-lm affine 4-bit, group 64.",
        bits=4,
        group_size=64,
    ),
    Entry(
        "mlx-community/Qwen3.5-9B-MLX-8bit",
        "mlx-community__Qwen3.5-9B-MLX-8bit.json",
        "Qwen3.5-9B (hybrid Gated DeltaNet + attention), mlx-lm affine 8-bit, group 64:"
        " the text model mlx-lm loads. The published repo also stores the bf16 vision tower"
        " (912,020,960 bytes) that mlx-lm drops on load; it is not listed here.",
        bits=8,
        group_size=64,
        float32_in_checkpoint=("A_log",),
    ),
]


def load_base(entry: Entry) -> dict[str, Any]:
    config = json.loads((CONFIGS / entry.base).read_text())
    # A base taken from an MLX conversion carries mlx-lm's own quantization block (no
    # quant_method); drop it so the entry's quantization is the only one. A Hugging Face
    # quantization_config (with quant_method, e.g. gpt-oss MXFP4) describes the checkpoint
    # itself and stays: load_model acts on it.
    qc = config.get("quantization_config")
    if "quantization" in config or (isinstance(qc, dict) and "quant_method" not in qc):
        config.pop("quantization", None)
        config.pop("quantization_config", None)
    config.update(entry.overrides)
    return config


def apply_checkpoint_quantization(model: nn.Module, config: dict[str, Any]) -> None:
    """What load_model does for a checkpoint published already quantized (MXFP4 only here).

    load_model quantizes exactly the modules that have `.scales` in the checkpoint. For an
    HF MXFP4 checkpoint those are the linear layers *not* in modules_to_not_convert.
    """
    qc = config.get("quantization_config")
    if not isinstance(qc, dict) or "quant_method" not in qc:
        return
    if qc["quant_method"] != "mxfp4":
        raise SystemExit(f"unsupported checkpoint quant_method {qc['quant_method']!r}")
    skip = qc.get("modules_to_not_convert", [])
    quantization = {"group_size": 32, "bits": 4, "mode": "mxfp4"}
    config["quantization"] = dict(quantization)  # as load_model rewrites it
    config["quantization_config"] = dict(quantization)

    def in_checkpoint_as_mxfp4(path: str, module: nn.Module) -> bool:
        if not hasattr(module, "to_quantized"):
            return False
        return not any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p + ".*") for p in skip)

    nn.quantize(model, 32, 4, mode="mxfp4", class_predicate=in_checkpoint_as_mxfp4)


def build(entry: Entry) -> tuple[dict[str, Any], list[list[Any]], int]:
    config = load_base(entry)
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    apply_checkpoint_quantization(model, config)

    # load_model sanitizes the checkpoint, then loads it with strict=True. Stand-in checkpoint:
    # the model's own lazy tree in the checkpoint's dtypes, minus tensors the source lacks.
    # sanitize() may still reshape the module (gemma3 drops lm_head when the checkpoint has
    # none), and the strict load proves names and shapes agree.
    ckpt = getattr(mx, entry.checkpoint_dtype)

    def as_stored(k: str, v: mx.array) -> mx.array:
        if not mx.issubdtype(v.dtype, mx.floating):
            return v  # packed MXFP4 weights and scales
        return v.astype(mx.float32 if k.endswith(entry.float32_in_checkpoint) else ckpt)

    weights = {
        k: as_stored(k, v)
        for k, v in tree_flatten(model.parameters())
        if k not in entry.checkpoint_lacks
    }
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)
    model.load_weights(list(weights.items()), strict=True)

    # convert's cast: torch_dtype, else text_config.dtype; skipped when neither is usable.
    dtype = config.get("torch_dtype") or config.get("text_config", {}).get("dtype")
    if dtype in MODEL_CONVERSION_DTYPES:
        target = getattr(mx, dtype)
        keep = getattr(model, "cast_predicate", lambda _: True)

        def cast(k: str, v: mx.array) -> mx.array:
            return v.astype(target) if keep(k) and mx.issubdtype(v.dtype, mx.floating) else v

        model.update(tree_map_with_path(cast, model.parameters()))

    if entry.bits is not None:
        model, config = quantize_model(model, config, entry.group_size, entry.bits, mode=entry.mode)

    # save_config drops vision_config (unless a vision tower is kept), mirrors quantization
    # into quantization_config and sorts the keys; run the real thing and read it back.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        save_config(
            copy.deepcopy(config),
            path,
            keep_vision_config="vision_tower" in getattr(model, "model", {}),
        )
        saved = json.loads(path.read_text())

    # Names, dtypes, shapes and nbytes are all known without evaluating anything.
    params = sorted(tree_flatten(model.parameters()), key=lambda kv: kv[0])
    tensors = [[k, ST_DTYPE[v.dtype], list(v.shape)] for k, v in params]
    total = sum(v.nbytes for _, v in params)
    return saved, tensors, total


def write(entry: Entry, config: dict[str, Any], tensors: list[list[Any]], total: int) -> Path:
    doc = {
        "schema": 1,
        "repo_id": entry.repo_id,
        "description": entry.description,
        "generated_by": {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__},
        "config": config,
        "tensors": tensors,
        "total_bytes": total,
    }
    path = OUT / (entry.repo_id.replace("/", "__") + ".json.gz")
    raw = json.dumps(doc, separators=(",", ":")).encode()
    # mtime=0 keeps the bytes reproducible, so regenerating shows no spurious git diff.
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(raw)
    return path


def main(argv: list[str]) -> int:
    mx.set_default_device(mx.cpu)  # no GPU needed; nothing is evaluated anyway
    wanted = {a.lower() for a in argv}
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for entry in ENTRIES:
        if wanted and entry.repo_id.lower() not in wanted:
            continue
        t = time.perf_counter()
        config, tensors, total = build(entry)
        path = write(entry, config, tensors, total)
        print(
            f"{entry.repo_id:50s} {len(tensors):6d} tensors {total:>16,d} B "
            f"{path.stat().st_size / 1024:7.1f} KiB {time.perf_counter() - t:5.2f}s"
        )
    print(f"done in {time.perf_counter() - start:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
