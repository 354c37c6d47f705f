"""Prompt processing: the FLOPs of each prefill chunk and the chip's compute, so time to first
token and prompt tok/s (what ``mlx_lm.generate`` prints as "Prompt: N tokens, X tokens-per-sec").

mlx-lm's generate_step runs the first P-1 prompt tokens in chunks of ``prefill_step_size``
(cache_sim.Schedule), evaluating only the caches after each chunk: MLX never computes the last
layer's attention or MLP there (nor KV-shared layers after it), nor the logits. The last
prompt token goes through the first decode step, and stream_generate's prompt time ends when
that step's token exists, so prompt tok/s = P / (the chunks + the first decode step) = P / TTFT.
Each chunk ends in a blocking mx.eval (the next chunk's graph is built in Python while the GPU
idles); before waiting on the first token generate_step also builds and submits the second
decode step, which overlaps the first step's GPU time. mlx_lm.benchmark times after a warmup
run of the same shapes; mlx_lm.generate does not, so its short prompts also pay first-use
kernel setup, which this model does not include.

Per chunk of L tokens (constants: calibration.toml [prefill]):
  matmul     2 x parameters a token touches (dense weights; routed experts x top_k/experts)
             x L, of the layers computed (prefill_layers; each layer's own parameters:
             computed_dense_params), over eff_<format> x peak
  attention  2 x q_heads x (k_dim + v_dim) x (query, key) pairs: causal (fused SDPA, "causal"
             mask: L x offset + L(L+1)/2), or the whole L x keys rectangle (an array mask, a
             window, or unfused scores). MLA adds the per-chunk rebuild of K and V from the
             latent for every key: 2 x keys x heads x kv_lora_rank x (qk_nope + v_head)
             unfused attention is also memory traffic: SCORE_PASSES crossings of the
             q_heads x pairs score array (+ MASK_PASSES for MLA's pe_scores mask, + the
             rebuilt K and V written once and read by the two matmuls) over score_eta x
             the bandwidth
  scans      SCAN_FLOPS x recurrent-state elements x L per gated-delta / SSM layer
  + the weights the chunk reads (every dense weight, and of the routed experts the union the
    chunk's L tokens route to: E x (1 - (1 - k/E)^L) per MoE layer) over chunk_read_eta x the
    bandwidth (one pass), + per_layer_chunk_s per layer that mlx-lm builds (every chunk's graph
    is built in Python for every layer and the head, the GPU idle meanwhile, though only the
    layers up to the last cache owner are evaluated: Gemma 3n/4 build their KV-shared layers
    too) + per_expert_chunk_s per routed expert the chunk touches in each MoE layer (the
    gather matmul runs one padded row tile per expert: a 16-token chunk of a 512-expert model
    touches ~150, a 2048-token chunk all of them)
The chip: GPU cores x clock x FLOPs/core/cycle (data/apple_skus.toml); matmul-like work
(matmuls, SDPA) runs on the M5's Neural Accelerators when MLX uses them (macOS 26.2+).

A prefill that starts on an idle GPU (a harness that sleeps between trials: mlx_lm.benchmark
--delay) runs its first part at the parked clock: ``cold_gpu_seconds``. mlxfit's own TTFT is
the warm one (mlx_lm.benchmark's back-to-back trials); the evaluation adds it to runs whose
harness slept (bench/prefill_eval.idle_gpu).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from mlxfit.calibration.constants import Calibration, Prefill
from mlxfit.estimate.memory import Run, as_run_sees, attn_unfused
from mlxfit.estimate.speed import (
    MASK_PASSES,
    SCORE_PASSES,
    TimeTerm,
    experts_touched,
    is_ultra,
    predicted_decode_seconds,
    stream_bps,
    weights_split,
)
from mlxfit.model.config import Attn, ModelConfig
from mlxfit.model.inputs import MatmulParams, WeightsRead

# One gated-delta step per (Dk x Dv) state element (mlx_lm/models/gated_delta.py): decay,
# S^T k, the rank-1 update and S^T q are ~7 FLOPs; the Mamba2 scan (ssm.py) is of the same
# order per (head_dim x d_state) element. A rule from the code, not a fitted constant.
SCAN_FLOPS = 7.0
# The recurrent state is float32 (gated_delta.py, ssm.py): its elements are its bytes / 4.
STATE_ELEMENT_BYTES = 4

# M5 Neural Accelerators are used from macOS 26.2 (mlx is_nax_available); mlxfit knows only
# the major version, so macOS 26 counts as "with them" and says so.
NEURAL_ACCEL_FROM_MACOS = 26


@dataclass(frozen=True)
class ChipCompute:
    """Peak FLOP/s of one machine: the GPU's shader ALUs and what its matmuls run on."""

    gpu_flops: float
    matmul_flops: float  # the Neural Accelerators' peak where MLX uses them, else gpu_flops
    neural_accel: bool
    ultra: bool
    source: str

    def tensor_peak(self, cal: Prefill) -> float:
        """FLOP/s matmul-like kernels see (before the per-kernel efficiency)."""
        peak = self.matmul_flops * (cal.neural_accel_eff if self.neural_accel else 1.0)
        return peak * (cal.ultra_compute if self.ultra else 1.0)

    def alu_peak(self, cal: Prefill) -> float:
        return self.gpu_flops * (cal.ultra_compute if self.ultra else 1.0)


