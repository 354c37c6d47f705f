"""Batched generation (mlx-lm's BatchGenerator, as mlx_lm.server and mlx_lm.benchmark -b run
it): the memory of N sequences in flight and the speed of one batched decode step.

Facts from mlx-lm 0.32.2 (docs/serving.md has the references):
- Prefill: up to ``prefill_batch`` prompts advance together, each by up to
  ``prefill_step_size`` tokens per call (PromptProcessingBatch.prompt), right-padded to the
  longest chunk. The chunk's activations are one (B, L, width) tensor: B x L tokens in flight,
  so the device-level activation floor is paid once, not once per prompt; the attention
  scores, the gathered keys and the cache growth copy are per sequence.
- Caches: BatchKVCache / BatchRotatingKVCache hold (B, heads, T, dim) buffers, T the longest
  sequence (shorter ones left-padded); they grow by concatenation in 256-token steps for all
  sequences at once, so the growth copy is B sequences' old layer.
- Decode: one model call for every sequence in the generation batch (GenerationBatch._step):
  the weights are read once per step, each sequence's cache once, and the matmul FLOPs grow
  with the batch (the chip's compute and the kernel efficiencies are estimate/compute.py's,
  fitted to published prefill rates); logits are (B, vocab) float32.

Every byte term is built from memory.py's per-sequence functions (``prefill_phase``,
``decode_phase``, ``activations_term``), so a change to the single-sequence transient model
changes the batched one the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlxfit.calibration.constants import Backend, Calibration
from mlxfit.estimate.compute import (
    ChipCompute,
    decode_matmul_flops,
    format_efficiency,
    matmul_params_per_token,
)
from mlxfit.estimate.memory import (
    Phase,
    Run,
    Term,
    activations_term,
    attn_groups,
    decode_phase,
    kv_bytes_final,
    prefill_phase,
    state_bytes_final,
)
from mlxfit.estimate.speed import (
    cache_seconds,
    decode_factors,
    kv_read_term,
    layer_seconds,
    unfused_decode_layers,
    weights_seconds,
    weights_split,
)
from mlxfit.model.config import ModelConfig
from mlxfit.model.inputs import WeightsRead

# Terms of a phase that exist once however many sequences run.
SHARED_TERMS = frozenset({"base"})


def seq_cache_bytes(cfg: ModelConfig, run: Run) -> int:
    """One sequence's caches at the context: KV (in mlx-lm's steps) + recurrent state."""
    return kv_bytes_final(cfg, run) + state_bytes_final(cfg, run)


def _times(t: Term, k: int, what: str) -> Term:
    if k == 1:
        return t
    return Term(t.name, k * t.bytes, f"{k} x ({t.formula}) [{what}]", {**t.inputs, what: k})


def batched_prefill_phase(cfg: ModelConfig, run: Run, be: Backend, n_chunk: int,
                          batch: int) -> Phase:
    """``batch`` prompts running their n-th prefill chunk together: the chunk's activations
    for batch x chunk tokens (one tensor, so the floor counts once), every other per-sequence
    term (scores, keys copy, growth copy, a quantize copy) and the caches x batch, base once."""
    one = prefill_phase(cfg, run, be, n_chunk)
    if batch == 1:
        return one
    c = run.schedule().chunk_size(n_chunk)
    terms = []
    for t in one.terms:
        if t.name == "activations":
            a = activations_term(cfg, batch * c, be)
            terms.append(Term(a.name, a.bytes, f"{a.formula} [chunk = {batch} prompts x {c}]",
                              {**a.inputs, "prompts": batch}))
        elif t.name in SHARED_TERMS:
            terms.append(t)
        else:
            terms.append(_times(t, batch, "prompts"))
    return Phase(f"prefill chunk {n_chunk} ({batch} prompts x {c} tokens)",
                 batch * one.kv_bytes, tuple(terms))


def batched_decode_phase(cfg: ModelConfig, run: Run, be: Backend, sequences: int) -> Phase:
    """The last decode step of ``sequences`` sequences: their caches, the batch's growth copy
    (BatchKVCache grows every row at once) and logits, base once."""
    one = decode_phase(cfg, run, be)
    if sequences == 1:
        return one
    terms = tuple(t if t.name in SHARED_TERMS else _times(t, sequences, "sequences")
                  for t in one.terms)
    return Phase(f"decode at full context ({sequences} sequences)", sequences * one.kv_bytes,
                 terms)


def batched_peak_phase(cfg: ModelConfig, run: Run, be: Backend, sequences: int,
                       prefill_batch: int) -> Phase:
    """The larger of: every sequence decoding at the context; or ``prefill_batch`` prompts in
    their last two chunks while the other sequences hold full caches in the generation batch
    (BatchGenerator decodes them between the prompt chunks)."""
    b = max(1, min(prefill_batch, sequences))
    cands = [batched_decode_phase(cfg, run, be, sequences)]
    waiting = (sequences - b) * seq_cache_bytes(cfg, run)
    _, _, total = run.schedule().chunks()
    for n in {total, total - 1}:
        if n >= 1:
            ph = batched_prefill_phase(cfg, run, be, n, b)
            if waiting:
                ph = replace(ph, name=f"{ph.name}, {sequences - b} others decoding",
                             kv_bytes=ph.kv_bytes + waiting)
            cands.append(ph)
    return max(cands, key=lambda p: p.total_over_weights)


# --------------------------------------------------------------------------- speed


def decode_flops(cfg: ModelConfig, run: Run, w: WeightsRead) -> tuple[float, float, float]:
    """(dense, routed-expert, attention) FLOPs of one decode token at the run's context: 2 x
    the parameters a token multiplies (``compute.matmul_params_per_token``: the output head
    included, routed experts x top_k / experts), and attention's QK and PV products over the
    attended keys, 2 x q_heads x (k_dim + v_dim) x keys per layer (MLA: heads x (qk_nope +
    qk_rope + v_head)). Zeros when the tensors' parameters were not counted."""
    if w.params is None:
        return 0.0, 0.0, 0.0
    dense, routed = matmul_params_per_token(cfg, w.params, prefill=False)
    attn = 0.0
    for a, n in attn_groups(cfg, run):
        keys = a.cache.decode_keys(run.ctx)
        if a.mla is not None:
            attn += n * 2.0 * a.mla.heads * keys * (a.mla.qk_nope + a.mla.qk_rope + a.mla.v_head)
        else:
            attn += n * 2.0 * a.q_heads * keys * (a.k_dim + a.v_dim)
    return 2.0 * dense, 2.0 * routed, attn


