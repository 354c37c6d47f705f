"""What the estimate needs of one model, built from a ModelSource: the parsed config, the
weights read per decoded token, the weights breakdown, and the activation dtype."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from mlxfit.model.config import ModelConfig
from mlxfit.model.convert_rules import loaded_tensors
from mlxfit.model.crosscheck import check_dims
from mlxfit.model.parse import parse_config
from mlxfit.model.quantize import ConversionPlan
from mlxfit.model.tensors import DTYPE_BYTES, FLOAT_DTYPES, TensorInfo
from mlxfit.model.weights import is_lookup_table, is_vision, summarize_weights


def activation_bytes(tensors: tuple[TensorInfo, ...] | list[TensorInfo]) -> int:
    """Width of the dtype the model computes in: mlx-lm keeps activations (and so the KV
    cache) in the dtype of the embedding output, i.e. the embedding table or, when it is
    quantized, its scales. Falls back to the most common float dtype."""
    by_name = {t.name: t for t in tensors}
    for t in tensors:
        if t.name.endswith("embed_tokens.weight") or t.name.endswith("wte.weight"):
            if t.dtype in FLOAT_DTYPES:
                return DTYPE_BYTES[t.dtype]
            scales = by_name.get(t.name[: -len("weight")] + "scales")
            if scales is not None and scales.dtype in FLOAT_DTYPES:
                return DTYPE_BYTES[scales.dtype]
    counts: Counter[str] = Counter()
    for t in tensors:
        if t.dtype in FLOAT_DTYPES:
            counts[t.dtype] += t.nbytes
    return DTYPE_BYTES[counts.most_common(1)[0][0]] if counts else 2


@dataclass(frozen=True)
class ModelInputs:
    """What fit_core needs from a model, built once from its source: the matrix and pick verbs
    reuse it for many machines (the numbers are then those of ``fit`` by construction)."""

    name: str
    source_kind: str
    cfg: ModelConfig
    weights: WeightsRead
    weights_detail: WeightsDetail
    vision_bytes: int
    with_vision: bool
    source_notes: tuple[str, ...] = ()


def held_tensors(src, with_vision: bool = False) -> tuple[TensorInfo, ...]:
    """The tensors mlx-lm holds once it loaded ``src``: its sanitize replayed (an HF-layout
    checkpoint's FP8 dequantized, MTP layers and towers dropped). With the towers asked for
    (another loader, such as mlx-vlm's, keeps them), the tensors as stored."""
    if with_vision or getattr(src, "as_loaded", False):
        return tuple(src.tensors)
    return loaded_tensors(src.tensors, src.config)


def model_inputs(src, with_vision: bool = False) -> ModelInputs:
    """A ModelSource (folder, hf-cache snapshot or catalog entry) -> the model's fit inputs."""
    where = f"{src.location}/config.json" if src.kind != "catalog" else f"{src.name} (catalog)"
    tensors = held_tensors(src, with_vision)
    w = summarize_weights(tensors, src.config, with_vision=with_vision)
    cfg = parse_config(src.config, act_bytes=activation_bytes(tensors), where=where)
    check_dims(cfg, tensors, src.config, where)  # a config its own weights contradict
    lookup = sum(t.nbytes for t in tensors if is_lookup_table(t.name))
    wr = WeightsRead(total_bytes=w.total_bytes, expert_bytes=w.expert_bytes,
                     embedding_bytes=w.embedding_bytes, tied_embeddings=w.tied_embeddings,
                     lookup_bytes=lookup, params=MatmulParams.of(w))
    detail = weights_detail(w, download_bytes=getattr(src, "download_bytes", None),
                            download_at_least=getattr(src, "download_at_least", False))
    return ModelInputs(name=src.name, source_kind=src.kind, cfg=cfg, weights=wr,
                       weights_detail=detail, vision_bytes=w.vision_bytes,
                       with_vision=with_vision, source_notes=tuple(src.notes))


def model_arrays(src, with_vision: bool = False) -> tuple:
    """The model's largest weight arrays (for the maxBufferLength check)."""
    return weight_buffers(held_tensors(src, with_vision),
                          keep=lambda n: with_vision or not is_vision(n))


@dataclass(frozen=True)
class WeightsQuantization:
    """The checkpoint's own quantization, from its config and headers."""

    mode: str  # "affine", "mxfp4", ...
    bits: int | None
    group_size: int | None
    overrides: int  # modules with their own bits/group size
    bits_per_weight: float | None  # rounded to 4 decimals; None when unknown


@dataclass(frozen=True)
class WeightsDetail:
    """The weights breakdown the report and JSON show (all exact, from headers); the JSON's
    "weights" object is render.fit.weights_to_json."""

    total_bytes: int
    by_dtype: dict[str, int]
    expert_bytes: int
    vision_bytes: int
    vision_counted: bool
    embedding_bytes: int
    lm_head_bytes: int
    tied_embeddings: bool
    param_count: int
    n_tensors: int
    quantization: WeightsQuantization | None
    download_bytes: int | None = None  # a Hub or catalog model's download; None if unknown
    download_at_least: bool = False  # download_bytes is a lower bound (the catalog's)
    conversion: ConversionPlan | None = None  # the conversion sized (--q-bits ...), if any


def weights_detail(w, download_bytes: int | None = None,
                   download_at_least: bool = False) -> WeightsDetail:
    """A WeightsSummary's breakdown as the report and JSON show it."""
    return WeightsDetail(
        total_bytes=w.total_bytes,
        by_dtype=dict(w.by_dtype),
        expert_bytes=w.expert_bytes,
        vision_bytes=w.vision_bytes,
        vision_counted=w.with_vision,
        embedding_bytes=w.embedding_bytes,
        lm_head_bytes=w.lm_head_bytes,
        tied_embeddings=w.tied_embeddings,
        param_count=w.param_count,
        n_tensors=w.n_tensors,
        quantization=None if w.quant_mode is None else WeightsQuantization(
            mode=w.quant_mode, bits=w.quant_bits, group_size=w.quant_group_size,
            overrides=len(w.quant_overrides),
            bits_per_weight=round(w.bits_per_weight, 4) if w.bits_per_weight else None),
        download_bytes=download_bytes,
        download_at_least=download_at_least,
    )


@dataclass(frozen=True)
class WeightsRead:
    """What a decode step must read of the weights (from the weights summary)."""

    total_bytes: int
    expert_bytes: int
    embedding_bytes: int
    tied_embeddings: bool
    lookup_bytes: int = 0  # other row-gathered tables (Gemma 3n/4 embed_tokens_per_layer)
    # What prefill multiplies (estimate/compute.py); None when the tensors were not counted.
    params: MatmulParams | None = None


@dataclass(frozen=True)
class MatmulParams:
    """Logical parameters by role and the weights' format: the matmul FLOPs of a token."""

    total: int
    experts: int = 0
    embedding: int = 0
    lm_head: int = 0
    lookup: int = 0
    fmt: str = "bf16"  # "bf16" (any float), "affine4" (affine + bits), "mxfp4", "nvfp4", "mxfp8"
    layer_dense: tuple[int, ...] = ()  # dense parameters of each decoder layer (by index)

    @classmethod
    def of(cls, w) -> MatmulParams:
        """From a ``WeightsSummary``."""
        if w.quant_mode is None:
            fmt = "bf16"
        elif w.quant_mode == "affine":
            fmt = f"affine{w.quant_bits}"
        else:
            fmt = w.quant_mode
        return cls(total=w.param_count, experts=w.expert_params, embedding=w.embedding_params,
                   lm_head=w.lm_head_params, lookup=w.lookup_params, fmt=fmt,
                   layer_dense=w.layer_dense_params)


@dataclass(frozen=True)
class Buffer:
    """One array that Metal allocates as a single buffer."""

    name: str
    bytes: int
    what: str


def weight_buffers(tensors: tuple[TensorInfo, ...] | list[TensorInfo], *, keep=lambda n: True,
                   label: str = "weight") -> tuple[Buffer, ...]:
    """The largest weight arrays. Per-expert tensors of an unconverted checkpoint
    (``experts.<i>.``) are stacked into one array per layer and projection by mlx-lm's
    sanitize(), so they count as their sum."""
    sums: dict[str, int] = {}
    for t in tensors:
        if not keep(t.name):
            continue
        key = re.sub(r"\.experts\.\d+\.", ".experts.*.", t.name)
        sums[key] = sums.get(key, 0) + t.nbytes
    top = sorted(sums.items(), key=lambda kv: -kv[1])[:3]
    return tuple(Buffer(f"{label} {name}", b,
                        "experts stacked by mlx-lm at load" if "experts.*" in name
                        else "one tensor, loaded as one array") for name, b in top)