def chip_compute(gpu_cores: int | None, figures: dict[str, float], macos_major: int | None,
                 chip_name: str) -> ChipCompute | None:
    """The chip's compute from its SKU-table figures; None without cores or a clock."""
    clock = figures.get("gpu_clock_mhz")
    per_cycle = figures.get("gpu_flops_per_core_cycle")
    if not gpu_cores or clock is None or per_cycle is None:
        return None
    gpu = gpu_cores * clock * 1e6 * per_cycle
    na = figures.get("neural_accel_flops_per_core_cycle")
    use_na = na is not None and (macos_major or 0) >= NEURAL_ACCEL_FROM_MACOS
    matmul = gpu_cores * clock * 1e6 * na if use_na and na else gpu
    src = (f"{gpu_cores} cores x {clock:g} MHz x {per_cycle:g} FLOPs/core/cycle"
           + (f"; matmuls on the Neural Accelerators, {na:g} FLOPs/core/cycle (MLX uses them "
              f"from macOS 26.2)" if use_na else ""))
    return ChipCompute(gpu, matmul, use_na, is_ultra(chip_name), src)


@dataclass(frozen=True)
class ChunkFlops:
    """The FLOPs of one prefill chunk, by the kernel that does them."""

    dense: float = 0.0  # weight matmuls outside the routed experts
    experts: float = 0.0  # routed experts (gather_qmm)
    attn_fused: float = 0.0
    attn_unfused: float = 0.0  # materialized scores, MLA's pe_scores and K/V rebuild
    scan: float = 0.0
    score_bytes: float = 0.0  # materialized score arrays (unfused attention), one each
    # bytes unfused attention moves: the score arrays' crossings, MLA's rebuilt K/V
    traffic_bytes: float = 0.0

    @property
    def total(self) -> float:
        return self.dense + self.experts + self.attn_fused + self.attn_unfused + self.scan

    def __add__(self, o: ChunkFlops) -> ChunkFlops:
        return ChunkFlops(self.dense + o.dense, self.experts + o.experts,
                          self.attn_fused + o.attn_fused, self.attn_unfused + o.attn_unfused,
                          self.scan + o.scan, self.score_bytes + o.score_bytes,
                          self.traffic_bytes + o.traffic_bytes)


def prefill_layers(cfg: ModelConfig) -> int:
    """Layers a prefill chunk computes in full: those before the last layer that owns a cache.
    mlx-lm evaluates only the caches, so the last owner computes just its K/V (or state) and
    the layers after it - the output head, KV-shared layers (Gemma 3n/4 read earlier layers'
    caches and own none) - are never computed."""
    for i in range(len(cfg.layers) - 1, -1, -1):
        ly = cfg.layers[i]
        if ly.state_bytes or (ly.attn is not None and ly.attn.cache.owns_memory):
            return i
    return 0