def compute_seconds(cfg: ModelConfig, run: Run, w: WeightsRead, chip: ChipCompute | None,
                    cal: Calibration, sequences: int) -> tuple[float, float] | None:
    """(matmul, attention) seconds of the FLOPs of ``sequences`` decode tokens over the chip's
    matmul peak at the fitted [prefill] efficiencies (eff_<format>, expert_eff, attn_eff: the
    same kernels at a larger M); None without a compute figure, a [prefill] table or counted
    parameters."""
    if chip is None or cal.prefill is None or w.params is None:
        return None
    pc = cal.prefill
    dense, routed, attn = decode_flops(cfg, run, w)
    eff = format_efficiency(pc, w.params.fmt)
    peak = chip.tensor_peak(pc)
    matmul = sequences * (dense / eff + routed / (eff * pc.expert_eff)) / peak
    return matmul, sequences * attn / (pc.attn_eff * peak)


@dataclass(frozen=True)
class BatchedStep:
    """One batched decode step of ``sequences`` sequences: the reads of the first sequence's
    step (fit's single-stream decode, whose calibration holds that token's FLOPs), the extra
    experts the batch routes to, for every further sequence its matmul FLOPs, which MLX's
    decode-size matmul kernels do not hide under the weight stream, and the attention: every
    sequence's KV read or its FLOPs, whichever is longer (one kernel streams the keys)."""

    sequences: int
    step_seconds: float
    weights_seconds: float  # the weights read once (the batch's union of experts)
    kv_seconds: float  # every sequence's attended KV
    matmul_seconds: float | None  # sequences x matmul FLOPs over the usable peak
    attention_seconds: float | None  # sequences x attention FLOPs
    fixed_seconds: float  # per-layer launch costs ([decode])
    batch_seconds: float  # the batched path's per-layer cost, sequences > 1 ([decode])
    weights_read_bytes: int
    kv_read_bytes: int

    @property
    def per_sequence_tps(self) -> float:
        return 1.0 / self.step_seconds

    @property
    def aggregate_tps(self) -> float:
        return self.sequences / self.step_seconds

    @property
    def memory_seconds(self) -> float:
        return self.weights_seconds + self.kv_seconds

    @property
    def compute_seconds(self) -> float:
        return (self.matmul_seconds or 0.0) + (self.attention_seconds or 0.0)

    @property
    def bound(self) -> str:
        """"compute" once the batch's FLOPs take longer than its bytes."""
        return "compute" if self.compute_seconds > self.memory_seconds else "memory"


