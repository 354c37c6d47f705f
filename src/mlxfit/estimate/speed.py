"""Decode speed: one generated token as a sum of named per-op costs.

seconds/token = dense weights / (eta x bw)                          (quantized matvec, qmv)
              + routed experts touched / (expert_eta x bw)          (gather_qmv)
              + fused attention KV / (kv_eta x bw)                  (sdpa_vector)
              + unfused attention traffic / (unfused_eta x bw)      (matmul + softmax fallback,
                                                                     MLA's latent attention)
              + recurrent state read and written / (eta x bw)
              + fixed_s + per_layer_s x layers + per_moe_layer_s x MoE layers
              + per_unfused_layer_s x layers with unfused attention (unfused_decode_layers)
(x ultra_eta on the bandwidth of two-die Ultra chips; constants: calibration.toml [decode]).
Every efficiency is a fraction of the machine's bandwidth that one kind of kernel reaches.

``predicted_decode_seconds`` is the one predictor every verb calls (fit, the serving estimate,
the chart, measure, calibrate): it takes the backend's fused decode head dims from the
calibration and the Ultra factor from the machine name, so no caller assembles them itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlxfit.calibration.constants import Calibration, Decode
from mlxfit.estimate.memory import Run, Term, attn_groups, compress_bytes, layer_kv_bytes
from mlxfit.model.config import Attn, ModelConfig
from mlxfit.model.inputs import WeightsRead

# MLX's SDPA fallback (mlx/fast.cpp, used where no fused kernel takes the shape): QK^T writes
# the scores, softmax reads and writes them, the PV matmul reads them: 4 crossings of one
# (heads x queries x keys) array. An array mask adds its own write and the read that adds it
# (MLA's pe_scores, mlx_lm/models/deepseek_v3.py / glm4_moe_lite.py); Gemma 2's hand-written
# softcap adds tanh's read and write. Rules from the code, not fitted.
SCORE_PASSES = 4
MASK_PASSES = 2
SOFTCAP_PASSES = 2


@dataclass(frozen=True)
class TimeTerm:
    """One named part of a time prediction, for --explain."""

    name: str
    seconds: float
    formula: str
    inputs: dict[str, Any] = field(default_factory=dict)


def experts_touched(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts ``tokens`` tokens route to in one MoE layer, uniform routing:
    E x (1 - (1 - k/E)^tokens) - k for one token, nearly all of them for a long chunk."""
    if num_experts <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** max(tokens, 0))


def weights_split(cfg: ModelConfig, w: WeightsRead, tokens: int = 1) -> tuple[int, int]:
    """(dense bytes, routed-expert bytes) a step over ``tokens`` tokens reads: every weight
    outside the routed experts once (not the input embedding, a row gather unless tied, nor
    per-layer lookup tables), and of the experts the union the tokens route to."""
    skipped_embed = 0 if w.tied_embeddings else w.embedding_bytes
    experts = w.expert_bytes if cfg.is_moe and w.expert_bytes else 0
    dense = w.total_bytes - experts - skipped_embed - w.lookup_bytes
    if not experts:
        return dense, 0
    share = experts_touched(cfg.num_experts, cfg.top_k, tokens) / cfg.num_experts
    return dense, int(experts * min(share, 1.0))


def weights_read_term(cfg: ModelConfig, w: WeightsRead) -> Term:
    """Dense weights once; routed experts only top_k / num_experts of them; the input embedding
    is a row lookup (unless tied: the output head then reads the whole table)."""
    dense, routed = weights_split(cfg, w)
    skipped_embed = 0 if w.tied_embeddings else w.embedding_bytes
    return Term(
        "weights_read_per_token",
        dense + routed,
        "weights - expert_bytes x (1 - top_k/experts) - input embedding (when untied) "
        "- per-layer lookup tables",
        {"weights": w.total_bytes, "expert_bytes": w.expert_bytes,
         "top_k": cfg.top_k, "experts": cfg.num_experts,
         "embedding_skipped": skipped_embed, "lookup_skipped": w.lookup_bytes},
    )