def computed_dense_params(dense: float, per_layer: tuple[int, ...], n: int, layers: int
                          ) -> float:
    """Of ``dense`` parameters, those a chunk computing the first ``n`` of ``layers`` layers
    multiplies: the first n layers' own (``per_layer``, counted from the tensors) and those
    outside the layers (Gemma 3n/4's per-layer input projection, norms). Layers differ in size:
    Gemma-4 E2B's 20 KV-shared layers, never computed, have double-wide MLPs and hold 70 % of
    its layer parameters, not 20/35. Without a count for every layer, the uniform n/layers."""
    if len(per_layer) < layers or not all(per_layer[:layers]) or sum(per_layer) > dense:
        return dense * n / max(layers, 1)
    return dense - sum(per_layer) + sum(per_layer[:n])


def matmul_params_per_token(cfg: ModelConfig, p: MatmulParams, *, prefill: bool = True,
                            computed: int | None = None) -> tuple[float, float]:
    """(dense, routed-expert) parameters one token multiplies. The input embedding and
    per-layer lookup tables are row gathers; a prefill chunk computes neither the output head
    nor the layers from the last cache owner on (``prefill_layers``; ``computed`` overrides
    it: a pipeline stage that sends its output on computes every layer it holds)."""
    dense = p.total - p.experts - p.embedding - p.lm_head - p.lookup
    routed = p.experts * cfg.top_k / cfg.num_experts if cfg.is_moe and p.experts else 0.0
    if not prefill:
        head = p.lm_head or p.embedding  # tied: the embedding table is the head
        return dense + head, routed
    n = prefill_layers(cfg) if computed is None else computed
    dense = computed_dense_params(dense, p.layer_dense, n, cfg.num_layers)
    moe = cfg.moe_layers
    if moe:
        routed *= sum(1 for ly in cfg.layers[:n] if ly.moe) / moe
    return dense, routed


def prefill_attn_groups(cfg: ModelConfig, run: Run, computed: int | None = None
                        ) -> list[tuple[Attn, int]]:
    """Attention layouts a prefill chunk computes (layers before ``prefill_layers``, or the
    first ``computed``), with their counts, as the run sees them (--max-kv-size)."""
    counts: dict[Attn, int] = {}
    for a, n in cfg.attn_groups_upto(prefill_layers(cfg) if computed is None else computed):
        seen = as_run_sees(a, cfg, run)
        counts[seen] = counts.get(seen, 0) + n
    return list(counts.items())


def _attn_flops(a: Attn, count: int, size: int, offset: int, keys: int, *, fused: bool,
                causal: bool, act_bytes: int) -> ChunkFlops:
    if a.mla is not None:
        m = a.mla
        pairs = size * keys  # pe_scores is an array mask: the whole rectangle
        attn = 2.0 * m.heads * pairs * (m.qk_nope + m.qk_rope + m.v_head)
        rebuild = 2.0 * keys * m.heads * m.kv_lora_rank * (m.qk_nope + m.v_head)
        scores = m.heads * pairs * act_bytes
        # K (qk_nope) and V rebuilt for every key: written once, read by QK^T and by PV
        rebuilt = 3 * keys * m.heads * (m.qk_nope + m.v_head) * act_bytes
        return ChunkFlops(attn_unfused=count * (attn + rebuild), score_bytes=count * scores,
                          traffic_bytes=count * ((SCORE_PASSES + MASK_PASSES) * scores
                                                 + rebuilt))
    pairs = size * offset + size * (size + 1) / 2 if causal else size * keys
    flops = count * 2.0 * a.q_heads * pairs * (a.k_dim + a.v_dim)
    if fused:
        return ChunkFlops(attn_fused=flops)
    scores = count * a.q_heads * pairs * act_bytes
    return ChunkFlops(attn_unfused=flops, score_bytes=scores, traffic_bytes=SCORE_PASSES * scores)


