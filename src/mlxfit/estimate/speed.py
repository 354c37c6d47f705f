"""Decode speed: bytes read per generated token over the memory bandwidth, plus fixed costs.

seconds/token = bytes_read / (eta * bandwidth) + fixed_s + per_layer_s * layers
                + per_moe_layer_s * moe_layers            (constants: calibration.toml [decode])

``predicted_decode_seconds`` is the one predictor every verb calls (fit, the serving estimate,
the chart, measure, calibrate): it takes the backend's fused decode head dims from the
calibration and the Ultra factor from the machine name, so no caller assembles them itself.
"""

from __future__ import annotations

from mlxfit.calibration.constants import Calibration, Decode
from mlxfit.estimate.memory import Run, Term, attn_groups, compress_bytes, layer_kv_bytes
from mlxfit.model.config import ModelConfig
from mlxfit.model.inputs import WeightsRead


def weights_read_term(cfg: ModelConfig, w: WeightsRead) -> Term:
    """Dense weights once; routed experts only top_k / num_experts of them; the input embedding
    is a row lookup (unless tied: the output head then reads the whole table)."""
    skipped_experts = 0
    if cfg.is_moe and w.expert_bytes:
        skipped_experts = int(w.expert_bytes * (1 - cfg.top_k / cfg.num_experts))
    skipped_embed = 0 if w.tied_embeddings else w.embedding_bytes
    read = w.total_bytes - skipped_experts - skipped_embed - w.lookup_bytes
    return Term(
        "weights_read_per_token",
        read,
        "weights - expert_bytes x (1 - top_k/experts) - input embedding (when untied) "
        "- per-layer lookup tables",
        {"weights": w.total_bytes, "expert_bytes": w.expert_bytes,
         "top_k": cfg.top_k, "experts": cfg.num_experts,
         "embedding_skipped": skipped_embed, "lookup_skipped": w.lookup_bytes},
    )


def kv_read_term(cfg: ModelConfig, run: Run, cal: Decode | None = None, *,
                 fused_decode: tuple[int, ...], ultra: bool = False) -> Term:
    """Attention reads every cached token it attends to (not the unused capacity); recurrent
    state is read and written once per token. Unfused decode attention (Gemma 2's softcap,
    head dims Metal's sdpa_vector lacks) reads the keys ~kv_unfused times; on Ultra chips a
    GQA factor above 4 costs more blocks (MLX's 2-pass vector kernel). ``fused_decode``: the
    backend's ``fused_decode_head_dims`` (calibration.toml; see ``decode_factors``)."""
    quant = run.kv_quantized
    total = 0.0
    for a, count in attn_groups(cfg, run):
        if not a.cache.owns_memory:
            continue
        n = a.cache.decode_keys(run.ctx)
        # deepseek_v41: the indexer scores every index key and the attention gathers its
        # top-k compressed rows; the whole compressed cache is counted as read.
        b = count * (layer_kv_bytes(a, n, quant, run, cfg.act_bytes)
                     + compress_bytes(a, run.ctx, cfg.act_bytes))
        if cal is not None:  # without constants: the bytes alone (serving, cluster stages)
            if cfg.scores_always or (a.mla is None and a.head_dim not in fused_decode):
                b *= cal.kv_unfused
            gqa = a.q_heads // max(a.kv_heads, 1)
            if ultra and a.mla is None and gqa > 4:
                b *= 1 + cal.gqa_ultra * gqa
        total += b
    total += 2 * cfg.state_bytes
    return Term("cache_read_per_token", int(total),
                "attended tokens x per-token KV bytes (x kv_unfused where decode attention is "
                "unfused; x (1 + gqa_ultra x gqa) on Ultra chips for gqa > 4) + 2 x state",
                {"ctx": run.ctx, "ultra": ultra})


def is_ultra(machine_name: str) -> bool:
    """Ultra chips are two dies: the decode model applies its measured efficiency factor."""
    return " ultra" in f" {machine_name.lower()}"


def decode_factors(cal: Calibration, backend: str, machine_name: str
                   ) -> tuple[tuple[int, ...], bool]:
    """(fused decode head dims of ``backend``, Ultra chip?): the two machine/backend facts a
    decode prediction applies, from the calibration and the machine name."""
    return cal.backend(backend).fused_decode_head_dims, is_ultra(machine_name)


def predicted_decode_seconds(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                             cal: Calibration, machine_name: str, *,
                             decode: Decode | None = None) -> tuple[float, list[Term]]:
    """Seconds per generated token of ``run`` on the machine ``machine_name`` (its bandwidth
    ``bandwidth_gbs``), with ``run.backend``'s fused head dims and the Ultra factor.
    ``decode``: other decode constants than ``cal.decode`` (calibrate's trial values)."""
    fused, ultra = decode_factors(cal, run.backend, machine_name)
    return decode_seconds(cfg, run, w, bandwidth_gbs, cal.decode if decode is None else decode,
                          fused_decode=fused, ultra=ultra)


def decode_seconds(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                   cal: Decode, *, fused_decode: tuple[int, ...],
                   ultra: bool = False) -> tuple[float, list[Term]]:
    """Seconds per generated token; ``ultra`` applies the two-die efficiency factor. Callers
    go through ``predicted_decode_seconds`` (which supplies both factors)."""
    wr = weights_read_term(cfg, w)
    kr = kv_read_term(cfg, run, cal, fused_decode=fused_decode, ultra=ultra)
    secs = read_seconds(wr.bytes + kr.bytes, bandwidth_gbs, cal, ultra=ultra)
    return secs + layer_seconds(cfg.num_layers, cfg.moe_layers, cal), [wr, kr]


def read_seconds(nbytes: float, bandwidth_gbs: float, cal: Decode, *, ultra: bool = False) -> float:
    """Time to stream ``nbytes`` at the calibrated efficiency (Ultra: two-die factor)."""
    return nbytes / (cal.eta * (cal.ultra_eta if ultra else 1.0) * bandwidth_gbs * 1e9)


def layer_seconds(layers: int, moe_layers: int, cal: Decode, *, fixed: bool = True) -> float:
    """Per-token fixed costs: kernel launches per layer, routing per MoE layer."""
    return (cal.fixed_s if fixed else 0.0) + cal.per_layer_s * layers \
        + cal.per_moe_layer_s * moe_layers
