"""Summarize a model's tensors: bytes by role and dtype, quantization, logical parameter count.

Everything is exact from tensor descriptors (safetensors headers or a catalog manifest) and
config.json; see MLX_MEMORY.md section 1 for the layout facts relied on here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlxfit.errors import ConfigError
from mlxfit.model.tensors import TensorInfo

# Module names (one dotted segment) of towers a text-only mlx-lm run drops in its sanitize().
# Matched as whole segments so "visual" never matches e.g. a hypothetical "nonvisual_gate".
VISION_SEGMENTS = frozenset(
    {
        "vision_tower",
        "vision_model",
        "vision_encoder",
        "visual",  # Qwen2-VL / Qwen2.5-VL / Qwen3-VL
        "multi_modal_projector",
        "mm_projector",
        "image_newline",
        "audio_tower",
        "audio_model",
        "audio_encoder",
        "embed_vision",  # Gemma 3n / Gemma 4
        "embed_audio",
    }
)
# The module holding the input token table, by family: Llama-likes, GPT-2/StarCoder,
# BLOOM/ChatGLM, InternLM, GPT-NeoX, Mamba/Nemotron-H.
EMBEDDING_MODULES = frozenset(
    {"embed_tokens", "wte", "word_embeddings", "tok_embeddings", "embed_in", "embeddings"}
)
# The output projection: "lm_head" nearly everywhere, GPT-NeoX "embed_out", InternLM "output".
LM_HEAD_MODULES = frozenset({"lm_head", "embed_out"})
LM_HEAD_TOP_LEVEL = frozenset({"output"})  # only as a whole top-level name: ".output" is common

# Defaults when a quantization block omits bits/group_size (mlx.core.quantize's per-mode defaults).
MODE_DEFAULTS: dict[str, tuple[int, int]] = {
    "affine": (4, 64),
    "mxfp4": (4, 32),
    "nvfp4": (4, 16),
    "mxfp8": (8, 32),
}
_AUX_SUFFIXES = (".scales", ".biases")


@dataclass(frozen=True)
class WeightsSummary:
    total_bytes: int  # what a text-only mlx-lm run loads (all_bytes when with_vision)
    all_bytes: int  # every tensor in the files
    by_dtype: dict[str, int]  # over the loaded tensors (sums to total_bytes)
    expert_bytes: int  # MoE experts among the loaded tensors
    vision_bytes: int  # vision/audio towers and projectors, loaded or not
    embedding_bytes: int  # input token table incl. its quantization scales/biases
    lm_head_bytes: int  # output head; 0 when tied to the embedding
    tied_embeddings: bool
    n_tensors: int  # every tensor in the files
    param_count: int  # logical parameters of the loaded tensors (packed weights unpacked)
    quant_mode: str | None  # "affine", "mxfp4", "nvfp4", "mxfp8"; None when not quantized
    quant_bits: int | None
    quant_group_size: int | None
    # module path -> {"bits", "group_size"} for per-path overrides (e.g. an 8-bit MoE router)
    quant_overrides: dict[str, dict[str, int]] = field(default_factory=dict)
    bits_per_weight: float | None = None  # over quantized modules only; None if there are none
    with_vision: bool = False
    # Logical parameters by role (prefill's matmul FLOPs: estimate/compute.py)
    expert_params: int = 0
    embedding_params: int = 0
    lm_head_params: int = 0
    lookup_params: int = 0
    # Dense parameters (no role above) of each decoder layer by its index ("layers.<i>."):
    # prefill computes only the first few, and layers differ in size (Gemma 3n/4's KV-shared
    # layers have double-wide MLPs; hybrids' linear-attention and attention layers)
    layer_dense_params: tuple[int, ...] = ()


# The decoder layer a tensor belongs to: "<prefix>.layers.<i>." (not an MTP head's layers)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def layer_index(name: str) -> int | None:
    """The decoder layer ``name`` belongs to; None outside the decoder layers."""
    m = _LAYER.search(name)
    if m is None or "mtp" in name.split(".") or is_vision(name):
        return None
    return int(m.group(1))


@dataclass(frozen=True)
class _Quant:
    mode: str
    bits: int
    group_size: int
    overrides: dict[str, dict[str, int]]


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


def is_vision(name: str) -> bool:
    return not VISION_SEGMENTS.isdisjoint(name.split("."))


def is_lookup_table(name: str) -> bool:
    """A per-layer lookup table (Gemma 3n/4 ``embed_tokens_per_layer``): decode gathers rows
    of it, it does not stream it (speed.WeightsRead.lookup_bytes)."""
    return "embed_tokens_per_layer" in name


def is_expert(name: str) -> bool:
    return ".experts." in name or "switch_mlp" in name


def _last_segment(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def is_embedding(name: str) -> bool:
    return _last_segment(_module(name)) in EMBEDDING_MODULES and not is_vision(name)


def is_lm_head(name: str) -> bool:
    module = _module(name)
    return _last_segment(module) in LM_HEAD_MODULES or module in LM_HEAD_TOP_LEVEL


def _int_field(block: dict[str, Any], key: str, default: int, where: str) -> int:
    v = block.get(key)
    if v is None:  # absent, or null as convert's mixed recipes write it: the default applies
        v = default
    if type(v) is not int or v <= 0:
        raise ConfigError(f"config.json: {where}.{key} must be a positive integer, got {v!r}")
    return v


def parse_quantization(config: dict[str, Any]) -> _Quant | None:
    """The mlx-lm quantization block, or None for a float model.

    MLX repos put it at the top level (also as "quantization_config"); a nested text_config
    copy is only a fallback. A transformers "quantization_config" (GPTQ, AWQ, fp8: it has
    "quant_method") is not MLX's and is ignored here.
    """
    block = config.get("quantization")
    if block is None:
        qc = config.get("quantization_config")
        if isinstance(qc, dict) and "quant_method" not in qc and "bits" in qc:
            block = qc
    if block is None and isinstance(config.get("text_config"), dict):
        block = config["text_config"].get("quantization")
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ConfigError(f"config.json: quantization must be an object, got {block!r}")
    mode = block.get("mode", "affine")  # files written before modes existed are affine
    if not isinstance(mode, str) or mode not in MODE_DEFAULTS:  # a list/dict is unhashable
        raise ConfigError(f"config.json: unknown quantization mode {mode!r}")
    d_bits, d_group = MODE_DEFAULTS[mode]
    bits = _int_field(block, "bits", d_bits, "quantization")
    group = _int_field(block, "group_size", d_group, "quantization")
    overrides: dict[str, dict[str, int]] = {}
    for path, o in block.items():
        # Per-path entries are dicts; `false` (leave unquantized) needs no bits.
        if isinstance(o, dict):
            where = f"quantization[{path!r}]"
            overrides[path] = {
                "bits": _int_field(o, "bits", bits, where),
                "group_size": _int_field(o, "group_size", group, where),
            }
    return _Quant(mode, bits, group, overrides)


def _unpacked(t: TensorInfo, quant: _Quant | None) -> int:
    """Logical weights in a packed U32 tensor: each 32-bit word holds 32/bits of them."""
    assert quant is not None  # summarize_weights refuses packed weights without a block
    bits = quant.overrides.get(_module(t.name), {}).get("bits", quant.bits)
    if (t.shape[-1] * 32) % bits:
        raise ConfigError(
            f"config.json: {bits}-bit quantization cannot unpack {t.name} "
            f"(U32 last dim {t.shape[-1]})"
        )
    logical = t.shape[-1] * 32 // bits
    for d in t.shape[:-1]:
        logical *= d
    return logical


def summarize_weights(
    tensors: Iterable[TensorInfo], config: dict[str, Any], with_vision: bool = False
) -> WeightsSummary:
    tensors = list(tensors)
    quant = parse_quantization(config)
    by_name = {t.name: t for t in tensors}

    # A quantized module is "<m>.weight" packed into U32 next to "<m>.scales"; its aux tensors
    # are quantization overhead, not parameters.
    packed = {
        _module(t.name)
        for t in tensors
        if t.name.endswith(".weight")
        and t.dtype == "U32"
        and t.shape
        and _module(t.name) + ".scales" in by_name
    }
    if packed and quant is None:
        example = min(packed)
        raise ConfigError(
            f"config.json: weights are quantized ({example}.weight is packed U32 with scales) "
            "but there is no quantization block"
        )

    all_bytes = total = experts = vision = embedding = head = params = 0
    by_role = {"expert": 0, "embedding": 0, "lm_head": 0, "lookup": 0}
    per_layer: dict[int, int] = {}
    q_bytes = q_weights = 0
    by_dtype: dict[str, int] = {}
    for t in tensors:
        all_bytes += t.nbytes
        if is_vision(t.name):
            vision += t.nbytes
            if not with_vision:
                continue
        total += t.nbytes
        by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
        if is_expert(t.name) and not is_vision(t.name):
            experts += t.nbytes
        if is_embedding(t.name):
            embedding += t.nbytes
        elif is_lm_head(t.name):
            head += t.nbytes

        is_weight = t.name.endswith(".weight")
        n = 0
        if _module(t.name) in packed and (is_weight or t.name.endswith(_AUX_SUFFIXES)):
            q_bytes += t.nbytes  # packed weight, scales, biases: a Linear's ".bias" is not here
            if is_weight:
                n = _unpacked(t, quant)
                q_weights += n
        else:
            n = 1
            for d in t.shape:
                n *= d
        params += n
        role = ("lookup" if is_lookup_table(t.name) else "embedding" if is_embedding(t.name)
                else "lm_head" if is_lm_head(t.name)
                else "expert" if is_expert(t.name) and not is_vision(t.name) else None)
        if role:
            by_role[role] += n
        elif n and (i := layer_index(t.name)) is not None:
            per_layer[i] = per_layer.get(i, 0) + n

    return WeightsSummary(
        total_bytes=total,
        all_bytes=all_bytes,
        by_dtype=dict(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        expert_bytes=experts,
        vision_bytes=vision,
        embedding_bytes=embedding,
        lm_head_bytes=head,
        # Tied means the files hold no output head: mlx-lm then reuses the embedding table.
        tied_embeddings=head == 0 and embedding > 0,
        n_tensors=len(tensors),
        param_count=params,
        quant_mode=quant.mode if quant else None,
        quant_bits=quant.bits if quant else None,
        quant_group_size=quant.group_size if quant else None,
        quant_overrides=dict(quant.overrides) if quant else {},
        bits_per_weight=q_bytes * 8 / q_weights if q_weights else None,
        with_vision=with_vision,
        expert_params=by_role["expert"],
        embedding_params=by_role["embedding"],
        lm_head_params=by_role["lm_head"],
        lookup_params=by_role["lookup"],
        layer_dense_params=tuple(per_layer.get(i, 0) for i in range(max(per_layer, default=-1) + 1)),
    )