def chunk_flops(cfg: ModelConfig, p: MatmulParams, run: Run, n: int, *,
                computed: int | None = None) -> ChunkFlops:
    """FLOPs of prefill chunk ``n`` (1-based) of ``run``; which layers run fused is the memory
    model's decision too (memory.attn_unfused, from mlxfit.estimate.kernels)."""
    s = run.schedule()
    c = s.chunk_at(n)
    k = prefill_layers(cfg) if computed is None else computed
    dense, routed = matmul_params_per_token(cfg, p, computed=k)
    out = ChunkFlops(dense=2.0 * dense * c.size, experts=2.0 * routed * c.size)
    quant = s.kv_quantized_during(n, run.kv_bits, run.quantized_kv_start)
    for a, count in prefill_attn_groups(cfg, run, k):
        keys = s.keys_seen(a, n)
        fused = not attn_unfused(a, run, cfg, quant, c.size)
        causal = fused and a.cache.attends_all_earlier and a.mla is None
        out = out + _attn_flops(a, count, c.size, c.offset_before, keys, fused=fused,
                                causal=causal, act_bytes=cfg.act_bytes)
    state = sum(ly.state_bytes for ly in cfg.layers[:k] if ly.state_kind and ly.state_kind.scanned)
    out = out + ChunkFlops(scan=SCAN_FLOPS * state / STATE_ELEMENT_BYTES * c.size)
    return out


def format_efficiency(cal: Prefill, fmt: str) -> float:
    """eff_<format>: affine at its bits, bf16 for any float, mxfp4/nvfp4/mxfp8."""
    v = getattr(cal, f"eff_{fmt}", None)
    return float(v) if v is not None else cal.eff_affine4


@dataclass(frozen=True)
class ChunkTime:
    """Seconds of one prefill chunk (or a sum of chunks), by part."""

    matmul: float = 0.0
    attention: float = 0.0  # SDPA or materialized scores, with their memory traffic
    scan: float = 0.0
    fixed: float = 0.0  # weights read once per chunk + per-layer costs (and a cluster's sends)

    @property
    def total(self) -> float:
        return self.matmul + self.attention + self.scan + self.fixed

    def __add__(self, o: ChunkTime) -> ChunkTime:
        return ChunkTime(self.matmul + o.matmul, self.attention + o.attention,
                         self.scan + o.scan, self.fixed + o.fixed)


def chunk_parts(f: ChunkFlops, chip: ChipCompute, cal: Prefill, fmt: str,
                read_bytes: float, layers: int, moe_layers: int = 0, bandwidth_bps: float = 0.0,
                experts: float = 0.0) -> ChunkTime:
    """One chunk's seconds: its FLOPs over each kernel's share of the peak, unfused
    attention's traffic at score_eta x ``bandwidth_bps`` (bytes/s, the machine's), the
    ``read_bytes`` of weights the chunk reads at chunk_read_eta x it, and the fixed costs: per
    layer built, and per routed expert the chunk touches (``experts`` per MoE layer, of
    ``moe_layers``). Without a bandwidth, FLOPs and fixed costs only."""
    eff = format_efficiency(cal, fmt)
    tensor = chip.tensor_peak(cal)
    attn = f.attn_fused / (cal.attn_eff * tensor) + f.attn_unfused / (cal.attn_unfused_eff * tensor)
    read = 0.0
    if bandwidth_bps:
        attn += f.traffic_bytes / (cal.score_eta * bandwidth_bps)
        read = read_bytes / (cal.chunk_read_eta * bandwidth_bps)
    return ChunkTime(
        matmul=(f.dense / eff + f.experts / (eff * cal.expert_eff)) / tensor,
        attention=attn,
        scan=f.scan / (cal.scan_eff * chip.alu_peak(cal)),
        fixed=read + cal.per_layer_chunk_s * layers
        + cal.per_expert_chunk_s * experts * moe_layers)