def batched_step(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                 cal: Calibration, machine_name: str, sequences: int, *,
                 compute: ChipCompute | None = None) -> BatchedStep:
    """One decode step of ``sequences`` sequences at the run's context:
    weights read once (a MoE layer reads the union of the experts the batch routes to:
    E x (1 - (1 - k/E)^B) distinct experts, uniform routing) + the per-layer fixed costs
    + (sequences - 1)/sequences of the batch's matmul FLOPs + max(every sequence's attended
    KV, the batch's attention FLOPs) + the batched path's per-layer cost when sequences > 1
    (FLOPs by ``compute_seconds`` with the chip's ``compute``; without it, bytes alone). The
    matmul FLOPs add to the weight reads rather than overlap them: mlx_lm.benchmark -b 2..8
    on an M4 grows by one token's KV read + matmul FLOPs per sequence
    (bench/results/batched_published.md). The first sequence's FLOPs are left out because
    the single-stream constants were fitted to measured decode that contains them, so one
    sequence is fit's decode (``speed.predicted_decode_seconds``) while its attention is
    memory-bound. Aggregate tok/s rises with the batch and saturates at
    1 / (one token's matmul FLOPs + max(its KV read, its attention FLOPs))."""
    dec = cal.decode
    fused, ultra = decode_factors(cal, run.backend, machine_name)
    dense, routed = weights_split(cfg, w, sequences)
    read = dense + routed
    kr = kv_read_term(cfg, run, dec, fused_decode=fused, ultra=ultra)
    w_s = weights_seconds(cfg, w, bandwidth_gbs, dec, ultra=ultra, tokens=sequences)
    kv_s = sequences * cache_seconds(cfg, run, bandwidth_gbs, dec, fused_decode=fused,
                                     ultra=ultra, matmul_flops=decode_matmul_flops(compute))
    comp = compute_seconds(cfg, run, w, compute, cal, sequences)
    mm, at = comp if comp is not None else (None, None)
    fixed = layer_seconds(cfg.num_layers, cfg.moe_layers, dec,
                          unfused_layers=unfused_decode_layers(cfg, run, fused))
    batch_s = dec.batch_per_layer_s * cfg.num_layers if sequences > 1 else 0.0
    step = (w_s + (mm or 0.0) * (sequences - 1) / sequences + max(kv_s, at or 0.0) + fixed
            + batch_s)
    return BatchedStep(sequences=sequences, step_seconds=step, weights_seconds=w_s,
                       kv_seconds=kv_s, matmul_seconds=mm, attention_seconds=at,
                       fixed_seconds=fixed, batch_seconds=batch_s, weights_read_bytes=read,
                       kv_read_bytes=sequences * kr.bytes)
