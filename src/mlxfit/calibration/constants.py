"""The calibration constants: calibration.toml shipped with the package, optionally overridden
by a user file (~/.config/mlxfit/calibration.toml). Pure data; loading is at the edge."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields
from typing import Any

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass

from mlxfit.calibration.bands import BandTable, parse_bands
from mlxfit.errors import MlxfitError, UsageError


@dataclass(frozen=True)
class Backend:
    """Transient-memory constants of one MLX backend (see calibration.toml for sources)."""

    fused_decode_head_dims: tuple[int, ...]
    score_arrays: float
    sink_score_arrays: float
    softcap_score_arrays: float
    quantized_score_arrays: float
    mla_score_arrays: float
    mla_kv_arrays: float
    index_score_arrays: float
    act_hidden: float
    act_ffn: float
    act_q: float
    act_moe: float
    act_kv: float
    act_floor: float  # Max and Ultra GPUs (drain class 'big')
    act_floor_small: float  # base and Pro GPUs
    act_floor_m5: float  # M5 GPUs
    act_floor_tokens: float
    cb_inflight: float
    act_linear: float
    bf16_act_bytes: float
    ssd_square: float
    ssd_token: float
    linear_fallback: float
    wkv_fallback: float
    gla_scan: float
    rglru_arrays: float
    growth_copy_layers: float
    base_bytes: float


@dataclass(frozen=True)
class Decode:
    eta: float
    fixed_s: float
    per_layer_s: float
    per_moe_layer_s: float
    # per layer whose decode attention is MLX's unfused fallback (MLA, softcap, head dims
    # without sdpa_vector): its separate matmul / softmax / matmul dispatches
    per_unfused_layer_s: float
    # fraction of the chip's matmul peak the unfused fallback's two matmuls reach at decode
    # (their FLOPs, 2 x heads x (key + value width) per key, bound MLA on chips without NAX)
    unfused_flops_eff: float
    expert_eta: float  # gather_qmv over the routed experts a token touches
    kv_eta: float  # fused decode attention (sdpa_vector) reading the KV cache
    unfused_eta: float  # unfused decode attention: fallback matmuls, softmax, MLA latent
    gqa_ultra: float
    ultra_eta: float
    batch_per_layer_s: float  # BatchGenerator's decode path, sequences > 1 (estimate/batched.py)


@dataclass(frozen=True)
class Prefill:
    """Prompt-processing constants (calibration.toml [prefill]; estimate/compute.py)."""

    # Fraction of the chip's peak matmul FLOP/s that MLX's (quantized) matmul reaches, by format
    eff_bf16: float
    eff_affine2: float
    eff_affine3: float
    eff_affine4: float
    eff_affine5: float
    eff_affine6: float
    eff_affine8: float
    eff_mxfp4: float
    eff_nvfp4: float
    eff_mxfp8: float
    expert_eff: float  # gather_qmm over routed experts relative to a dense matmul
    neural_accel_eff: float  # M5 Neural Accelerators: fraction of their peak, on top of eff_*
    attn_eff: float  # fused causal SDPA: fraction of the shader-ALU peak
    attn_unfused_eff: float  # scores materialized (head dims without a fused kernel, masks)
    # fraction of the bandwidth unfused attention's traffic reaches (score arrays' crossings,
    # MLA's rebuilt K/V)
    score_eta: float
    scan_eff: float  # gated-delta / SSM scans
    # fraction of the bandwidth a chunk's weight stream reaches (dense weights + the union of
    # experts the chunk routes to): prefill-shaped quantized matmuls re-read weight tiles
    chunk_read_eta: float
    per_layer_chunk_s: float  # fixed cost per computed layer per chunk
    # per routed expert a chunk touches, per MoE layer: the gather matmul's padded row tile
    per_expert_chunk_s: float
    ultra_compute: float  # two-die Ultra chips: fraction of the summed cores' compute
    # a prefill that starts on an idle GPU (compute.cold_gpu_seconds): the parked clock's
    # slowdown, the most seconds the ramp costs, and the fraction of the bandwidth the first
    # chunk's weight stream reaches after the idle spell
    cold_gpu_slowdown: float
    cold_gpu_lost_s: float
    cold_read_eta: float
    watchdog_layer_s: float  # one layer of one chunk: past it macOS's GPU watchdog has killed runs


@dataclass(frozen=True)
class Calibration:
    backends: dict[str, Backend]
    decode: Decode
    source: str
    prefill: Prefill | None = None
    # The band table (data/bands.toml, issue 27); None: point estimates only (no bands)
    bands: BandTable | None = None

    def backend(self, name: str) -> Backend:
        try:
            return self.backends[name]
        except KeyError:
            raise UsageError(
                f"backend {name!r}: unknown (known: {', '.join(sorted(self.backends))})",
                param="backend",
            ) from None


# Constants that divide or scale a whole prediction: zero would be nonsense, not a bound.
_POSITIVE = frozenset({"eta", "ultra_eta", "expert_eta", "kv_eta", "unfused_eta", "bf16_act_bytes", "act_floor_tokens",
                       "eff_bf16", "eff_affine2", "eff_affine3", "eff_affine4", "eff_affine5",
                       "eff_affine6", "eff_affine8", "eff_mxfp4", "eff_nvfp4", "eff_mxfp8",
                       "expert_eff", "neural_accel_eff", "attn_eff", "attn_unfused_eff",
                       "scan_eff", "score_eta", "chunk_read_eta", "ultra_compute", "watchdog_layer_s",
                       "cold_gpu_slowdown", "cold_read_eta"})


def _number(v: Any, name: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise MlxfitError(f"{where}: '{name}' must be a finite number, got {v!r}")
    if v < 0 or (v == 0 and name in _POSITIVE):
        bound = "positive" if name in _POSITIVE else "zero or more"
        raise MlxfitError(f"{where}: '{name}' must be {bound}, got {v!r}")
    return float(v)


def _build(cls: type, table: Any, where: str) -> Any:
    if not isinstance(table, dict):
        raise MlxfitError(f"{where}: must be a table of constants")
    kwargs: dict[str, Any] = {}
    for fld in fields(cls):
        if fld.name not in table:
            raise MlxfitError(f"{where}: missing calibration constant '{fld.name}'")
        v = table[fld.name]
        if isinstance(v, list):
            if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
                raise MlxfitError(f"{where}: '{fld.name}' must be a list of positive integers")
            kwargs[fld.name] = tuple(v)
        else:
            kwargs[fld.name] = _number(v, fld.name, where)
    return cls(**kwargs)


def parse_calibration(doc: dict[str, Any], where: str) -> Calibration:
    tables = doc.get("backend", {})
    if not isinstance(tables, dict):
        raise MlxfitError(f"{where}: [backend] must be a table of backends")
    backends = {
        name: _build(Backend, tbl, f"{where} [backend.{name}]") for name, tbl in tables.items()
    }
    decode = _build(Decode, doc.get("decode", {}), f"{where} [decode]")
    prefill = (_build(Prefill, doc["prefill"], f"{where} [prefill]")
               if "prefill" in doc else None)
    bands = doc.get("bands")
    return Calibration(backends=backends, decode=decode, source=where, prefill=prefill,
                       bands=parse_bands(bands, f"{where} [bands]")
                       if isinstance(bands, dict) else None)