@dataclass(frozen=True)
class PromptTime:
    """Time to first token of one run, and its parts."""

    ttft_s: float
    prefill_tps: float
    prompt: int
    chunks: int
    largest_chunk_s: float  # the slowest single chunk
    # The slowest layer of one chunk: its attention is one dispatch MLX cannot split over
    # command buffers (the watchdog's figure)
    largest_layer_s: float
    terms: tuple[TimeTerm, ...]


@dataclass(frozen=True)
class PrefillSum:
    """The chunks of one prefill on one device, summed."""

    seconds: float
    largest_chunk_s: float
    largest_layer_s: float
    chunks: int
    flops: ChunkFlops
    parts: ChunkTime


def prefill_seconds(cfg: ModelConfig, p: MatmulParams, run: Run, chip: ChipCompute,
                    cal: Calibration, *, bandwidth_gbs: float,
                    read_bytes: float | Callable[[int], float], computed: int | None = None,
                    per_chunk_s: Callable[[int], float] | None = None,
                    ultra: bool = False) -> PrefillSum:
    """Every prefill chunk of ``run`` on one device: ``cfg`` (a whole model or a stage, the
    first ``computed`` layers computed), ``read_bytes`` of weights read per chunk (or
    ``read_bytes(size)``: a chunk of ``size`` tokens), and ``per_chunk_s(size)`` added per
    chunk (a cluster's transfers). ``ultra``: the two-die bandwidth factor (decode's
    ultra_eta). ``cal.prefill`` must be set."""
    pc = cal.prefill
    assert pc is not None  # callers check: predicted_ttft returns None without [prefill]
    s = run.schedule()
    stream = stream_bps(bandwidth_gbs, cal.decode, ultra)
    layers = prefill_layers(cfg) if computed is None else computed
    # the per-layer chunk costs are the host's: every layer of cfg is built each chunk
    built, built_moe = cfg.num_layers, cfg.moe_layers
    attn_layers = max(sum(n for _, n in prefill_attn_groups(cfg, run, layers)), 1)
    total, parts = ChunkFlops(), ChunkTime()
    largest = layer = 0.0
    _, _, n_chunks = s.chunks()
    for n in range(1, n_chunks + 1):
        f = chunk_flops(cfg, p, run, n, computed=layers)
        size = s.chunk_at(n).size
        rb = read_bytes(size) if callable(read_bytes) else read_bytes
        touched = experts_touched(cfg.num_experts, cfg.top_k, size) if built_moe else 0.0
        t = chunk_parts(f, chip, pc, p.fmt, rb, built, built_moe, stream, touched)
        if per_chunk_s:
            t = t + ChunkTime(fixed=per_chunk_s(size))
        parts = parts + t
        largest = max(largest, t.total)
        layer = max(layer, t.attention / attn_layers
                    + (t.matmul + t.scan + t.fixed) / max(layers, 1))
        total = total + f
    return PrefillSum(parts.total, largest, layer, n_chunks, total, parts)


def decode_matmul_flops(chip: ChipCompute | None) -> float | None:
    """The chip's matmul peak decode's unfused attention divides its FLOPs by
    (``speed.unfused_decode_flops``; Neural Accelerators included where MLX uses them); None
    without the chip's compute figures."""
    return chip.matmul_flops if chip is not None else None


def chunk_read_bytes(cfg: ModelConfig, w: WeightsRead, tokens: int) -> int:
    """Weights a chunk of ``tokens`` tokens reads: every dense weight (not the input embedding,
    a row gather unless tied, nor lookup tables) and the union of the routed experts its
    tokens route to (``speed.weights_split``): nearly all of them for a chunk of hundreds."""
    dense, routed = weights_split(cfg, w, tokens)
    return dense + routed


def cold_gpu_seconds(warm_s: float, slowdown: float, lost_s: float, reread_s: float = 0.0
                     ) -> float:
    """Seconds a prefill of ``warm_s`` (on a warm GPU) adds when it starts on an idle one:
    macOS parks an idle GPU's clock (DVFS) and ramps it back under load, so the first part runs
    ``slowdown`` times slower until the ramp has cost ``lost_s`` (a short prefill ends inside
    the ramp and is just ``slowdown`` times slower); and the first chunk's weights stream more
    slowly after the idle spell: ``reread_s`` more (``cold_reread_seconds``)."""
    return min(warm_s * (slowdown - 1.0), lost_s) + reread_s


