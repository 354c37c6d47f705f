"""Decode speed: bytes read per generated token over the memory bandwidth, plus fixed costs.

seconds/token = bytes_read / (eta * bandwidth) + fixed_s + per_layer_s * layers
                + per_moe_layer_s * moe_layers            (constants: calibration.toml [decode])
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxfit.calibration import Decode
from mlxfit.config import ModelConfig
from mlxfit.memory import Run, Term, _layer_kv_bytes, attn_groups


@dataclass(frozen=True)
class WeightsRead:
    """What a decode step must read of the weights (from the weights summary)."""

    total_bytes: int
    expert_bytes: int
    embedding_bytes: int
    tied_embeddings: bool


def weights_read_term(cfg: ModelConfig, w: WeightsRead) -> Term:
    """Dense weights once; routed experts only top_k / num_experts of them; the input embedding
    is a row lookup (unless tied: the output head then reads the whole table)."""
    skipped_experts = 0
    if cfg.is_moe and w.expert_bytes:
        skipped_experts = int(w.expert_bytes * (1 - cfg.top_k / cfg.num_experts))
    skipped_embed = 0 if w.tied_embeddings else w.embedding_bytes
    read = w.total_bytes - skipped_experts - skipped_embed
    return Term(
        "weights_read_per_token",
        read,
        "weights - expert_bytes x (1 - top_k/experts) - input embedding (when untied)",
        {"weights": w.total_bytes, "expert_bytes": w.expert_bytes,
         "top_k": cfg.top_k, "experts": cfg.num_experts,
         "embedding_skipped": skipped_embed},
    )


def kv_read_term(cfg: ModelConfig, run: Run) -> Term:
    """Attention reads every cached token it attends to (not the unused capacity); recurrent
    state is read and written once per token."""
    quant = run.kv_bits is not None and run.ctx > run.quantized_kv_start
    total = 0.0
    for a, count in attn_groups(cfg, run):
        if a.cache == "shared":
            continue
        n = run.ctx if a.cache == "full" else min(run.ctx, a.window or run.ctx)
        total += count * _layer_kv_bytes(a, n, quant, run, cfg.act_bytes)
    total += 2 * cfg.state_bytes
    return Term("cache_read_per_token", int(total),
                "attended tokens x per-token KV bytes + 2 x recurrent state",
                {"ctx": run.ctx})


def decode_seconds(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                   cal: Decode) -> tuple[float, list[Term]]:
    wr = weights_read_term(cfg, w)
    kr = kv_read_term(cfg, run)
    moe_layers = sum(1 for ly in cfg.layers if ly.moe)
    fixed = cal.fixed_s + cal.per_layer_s * cfg.num_layers + cal.per_moe_layer_s * moe_layers
    secs = (wr.bytes + kr.bytes) / (cal.eta * bandwidth_gbs * 1e9) + fixed
    return secs, [wr, kr]

