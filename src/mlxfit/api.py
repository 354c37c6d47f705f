"""The Python twins of the CLI verbs. Each gathers its inputs at the edges (model source,
machine, calibration) and calls the pure core."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from mlxfit.calibration import Calibration, load_calibration
from mlxfit.config import parse_config
from mlxfit.core import FitResult, fit_core
from mlxfit.errors import MachineError, UsageError
from mlxfit.memory import Run
from mlxfit.speed import WeightsRead
from mlxfit.tensors import DTYPE_BYTES, TensorInfo

USER_CALIBRATION = Path("~/.config/mlxfit/calibration.toml")
_FLOAT_DTYPES = ("BF16", "F16", "F32")


def activation_bytes(tensors: tuple[TensorInfo, ...] | list[TensorInfo]) -> int:
    """Width of the dtype the model computes in: mlx-lm keeps activations (and so the KV
    cache) in the dtype of the embedding output, i.e. the embedding table or, when it is
    quantized, its scales. Falls back to the most common float dtype."""
    by_name = {t.name: t for t in tensors}
    for t in tensors:
        if t.name.endswith("embed_tokens.weight") or t.name.endswith("wte.weight"):
            if t.dtype in _FLOAT_DTYPES:
                return DTYPE_BYTES[t.dtype]
            scales = by_name.get(t.name[: -len("weight")] + "scales")
            if scales is not None and scales.dtype in _FLOAT_DTYPES:
                return DTYPE_BYTES[scales.dtype]
    counts: Counter[str] = Counter()
    for t in tensors:
        if t.dtype in _FLOAT_DTYPES:
            counts[t.dtype] += t.nbytes
    return DTYPE_BYTES[counts.most_common(1)[0][0]] if counts else 2


def _machine(machine: str | None, memory_budget_gb: float | None, macos: int | None):
    from mlxfit import machine as mach

    if machine:
        m = mach.resolve_machine(machine, macos_major=macos or 26)
    else:
        m = mach.probe_machine(macos_major=macos)
    if memory_budget_gb is not None:
        if not memory_budget_gb > 0 or memory_budget_gb > 1e6:
            raise UsageError(f"--memory-budget must be a positive number of GB, got {memory_budget_gb}")
        m = mach.machine_with_budget(m, int(memory_budget_gb * 1e9))
    return m


def fit(
    model: str,
    ctx: int = 8192,
    *,
    machine: str | None = None,
    memory_budget_gb: float | None = None,
    macos: int | None = None,
    revision: str | None = None,
    gen: int = 0,
    prefill_step_size: int = 2048,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = 5000,
    max_kv_size: int | None = None,
    backend: str = "metal",
    with_vision: bool = False,
    calibration: Calibration | None = None,
) -> FitResult:
    """Will ``model`` run a ``ctx``-token generation with mlx-lm on this (or the named) Mac?"""
    from mlxfit.sources import resolve_model
    from mlxfit.weights import summarize_weights

    run = Run(ctx=ctx, gen=gen, prefill_step=prefill_step_size, kv_bits=kv_bits,
              kv_group=kv_group_size, quantized_kv_start=quantized_kv_start,
              max_kv_size=max_kv_size, backend=backend)
    src = resolve_model(model, revision=revision)
    where = f"{src.location}/config.json" if src.kind != "catalog" else f"{src.name} (catalog)"
    w = summarize_weights(src.tensors, src.config, with_vision=with_vision)
    cfg = parse_config(src.config, act_bytes=activation_bytes(src.tensors), where=where)
    m = _machine(machine, memory_budget_gb, macos)
    cal = calibration or load_calibration(USER_CALIBRATION.expanduser())
    warnings: list[str] = []
    notes = list(src.notes) + list(m.notes)
    if w.vision_bytes and not with_vision:
        notes.append(f"vision/audio towers ({w.vision_bytes / 1e9:.2f} GB) excluded: mlx-lm "
                     "drops them for text generation (--with-vision to count them)")
    if cal.source != "calibration.toml":
        notes.append(f"calibration: {cal.source}")
    if m.unverified and m.is_apple_silicon:
        warnings.append(f"{m.name}: some figures in the SKU table are unverified")
    wr = WeightsRead(total_bytes=w.total_bytes, expert_bytes=w.expert_bytes,
                     embedding_bytes=w.embedding_bytes, tied_embeddings=w.tied_embeddings)
    result = fit_core(
        model=src.name, source_kind=src.kind, cfg=cfg, weights=wr, run=run, cal=cal,
        machine_name=m.name, ram_bytes=m.ram_bytes, bandwidth_gbs=m.bandwidth_gbs,
        usable_bytes=m.usable_bytes, usable_source=m.usable_source,
        warnings=tuple(warnings), notes=tuple(notes), weights_detail=weights_detail(w),
    )
    return result


def weights_detail(w) -> dict:
    """The weights breakdown the report and JSON show (all exact, from headers)."""
    return {
        "total_bytes": w.total_bytes,
        "by_dtype": dict(w.by_dtype),
        "expert_bytes": w.expert_bytes,
        "vision_bytes": w.vision_bytes,
        "vision_counted": w.with_vision,
        "embedding_bytes": w.embedding_bytes,
        "lm_head_bytes": w.lm_head_bytes,
        "tied_embeddings": w.tied_embeddings,
        "param_count": w.param_count,
        "n_tensors": w.n_tensors,
        "quantization": None if w.quant_mode is None else {
            "mode": w.quant_mode, "bits": w.quant_bits, "group_size": w.quant_group_size,
            "overrides": len(w.quant_overrides),
            "bits_per_weight": round(w.bits_per_weight, 4) if w.bits_per_weight else None,
        },
    }


def weights_summary(model: str, revision: str | None = None, with_vision: bool = False):
    """The exact weights breakdown of a model (no machine, no context)."""
    from mlxfit.sources import resolve_model
    from mlxfit.weights import summarize_weights

    src = resolve_model(model, revision=revision)
    return src, summarize_weights(src.tensors, src.config, with_vision=with_vision)


__all__ = ["fit", "weights_summary", "activation_bytes", "MachineError"]