def cold_reread_seconds(first_chunk_read_bytes: float, bytes_per_s: float,
                        cold_read_eta: float) -> float:
    """The first chunk's weight stream after an idle spell, at ``cold_read_eta`` of the
    stream's bandwidth (``bytes_per_s``: ``speed.stream_bps``): a warm harness streams
    them at ``chunk_read_eta`` (in ``prefill_seconds``); a harness that sleeps between trials
    pays this on top (ax-engine's short-prompt intercept grows with the weight bytes,
    4/5/6/8-bit alike)."""
    return first_chunk_read_bytes / (cold_read_eta * bytes_per_s)


def predicted_ttft(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                   chip: ChipCompute, cal: Calibration, machine_name: str, *,
                   cold_gpu: bool = False) -> PromptTime | None:
    """TTFT and prompt tok/s of ``run``'s prompt (ctx - gen tokens); None when the
    calibration has no [prefill] table or the tensors' parameters were not counted.
    ``cold_gpu``: the prefill starts on an idle GPU (``cold_gpu_seconds``)."""
    if cal.prefill is None or w.params is None:
        return None
    pc = cal.prefill
    s = run.schedule()
    ps = prefill_seconds(cfg, w.params, run, chip, cal, bandwidth_gbs=bandwidth_gbs,
                         read_bytes=lambda size: chunk_read_bytes(cfg, w, size),
                         ultra=chip.ultra)
    total, secs, parts = ps.flops, ps.seconds, ps.parts
    step, _ = predicted_decode_seconds(cfg, replace(run, ctx=s.prompt, gen=0), w,
                                       bandwidth_gbs, cal, machine_name,
                                       matmul_flops=decode_matmul_flops(chip))
    first_read = chunk_read_bytes(cfg, w, s.chunk_at(1).size) if ps.chunks else 0
    cold = 0.0
    if cold_gpu:
        reread = cold_reread_seconds(first_read,
                                     stream_bps(bandwidth_gbs, cal.decode, chip.ultra),
                                     pc.cold_read_eta)
        cold = cold_gpu_seconds(secs + step, pc.cold_gpu_slowdown, pc.cold_gpu_lost_s, reread)
    ttft = secs + step + cold
    cold_terms = (TimeTerm("cold_gpu_seconds", cold,
                           "the prefill starts on an idle GPU: min((prefill + first step) x "
                           "(cold_gpu_slowdown - 1), cold_gpu_lost_s) + the first chunk's "
                           "weights / (cold_read_eta x bandwidth)",
                           {"first_chunk_read_bytes": first_read,
                            "cold_read_eta": pc.cold_read_eta}),) if cold_gpu else ()
    terms = (
        TimeTerm("prefill_matmul_seconds", parts.matmul,
                 "2 x parameters per token (dense + routed experts x top_k/experts) x prefill "
                 "tokens x the share of layers computed, over eff_<format> (x expert_eff for "
                 "routed experts) x "
                 "the matmul peak",
                 {"flops_dense": total.dense, "flops_experts": total.experts,
                  "format": w.params.fmt, "eff": format_efficiency(pc, w.params.fmt),
                  "peak_matmul_tflops": chip.tensor_peak(pc) / 1e12, "chip": chip.source}),
        TimeTerm("prefill_attention_seconds", parts.attention,
                 "2 x q_heads x (k_dim + v_dim) x (query, key) pairs per chunk (causal when "
                 "fused; MLA: + K/V rebuilt from the latent per chunk) over attn_eff (fused) or "
                 "attn_unfused_eff x the matmul peak, + unfused attention's traffic (the score "
                 "arrays' crossings, MLA's rebuilt K/V) / (score_eta x bandwidth)",
                 {"flops_fused": total.attn_fused, "flops_unfused": total.attn_unfused,
                  "score_bytes": total.score_bytes, "traffic_bytes": total.traffic_bytes,
                  "score_eta": pc.score_eta}),
        TimeTerm("prefill_scan_seconds", parts.scan,
                 f"{SCAN_FLOPS:g} x recurrent-state elements x prefill tokens over scan_eff x "
                 "the GPU's ALU peak", {"flops": total.scan,
                                        "peak_alu_tflops": chip.alu_peak(pc) / 1e12}),
        TimeTerm("prefill_fixed_seconds", parts.fixed,
                 "per chunk: (dense weights + the routed experts its tokens touch, "
                 "E x (1 - (1 - k/E)^chunk) per MoE layer) / (chunk_read_eta x bandwidth) + "
                 "per_layer_chunk_s x layers + per_expert_chunk_s x the experts it touches "
                 "per MoE layer (every "
                 "layer mlx-lm builds, computed or not)",
                 {"first_chunk_read_bytes": first_read,
                  "chunk_read_eta": pc.chunk_read_eta,
                  "layers_computed": prefill_layers(cfg), "layers_built": cfg.num_layers}),
        TimeTerm("prefill_seconds", secs, "the four parts above, summed over the chunks",
                 {"chunks": ps.chunks, "prefill_step_size": run.prefill_step_size,
                  "slowest_chunk_s": ps.largest_chunk_s, "slowest_layer_s": ps.largest_layer_s}),
        TimeTerm("first_decode_step_seconds", step,
                 "the last prompt token through the decode step (predicted_decode_seconds)"),
    ) + cold_terms + (
        TimeTerm("ttft_seconds", ttft, "prefill_seconds + first_decode_step_seconds"
                 + (" + cold_gpu_seconds" if cold_gpu else ""), {"prompt": s.prompt}),
    )
    return PromptTime(ttft, s.prompt / ttft, s.prompt, ps.chunks, ps.largest_chunk_s,
                      ps.largest_layer_s, terms)