def _fused_decode(cfg: ModelConfig, a: Attn, fused_decode: tuple[int, ...], quant: bool) -> bool:
    """Whether one decode token's attention of this layer is MLX's sdpa_vector kernel: a head
    dim it has, not MLA's absorbed latent attention (head dim kv_lora_rank with an array mask),
    not hand-written attention (Gemma 2's softcap) nor mlx-lm's quantized SDPA."""
    return (a.mla is None and not cfg.scores_always and a.head_dim in fused_decode
            and not (quant and a.cache.holds_quantized(quant)))


def kv_rereads(a: Attn) -> int:
    """How many times one decode token's unfused attention reads each cached K/V head. The
    fallback (mlx/fast.cpp, mlx-lm's Gemma 2 and quantized SDPA) views the queries as
    (kv_heads, q_heads/kv_heads, 1, D) and broadcasts K and V over the middle axis: a batch of
    one-row matvecs that each stream their K/V head, q_heads/kv_heads reads per head. With one
    KV head the broadcast batch is the only one and MLX folds it into the rows (Matmul::eval_gpu,
    "Collapse batches into M"): one read. A rule from the code, not fitted."""
    if a.kv_heads <= 1:
        return 1
    return max(a.q_heads // a.kv_heads, 1)


def _unfused_layer_bytes(cfg: ModelConfig, a: Attn, n: int, kv: float) -> float:
    """Bytes one unfused decode attention moves over ``n`` keys: the cached K and V read by the
    two matmuls, once per query head that shares them (``kv_rereads``; MLA absorbed, mlx-lm at
    one query: the latent is both K and V of one head, read twice, and k_pe once for
    pe_scores) + the score array's crossings (SCORE_PASSES, + MASK_PASSES for MLA's pe_scores
    mask, + SOFTCAP_PASSES for Gemma 2)."""
    b = cfg.act_bytes
    if a.mla is not None:
        m = a.mla
        cache = n * (2 * m.kv_lora_rank + m.qk_rope) * b
        return cache + (SCORE_PASSES + MASK_PASSES) * m.heads * n * b
    passes = SCORE_PASSES + (SOFTCAP_PASSES if cfg.scores_always else 0)
    return kv * kv_rereads(a) + passes * a.q_heads * n * b


def kv_read_parts(cfg: ModelConfig, run: Run, *, fused_decode: tuple[int, ...],
                  ultra: bool = False, gqa_ultra: float = 0.0) -> tuple[float, float]:
    """(bytes the fused decode kernel reads, bytes unfused decode attention moves) per token.
    Attention reads every cached token it attends to (not the unused capacity), KV-shared
    layers included: Gemma 3n/4's last layers own no cache, but each runs its attention over
    the earlier layer's it shares (``Shared.decode_keys``: that cache's window). On Ultra chips
    a GQA factor above 4 costs (1 + gqa_ultra x gqa) on the fused read (MLX's 2-pass kernel)."""
    quant = run.kv_quantized
    fused = unfused = 0.0
    for a, count in attn_groups(cfg, run):
        n = a.cache.decode_keys(run.ctx)
        # deepseek_v41: the indexer scores every index key and the attention gathers its
        # top-k compressed rows; the whole compressed cache is counted as read.
        kv = layer_kv_bytes(a, n, quant, run, cfg.act_bytes) + compress_bytes(a, run.ctx,
                                                                              cfg.act_bytes)
        if _fused_decode(cfg, a, fused_decode, quant):
            gqa = a.q_heads // max(a.kv_heads, 1)
            fused += count * kv * (1 + gqa_ultra * gqa if ultra and gqa > 4 else 1.0)
        else:
            unfused += count * _unfused_layer_bytes(cfg, a, n, kv)
    return fused, unfused


def unfused_decode_layers(cfg: ModelConfig, run: Run, fused_decode: tuple[int, ...]) -> int:
    """Layers whose decode attention runs MLX's unfused fallback (``_fused_decode`` false),
    KV-shared layers included: each dispatches its score matmul, softmax and value matmul
    separately (``per_unfused_layer_s``), where a fused layer dispatches one sdpa_vector."""
    return sum(n for a, n in attn_groups(cfg, run)
               if not _fused_decode(cfg, a, fused_decode, run.kv_quantized))


def unfused_decode_flops(cfg: ModelConfig, run: Run, fused_decode: tuple[int, ...]) -> float:
    """FLOPs of one decode token's unfused attention: the fallback's score and value matmuls,
    2 x query heads x (key + value width) per attended key (MLA absorbed: 2 x heads x (2 x
    kv_lora_rank + rope) per key, its latent both key and value). MLA's 20+ heads over a
    512-wide latent make these matmuls compute-bound on a chip without Neural Accelerators."""
    flops = 0.0
    for a, count in attn_groups(cfg, run):  # KV-shared layers too (kv_read_parts)
        if _fused_decode(cfg, a, fused_decode, run.kv_quantized):
            continue
        n = a.cache.decode_keys(run.ctx)
        if a.mla is not None:
            flops += count * 2 * a.mla.heads * (2 * a.mla.kv_lora_rank + a.mla.qk_rope) * n
        else:
            flops += count * 2 * a.q_heads * (a.k_dim + a.v_dim) * n
    return flops


def unfused_compute(cfg: ModelConfig, run: Run, cal: Decode, fused_decode: tuple[int, ...],
                    matmul_flops: float | None) -> tuple[float, float]:
    """(FLOPs, seconds) of one decode token's unfused attention matmuls at
    ``unfused_flops_eff`` of the chip's matmul peak; (0, 0) without the chip's compute figures
    (a machine mlxfit has no SKU row for)."""
    if not matmul_flops:
        return 0.0, 0.0
    flops = unfused_decode_flops(cfg, run, fused_decode)
    return flops, flops / (cal.unfused_flops_eff * matmul_flops)


def kv_read_term(cfg: ModelConfig, run: Run, cal: Decode | None = None, *,
                 fused_decode: tuple[int, ...], ultra: bool = False) -> Term:
    """Bytes decode attention moves per token (``kv_read_parts``, both paths) + the recurrent
    state read and written once. Without ``cal`` no Ultra GQA factor (serving, cluster stages
    without constants)."""
    f, u = kv_read_parts(cfg, run, fused_decode=fused_decode, ultra=ultra,
                         gqa_ultra=cal.gqa_ultra if cal is not None else 0.0)
    return Term("cache_read_per_token", int(f + u + 2 * cfg.state_bytes),
                "fused: attended tokens x per-token KV bytes (x (1 + gqa_ultra x gqa) on Ultra "
                "chips for gqa > 4); unfused: K and V read by two matmuls once per query head "
                "sharing them (MLA: the latent twice + k_pe) + the score array's crossings; "
                "+ 2 x state",
                {"ctx": run.ctx, "ultra": ultra, "fused_bytes": int(f), "unfused_bytes": int(u),
                 "state_bytes": 2 * cfg.state_bytes})


def stream_bps(bandwidth_gbs: float, cal: Decode, ultra: bool) -> float:
    """Bytes/s a kernel's stream sees: the machine's bandwidth, x ``ultra_eta`` on a two-die
    Ultra (decode's and prefill's streams alike)."""
    return bandwidth_gbs * 1e9 * (cal.ultra_eta if ultra else 1.0)


def is_ultra(machine_name: str) -> bool:
    """Ultra chips are two dies: the decode model applies its measured efficiency factor."""
    return " ultra" in f" {machine_name.lower()}"


def decode_factors(cal: Calibration, backend: str, machine_name: str
                   ) -> tuple[tuple[int, ...], bool]:
    """(fused decode head dims of ``backend``, Ultra chip?): the two machine/backend facts a
    decode prediction applies, from the calibration and the machine name."""
    return cal.backend(backend).fused_decode_head_dims, is_ultra(machine_name)


def predicted_decode(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                     cal: Calibration, machine_name: str, *, decode: Decode | None = None,
                     matmul_flops: float | None = None,
                     ) -> tuple[float, list[Term], tuple[TimeTerm, ...]]:
    """Seconds per generated token of ``run`` on the machine ``machine_name`` (its bandwidth
    ``bandwidth_gbs``), with ``run.backend``'s fused head dims and the Ultra factor; its byte
    terms; and the per-op seconds it sums (for --explain), computed once.
    ``decode``: other decode constants than ``cal.decode`` (calibrate's trial values).
    ``matmul_flops``: the chip's matmul peak (``compute.decode_matmul_flops``), for the unfused
    attention's FLOPs; None leaves that term out."""
    fused, ultra = decode_factors(cal, run.backend, machine_name)
    return _decode(cfg, run, w, bandwidth_gbs, cal.decode if decode is None else decode,
                   fused_decode=fused, ultra=ultra, matmul_flops=matmul_flops)


def predicted_decode_seconds(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                             cal: Calibration, machine_name: str, *,
                             decode: Decode | None = None,
                             matmul_flops: float | None = None) -> tuple[float, list[Term]]:
    """``predicted_decode``'s seconds per token and byte terms."""
    secs, byte_terms, _ = predicted_decode(cfg, run, w, bandwidth_gbs, cal, machine_name,
                                           decode=decode, matmul_flops=matmul_flops)
    return secs, byte_terms


def predicted_decode_terms(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                           cal: Calibration, machine_name: str, *,
                           matmul_flops: float | None = None) -> tuple[TimeTerm, ...]:
    """The per-op seconds ``predicted_decode_seconds`` sums, for --explain."""
    return predicted_decode(cfg, run, w, bandwidth_gbs, cal, machine_name,
                            matmul_flops=matmul_flops)[2]


def decode_time_terms(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                      cal: Decode, *, fused_decode: tuple[int, ...],
                      ultra: bool = False, matmul_flops: float | None = None
                      ) -> tuple[TimeTerm, ...]:
    """The per-op seconds of one decode token (the module docstring's sum), for --explain."""
    bw = stream_bps(bandwidth_gbs, cal, ultra)
    dense, routed = weights_split(cfg, w)
    at = attention_seconds(cfg, run, bandwidth_gbs, cal, fused_decode=fused_decode, ultra=ultra,
                           matmul_flops=matmul_flops)
    moe = cfg.moe_layers
    unf = unfused_decode_layers(cfg, run, fused_decode)
    return (
        TimeTerm("decode_dense_weights_seconds", dense / (cal.eta * bw),
                 "weights outside the routed experts (not the input embedding's row gather) / "
                 "(eta x bandwidth)", {"bytes": dense, "eta": cal.eta}),
        TimeTerm("decode_expert_weights_seconds", routed / (cal.expert_eta * bw),
                 "the top_k routed experts' bytes per MoE layer / (expert_eta x bandwidth)",
                 {"bytes": routed, "expert_eta": cal.expert_eta}),
        TimeTerm("decode_attention_fused_seconds", at.fused_s,
                 "attended tokens x KV bytes per token, fused sdpa_vector layers / "
                 "(kv_eta x bandwidth)", {"bytes": int(at.fused_bytes), "kv_eta": cal.kv_eta}),
        TimeTerm("decode_attention_unfused_seconds", at.unfused_s,
                 f"K and V read by the fallback's two matmuls once per query head sharing them "
                 f"(MLA: latent twice + k_pe) + "
                 f"{SCORE_PASSES} crossings of the scores (+{MASK_PASSES} MLA mask, "
                 f"+{SOFTCAP_PASSES} softcap) / (unfused_eta x bandwidth) + their matmuls' "
                 "FLOPs / (unfused_flops_eff x the chip's matmul peak)",
                 {"bytes": int(at.unfused_bytes), "unfused_eta": cal.unfused_eta,
                  "flops": at.unfused_flops, "unfused_flops_eff": cal.unfused_flops_eff}),
        TimeTerm("decode_state_seconds", at.state_s,
                 "recurrent state read and written once / (eta x bandwidth)",
                 {"bytes": at.state_bytes}),
        TimeTerm("decode_fixed_seconds",
                 layer_seconds(cfg.num_layers, moe, cal, unfused_layers=unf),
                 "fixed_s + per_layer_s x layers + per_moe_layer_s x MoE layers + "
                 "per_unfused_layer_s x layers with unfused decode attention",
                 {"layers": cfg.num_layers, "moe_layers": moe, "unfused_layers": unf}),
    )


def _decode(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float, cal: Decode, *,
            fused_decode: tuple[int, ...], ultra: bool, matmul_flops: float | None
            ) -> tuple[float, list[Term], tuple[TimeTerm, ...]]:
    terms = decode_time_terms(cfg, run, w, bandwidth_gbs, cal, fused_decode=fused_decode,
                              ultra=ultra, matmul_flops=matmul_flops)
    wr = weights_read_term(cfg, w)
    kr = kv_read_term(cfg, run, cal, fused_decode=fused_decode, ultra=ultra)
    return sum(t.seconds for t in terms), [wr, kr], terms


def weights_seconds(cfg: ModelConfig, w: WeightsRead, bandwidth_gbs: float, cal: Decode, *,
                    ultra: bool = False, tokens: int = 1) -> float:
    """Decode's weight reads of ``w`` (a model or a host's share) for a step of ``tokens``
    sequences: dense at eta, the routed experts they touch at expert_eta (the terms
    ``decode_time_terms`` names)."""
    bw = stream_bps(bandwidth_gbs, cal, ultra)
    dense, routed = weights_split(cfg, w, tokens)
    return dense / (cal.eta * bw) + routed / (cal.expert_eta * bw)


@dataclass(frozen=True)
class AttentionTime:
    """One decode token's attention and recurrent-state seconds, by kernel path, with the
    bytes and FLOPs they come from (``attention_seconds``)."""

    fused_s: float
    unfused_s: float  # the fallback's traffic and its matmuls' FLOPs
    state_s: float
    fused_bytes: float
    unfused_bytes: float
    unfused_flops: float
    state_bytes: int

    @property
    def total(self) -> float:
        return self.fused_s + self.unfused_s + self.state_s


def attention_seconds(cfg: ModelConfig, run: Run, bandwidth_gbs: float, cal: Decode, *,
                      fused_decode: tuple[int, ...], ultra: bool = False,
                      matmul_flops: float | None = None) -> AttentionTime:
    """Decode's attention and state of ``cfg``'s layers (a model or a host's share): the fused
    read at kv_eta, unfused traffic at unfused_eta plus its matmuls' FLOPs
    (``unfused_compute``), the state read and written at eta. ``decode_time_terms`` shows
    these parts; ``cache_seconds`` is their sum."""
    bw = stream_bps(bandwidth_gbs, cal, ultra)
    fused, unfused = kv_read_parts(cfg, run, fused_decode=fused_decode, ultra=ultra,
                                   gqa_ultra=cal.gqa_ultra)
    flops, compute = unfused_compute(cfg, run, cal, fused_decode, matmul_flops)
    state = 2 * cfg.state_bytes
    return AttentionTime(fused / (cal.kv_eta * bw), unfused / (cal.unfused_eta * bw) + compute,
                         state / (cal.eta * bw), fused, unfused, flops, state)


def cache_seconds(cfg: ModelConfig, run: Run, bandwidth_gbs: float, cal: Decode, *,
                  fused_decode: tuple[int, ...], ultra: bool = False,
                  matmul_flops: float | None = None) -> float:
    """Decode's attention and state seconds of ``cfg``'s layers (``attention_seconds``)."""
    return attention_seconds(cfg, run, bandwidth_gbs, cal, fused_decode=fused_decode,
                             ultra=ultra, matmul_flops=matmul_flops).total


def read_seconds(nbytes: float, bandwidth_gbs: float, cal: Decode, *, ultra: bool = False) -> float:
    """Time to stream ``nbytes`` of weights at the calibrated efficiency (Ultra: two-die
    factor)."""
    return nbytes / (cal.eta * stream_bps(bandwidth_gbs, cal, ultra))


def layer_seconds(layers: int, moe_layers: int, cal: Decode, *, fixed: bool = True,
                  unfused_layers: int = 0) -> float:
    """Per-token fixed costs: kernel launches per layer, routing per MoE layer, the unfused
    attention fallback's extra dispatches per layer that runs it (``unfused_decode_layers``)."""
    return (cal.fixed_s if fixed else 0.0) + cal.per_layer_s * layers \
        + cal.per_moe_layer_s * moe_layers + cal.per_unfused_layer_s * unfused_layers