# Step sizes the watchdog advice tries, largest first (mlx-lm's default is 2048).
_STEPS = (2048, 1536, 1024, 768, 512, 384, 256, 128, 64)


def watchdog_step(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                  chip: ChipCompute, cal: Calibration, machine_name: str
                  ) -> tuple[int, PromptTime] | None:
    """The largest --prefill-step-size below the run's whose slowest layer stays under
    ``watchdog_layer_s``, with its prompt time; None when none does (or no prediction)."""
    if cal.prefill is None:
        return None
    for step in _STEPS:
        if step >= run.prefill_step_size:
            continue
        p = predicted_ttft(cfg, replace(run, prefill_step_size=step), w, bandwidth_gbs, chip,
                           cal, machine_name)
        if p is None:
            return None
        if p.largest_layer_s <= cal.prefill.watchdog_layer_s:
            return step, p
    return None


def watchdog_warning(cfg: ModelConfig, run: Run, w: WeightsRead, bandwidth_gbs: float,
                     chip: ChipCompute, cal: Calibration, machine_name: str,
                     p: PromptTime) -> str | None:
    """A warning when the slowest predicted layer of a chunk passes the watchdog's danger zone,
    with the --prefill-step-size that keeps every chunk under it and its TTFT cost."""
    if cal.prefill is None or p.largest_layer_s <= cal.prefill.watchdog_layer_s:
        return None
    head = (f"one layer of the slowest prefill chunk is predicted at {p.largest_layer_s:.2f} s, "
            f"past the ~{cal.prefill.watchdog_layer_s:g} s where macOS's GPU watchdog has "
            f"killed long prefills on a Mac with a display ('Impacting Interactivity')")
    best = watchdog_step(cfg, run, w, bandwidth_gbs, chip, cal, machine_name)
    if best is None:
        return head + "; no --prefill-step-size down to 64 keeps chunks under it"
    step, q = best
    return (f"{head}: --prefill-step-size {step} keeps each chunk under it "
            f"(TTFT {q.ttft_s:,.1f} s, {q.ttft_s - p.ttft_s:+,.1f} s)")
