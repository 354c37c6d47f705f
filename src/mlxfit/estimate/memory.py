"""Byte terms of one mlx-lm generation: KV/state caches and the prefill/decode transients.

Pure functions of (ModelConfig, Run, calibration). Each term is one named function returning a
``Term`` with its formula and inputs, so ``--explain`` prints what the total is made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from mlxfit.calibration.constants import Backend
from mlxfit.errors import UsageError
from mlxfit.estimate import cache_sim as cs
from mlxfit.estimate import command_buffers as cbuf
from mlxfit.estimate import kernels
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model import cache_growth as growth
from mlxfit.model.caches import Full
from mlxfit.model.config import Attn, ModelConfig
from mlxfit.units import tokens


@dataclass(frozen=True)
class Run:
    """The generation being sized (mlx_lm.generate's flags)."""

    ctx: int
    gen: int = 0
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE
    kv_bits: int | None = None
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START
    max_kv_size: int | None = None
    backend: str = "metal"
    # The Mac's GPU class ('g', 's', 'd': the architecture name's last letter; '' unknown) and
    # MLX's scheduler overrides (MLX_MAX_OPS_PER_BUFFER / MLX_MAX_MB_PER_BUFFER): together they
    # give the command-buffer commit rule (mlxfit.estimate.command_buffers).
    gpu_class: str = ""
    mlx_env: tuple[tuple[str, int], ...] = ()
    # 'big' (Max, Ultra) or 'small' (base, Pro) GPU, '' unknown: with gpu_gen, which drain class
    # of the Metal transient the run takes (mlxfit.estimate.command_buffers.drain_class).
    gpu_tier: str = ""
    # The GPU's architecture generation (applegpu_g17s -> 17; 0 unknown) and the macOS major
    # (0 unknown): which attention kernel a prefill chunk takes (mlxfit.estimate.kernels).
    gpu_gen: int = 0
    macos_major: int = 0
    mlx_version: str = ""  # the MLX the run uses; '' = kernels.REFERENCE_MLX

    def schedule(self, ctx: int | None = None) -> cs.Schedule:
        return cs.Schedule(ctx=self.ctx if ctx is None else ctx, gen=self.gen,
                           prefill_step_size=self.prefill_step_size)

    @property
    def kv_quantized(self) -> bool:
        """Whether the cache is a QuantizedKVCache once it holds the whole context:
        maybe_quantize_kv_cache converts it after the call that brings its offset to
        quantized_kv_start (``c.offset >= quantized_kv_start``), the last call included."""
        return self.kv_bits is not None and self.ctx >= self.quantized_kv_start


@dataclass(frozen=True)
class Term:
    name: str
    bytes: int
    formula: str
    inputs: dict[str, Any] = field(default_factory=dict)


def run_from(*, ctx: int | str, gen: int | str = 0,
             prefill_step_size: int | str = DEFAULT_PREFILL_STEP_SIZE,
             kv_bits: int | None = None, kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
             quantized_kv_start: int | str = DEFAULT_QUANTIZED_KV_START,
             max_kv_size: int | str | None = None,
             backend: str = "metal") -> Run:
    """The Run of the twins' parameters (mlx-lm's names), checked by ``check_run``: the one
    builder every verb (and a measurement record, ``run_from_record``) goes through. Token
    counts may be given as the CLI takes them ("32k"): mlxfit.units.tokens."""
    ctx, gen, prefill_step_size, quantized_kv_start = (
        tokens(v, name) for v, name in ((ctx, "ctx"), (gen, "gen"),
                                        (prefill_step_size, "prefill_step_size"),
                                        (quantized_kv_start, "quantized_kv_start")))
    max_kv_size = None if max_kv_size is None else tokens(max_kv_size, "max_kv_size")
    run = Run(ctx=ctx, gen=gen, prefill_step_size=prefill_step_size, kv_bits=kv_bits,
              kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
              max_kv_size=max_kv_size, backend=backend)
    check_run(run)
    return run


# The fields of a Run that come from the Mac it ran on (verbs.edges.run_on), as a measurement
# record keeps them in its machine_info.
_MACHINE_FIELDS = {"gpu_class": str, "gpu_tier": str, "gpu_gen": int, "macos_major": int}


def run_machine_fields(run: Run) -> dict[str, Any]:
    return {k: getattr(run, k) for k in _MACHINE_FIELDS}


def run_from_record(rec: dict[str, Any], backend: str) -> Run:
    """The Run a ``mlxfit measure`` record measured (its keys are measure's parameters), on the
    GPU its machine_info names (records from before mlxfit kept it: the default class)."""
    run = run_from(ctx=int(rec["ctx"]), gen=int(rec.get("gen_tokens") or 0),
                   prefill_step_size=int(rec["prefill_step_size"]), kv_bits=rec.get("kv_bits"),
                   kv_group_size=int(rec.get("kv_group_size") or DEFAULT_KV_GROUP_SIZE),
                   quantized_kv_start=int(rec.get("quantized_kv_start",
                                                  DEFAULT_QUANTIZED_KV_START)),
                   max_kv_size=rec.get("max_kv_size"), backend=backend)
    info = rec.get("machine_info") if backend == "metal" else None
    if not isinstance(info, dict):
        return run
    # A hand-edited record's odd value is left out rather than trusted.
    kept = {k: info[k] for k, t in _MACHINE_FIELDS.items()
            if isinstance(info.get(k), t) and not isinstance(info.get(k), bool)}
    return replace(run, **kept) if kept else run


def check_ctx(ctx: int) -> None:
    """The context's range, worded the same by every verb (measure too)."""
    if ctx < 1:
        raise UsageError(f"ctx must be at least 1 token, got {ctx}", param="ctx")
    if ctx > 10**9:
        raise UsageError(f"ctx {ctx} is beyond any model's context", param="ctx")


def check_run(run: Run) -> None:
    """The run's numbers, whatever the model: UsageError naming the parameter (``ctx``...)."""
    check_ctx(run.ctx)
    if run.gen < 0 or run.gen >= run.ctx:
        raise UsageError(f"gen must be between 0 and ctx - 1, got {run.gen}", param="gen",
                         also=("ctx",))
    if run.prefill_step_size < 1:
        raise UsageError(f"prefill_step_size must be positive, got {run.prefill_step_size}",
                         param="prefill_step_size")
    if run.kv_bits is not None and run.kv_bits not in (2, 3, 4, 5, 6, 8):
        raise UsageError(f"kv_bits must be one of 2,3,4,5,6,8, got {run.kv_bits}",
                         param="kv_bits")
    # Checked with or without kv_bits: a value mlx-lm would reject is never silently carried.
    # mx.quantize (mlx 0.32) supports group sizes 32, 64 and 128 only ("The supported group
    # sizes are 32, 64, and 128"); mlx-lm passes --kv-group-size to it unchanged.
    if run.kv_group_size not in (32, 64, 128):
        raise UsageError(f"kv_group_size must be 32, 64 or 128 (what mx.quantize supports), "
                         f"got {run.kv_group_size}", param="kv_group_size")
    if run.quantized_kv_start < 0:
        raise UsageError(f"quantized_kv_start must be >= 0, got {run.quantized_kv_start}",
                         param="quantized_kv_start")
    if run.max_kv_size is not None and run.max_kv_size < 1:
        raise UsageError(f"max_kv_size must be positive, got {run.max_kv_size}",
                         param="max_kv_size")


def validate_run(cfg: ModelConfig, run: Run) -> None:
    """``check_run``, then what mlx-lm cannot do with this model (a quantized cache)."""
    check_run(run)
    if cfg.fails_past is not None and run.ctx > cfg.fails_past:
        raise UsageError(f"ctx: {run.ctx:,} tokens: {cfg.fails_why} past "
                         f"{cfg.fails_past:,} tokens", param="ctx")
    if run.kv_bits is not None:
        if cfg.no_quantized_attention:
            raise UsageError(f"kv_bits: mlx-lm's {cfg.family} attention reads the cache's "
                             "arrays directly and fails on a quantized cache (mlx-lm 0.32)",
                             param="kv_bits")
        if cfg.never_quantized:
            what = "LayerCache" if cfg.family == "deepseek_v41" else "CacheList"
            raise UsageError(f"kv_bits: mlx-lm never quantizes this model's {what} "
                             "caches (no to_quantized), so the flag has no effect",
                             param="kv_bits")
        if any(a.mla is not None for a, _ in attn_groups(cfg, run)):
            if cfg.family == "deepseek_v32":
                raise UsageError("kv_bits: mlx-lm never quantizes this model's CacheList "
                                 "caches (no to_quantized), so the flag has no effect",
                                 param="kv_bits")
            raise UsageError("kv_bits: mlx-lm's MLA attention cannot use a quantized cache "
                             "(it fails with AttributeError in mlx-lm 0.32)", param="kv_bits")
        refusal = kv_bits_refusal(cfg, run)
        if refusal:
            raise UsageError(f"kv_bits: {refusal}", param="kv_bits")
        for a, _ in attn_groups(cfg, run):
            why = a.cache.kv_group_refusal((a.k_dim, a.v_dim), run.kv_group_size)
            if why:
                raise UsageError(f"kv_bits: {why}", param="kv_bits", also=("kv_group_size",))


def as_mlx_lm_runs(cfg: ModelConfig, run: Run) -> tuple[Run, tuple[str, ...]]:
    """The run as mlx-lm runs this model, and a warning for each flag it silently ignores:
    ``--kv-bits`` where no cache has a to_quantized (CacheList, LayerCache: generate.py
    maybe_quantize_kv_cache skips them), ``--max-kv-size`` where the model builds its own
    caches (make_prompt_cache calls model.make_cache() and never reads the flag)."""
    said = []
    if run.kv_bits is not None and cfg.never_quantized:
        what = "LayerCache" if cfg.family == "deepseek_v41" else "CacheList"
        said.append(f"--kv-bits has no effect: mlx-lm never quantizes this model's {what} "
                    "caches (no to_quantized); sized unquantized, as mlx-lm runs it")
        run = replace(run, kv_bits=None)
    if run.max_kv_size is not None and cfg.own_cache:
        said.append("--max-kv-size has no effect: this model builds its own caches "
                    "(make_cache), which mlx-lm's make_prompt_cache uses as they are")
    return run, tuple(said)


def kv_bits_refusal(cfg: ModelConfig, run: Run) -> str | None:
    """Why a cache of this run cannot be quantized (its kind's ``to_quantized`` raises), or
    None."""
    return next((a.cache.kv_bits_refusal for a, _ in attn_groups(cfg, run)
                 if a.cache.kv_bits_refusal), None)


def as_run_sees(a: Attn, cfg: ModelConfig, run: Run) -> Attn:
    """The layer as this run builds its cache: --max-kv-size acts only on models without their
    own make_cache() (mlx_lm.models.cache.make_prompt_cache), as the kind decides."""
    if run.max_kv_size and not cfg.own_cache:
        kind = a.cache.under_max_kv_size(run.max_kv_size)
        if kind != a.cache:
            return replace(a, cache=kind)
    return a


def attn_groups(cfg: ModelConfig, run: Run, *, prefill_compute: bool = False
                ) -> list[tuple[Attn, int]]:
    """Distinct attention layouts for this run with their layer counts (with prefill_compute,
    only the layers whose attention a prefill chunk actually computes)."""
    groups = cfg.attn_groups_computed_in_prefill if prefill_compute else cfg.attn_groups
    return [(as_run_sees(a, cfg, run), n) for a, n in groups]


def per_token_bytes(a: Attn, act_bytes: int) -> int:
    """Bytes one cached token costs one layer in the activation dtype (keys + values)."""
    return a.kv_heads * (a.k_dim + a.v_dim) * act_bytes


def quantized_per_token_bytes(a: Attn, bits: int, group: int, act_bytes: int) -> float:
    """QuantizedKVCache: packed uint32 (bits/8 per element) plus a scale and a bias per group
    in the activation dtype."""
    elems = a.kv_heads * (a.k_dim + a.v_dim)
    return elems * bits / 8 + elems / group * 2 * act_bytes


# --------------------------------------------------------------------------- cache bytes


def layer_kv_bytes(a: Attn, tokens: int, quantized: bool, run: Run, act_bytes: int) -> float:
    """One layer's KV bytes for ``tokens`` cached tokens; ``quantized``: the run's caches are
    converted (a QuantizedKVCache where the layer's kind converts)."""
    if a.cache.holds_quantized(quantized):
        return tokens * quantized_per_token_bytes(a, run.kv_bits or 8, run.kv_group_size, act_bytes)
    return tokens * per_token_bytes(a, act_bytes)


def compress_bytes(a: Attn, tokens: int, act_bytes: int) -> int:
    """deepseek_v41 compressed KV once a layer has taken in ``tokens``: the closed groups
    (head_dim + index keys) and the open group's pending rows, all float32: the compressor and
    the indexer read the float32 hyper-connection stream, and the fp4 round trip keeps that
    dtype (deepseek_v41.py _compress), whatever the activation dtype."""
    if a.compress is None:
        return 0
    closed, pending = growth.compressed_rows(tokens, a.compress.ratio)
    return (closed * a.compress.width + pending * a.compress.pending) * growth.COMPRESSED_BYTES


def layer_bytes_prefill(a: Attn, s: cs.Schedule, n_chunks: int, quantized: bool, run: Run,
                        act_bytes: int) -> float:
    """One layer's cache bytes right after the n-th prefill chunk."""
    return (layer_kv_bytes(a, a.cache.tokens_prefill(s, n_chunks), quantized, run, act_bytes)
            + compress_bytes(a, growth.tokens_seen_prefill(s, n_chunks), act_bytes))


def layer_bytes_final(a: Attn, s: cs.Schedule, quantized: bool, run: Run,
                      act_bytes: int) -> float:
    """One layer's cache bytes once it holds the schedule's whole context."""
    return (layer_kv_bytes(a, a.cache.tokens_final(s), quantized, run, act_bytes)
            + compress_bytes(a, s.ctx, act_bytes))


def kv_bytes_final(cfg: ModelConfig, run: Run) -> int:
    s = run.schedule()
    return int(sum(n * layer_bytes_final(a, s, run.kv_quantized, run, cfg.act_bytes)
                   for a, n in attn_groups(cfg, run)))


def kv_term(cfg: ModelConfig, run: Run) -> Term:
    """KV cache holding the whole context, in mlx-lm's allocation steps."""
    s = run.schedule()
    groups = attn_groups(cfg, run)
    kinds: dict[str, int] = {}
    for a, n in groups:
        kinds[a.cache.name] = kinds.get(a.cache.name, 0) + n
    quant = run.kv_quantized
    return Term(
        "kv_cache",
        kv_bytes_final(cfg, run),
        "sum over attention layers: allocated tokens x kv_heads x (k_dim + v_dim) x dtype bytes"
        + (" (quantized: bits/8 + 2*dtype/group per element)" if quant else ""),
        {
            "layers_by_cache": kinds,
            "full_cache_tokens": Full().tokens_final(s),
            "bytes_per_token_all_layers": sum(n * per_token_bytes(a, cfg.act_bytes)
                                              for a, n in groups),
            "kv_bits": run.kv_bits if quant else None,
        },
    )


def state_bytes_final(cfg: ModelConfig, run: Run) -> int:
    """The ArraysCache states once the run's whole context went through the model."""
    return cfg.state_bytes_at(run.ctx)


def state_term(cfg: ModelConfig, run: Run) -> Term:
    """ArraysCache state of linear-attention / SSM / conv layers: constant in the context
    (LongCat's n-gram ids: the last n-1 of the tokens seen)."""
    kinds: dict[str, int] = {}
    for ly in cfg.layers:
        if ly.state_kind:
            kinds[ly.state_kind.name] = kinds.get(ly.state_kind.name, 0) + 1
    return Term("recurrent_state", state_bytes_final(cfg, run),
                "sum over linear/SSM/conv layers of conv state + recurrent state", kinds)


# --------------------------------------------------------------------------- widths


def q_width(cfg: ModelConfig) -> int:
    """Widest query projection output per token (x2 where q_proj also carries an output gate;
    MLA: heads x (nope + rope))."""
    w = 0
    for a, _ in cfg.attn_groups:
        if a.mla:
            w = max(w, a.mla.heads * (a.mla.qk_nope + a.mla.qk_rope))
        else:
            w = max(w, a.q_heads * a.head_dim * (2 if cfg.gated_q else 1))
    return w


def ffn_width(cfg: ModelConfig) -> int:
    """Per-token MLP width a chunk computes: the dense intermediate, or for MoE layers the
    top_k routed experts' intermediates plus the shared experts (the number of experts does
    not matter: only the routed copies are materialized)."""
    dense = cfg.intermediate if any(not ly.moe for ly in cfg.layers) or not cfg.is_moe else 0
    if not cfg.is_moe:
        return dense
    return max(dense, cfg.top_k * cfg.moe_intermediate + cfg.shared_intermediate)


def gated_delta_token_elems(cfg: ModelConfig) -> int:
    """Elements one gated-delta layer writes per prompt token on the kernel path (Metal):
    qwen3_5.py / qwen3_next.py GatedDeltaNet.__call__ and gated_delta.py gated_delta_update.
    The packed q/k/v projection (conv_dim = 2 x Hk x Dk + Hv x Dv) is written four times (the
    projection, its concatenation after the conv window, conv1d, SiLU), q and k twice more
    each (rms_norm, then the scale: 4 x Hk x Dk), and the value width three times (z, the
    kernel's output, the gated RMSNorm). b, a, beta and g are Hv wide: left out. 0 for layers
    without the gated delta rule."""
    if cfg.linear_scan != "gated_delta":
        return 0
    key = (cfg.linear_k_heads or cfg.linear_v_heads) * cfg.linear_k_dim
    value = cfg.linear_v_heads * cfg.linear_v_dim
    conv_dim = 2 * key + value
    return 4 * conv_dim + 4 * key + 3 * value


def _act_dtype_bytes(cfg: ModelConfig, be: Backend) -> float:
    # The CPU backend upcasts norms and RoPE to float32, so bf16 costs more than 2 bytes.
    return be.bf16_act_bytes if cfg.act_bytes == 2 else float(cfg.act_bytes)


def attn_unfused(a: Attn, run: Run, cfg: ModelConfig, quantized: bool, queries: int) -> bool:
    """Whether a prefill chunk of ``queries`` tokens materializes this layer's score matrix
    (the kernel decision of mlxfit.estimate.kernels, shared with the compute model)."""
    return not kernels.prefill_fused(a, cfg, queries, quantized, backend=run.backend,
                                     gpu_gen=run.gpu_gen, macos_major=run.macos_major,
                                     mlx_version=run.mlx_version or kernels.REFERENCE_MLX)


# --------------------------------------------------------------------------- transients


@dataclass(frozen=True)
class Phase:
    """One candidate peak moment: the caches then and the transient on top."""

    name: str
    kv_bytes: int
    terms: tuple[Term, ...]

    @property
    def transient(self) -> int:
        return sum(t.bytes for t in self.terms)

    @property
    def total_over_weights(self) -> int:
        return self.kv_bytes + self.transient


def floor_scale(cfg: ModelConfig, c: int, be: Backend, run: Run | None,
                weights_bytes: int) -> tuple[float, tuple[int, int]]:
    """The command-buffer floor under this run's commit rule over the rule it was fitted on
    (50 ops / 50 MB: every fitted run is on a Pro/Max/Ultra GPU), and that rule. 1.0 when the
    rules agree; otherwise the ratio of the mechanism's held bytes (estimate/command_buffers)."""
    if run is None:
        return 1.0, cbuf.FITTED_RULE
    rule = cbuf.commit_rule(run.gpu_class or "s", dict(run.mlx_env))
    if rule == cbuf.FITTED_RULE:
        return 1.0, rule
    return _held_ratio(cfg, weights_bytes, c, rule, be.cb_inflight), rule


@lru_cache(maxsize=1024)
def _held_ratio(cfg: ModelConfig, weights_bytes: int, c: int, rule: tuple[int, int],
                inflight: float) -> float:
    # Cache slices are left out of the sizes (keys = 0): they move commits at long context
    # only, and leaving them out keeps one computation per chunk size.
    ref = cbuf.held_bytes(cbuf.buffer_sizes(cfg, weights_bytes, c, 0, *cbuf.FITTED_RULE),
                          inflight)
    new = cbuf.held_bytes(cbuf.buffer_sizes(cfg, weights_bytes, c, 0, *rule), inflight)
    ratio = new / ref if ref else 1.0
    # A rule tighter in both limits never holds more (looser: never less); where the commit
    # points fall can push the modelled ratio a little across 1, which is not the mechanism.
    if rule[0] <= cbuf.FITTED_RULE[0] and rule[1] <= cbuf.FITTED_RULE[1]:
        ratio = min(ratio, 1.0)
    elif rule[0] >= cbuf.FITTED_RULE[0] and rule[1] >= cbuf.FITTED_RULE[1]:
        ratio = max(ratio, 1.0)
    return ratio


def floor_level(be: Backend, run: Run | None) -> tuple[float, str]:
    """The Metal floor's level for the run's drain class (issue 18: Max/Ultra, base/Pro, M5;
    mlxfit.estimate.command_buffers.drain_class) and that class. Without a run: Max/Ultra."""
    k = cbuf.drain_class(run.gpu_class, run.gpu_gen, run.gpu_tier) if run else "big"
    return {"small": be.act_floor_small, "m5": be.act_floor_m5}.get(k, be.act_floor), k


def activations_term(cfg: ModelConfig, c: int, be: Backend, run: Run | None = None,
                     weights_bytes: int = 0) -> Term:
    """A chunk's activations: linear in the chunk and in the model's widths, or the Metal
    scheduler's floor (scaled to the run's command-buffer commit rule), whichever is larger."""
    h, f, q = cfg.hidden, ffn_width(cfg), q_width(cfg)
    moe_copies = cfg.top_k * cfg.hidden if cfg.is_moe else 0
    if cfg.num_layers == 1:
        # The only layer's attention and MLP feed nothing a cache needs: never computed.
        f = q = moe_copies = 0
    elems = be.act_hidden * h + be.act_ffn * f + be.act_q * q + be.act_moe * moe_copies
    per_tok = _act_dtype_bytes(cfg, be) * elems
    # Metal holds intermediates until their command buffer completes (MLX commits every ~50
    # ops / 50 MB): small per-op arrays saturate at a device-level live set, a floor reached
    # at act_floor_tokens of chunk.
    level, drain = floor_level(be, run)
    floor = level * min(1.0, c / be.act_floor_tokens) if level else 0.0
    scale, rule = floor_scale(cfg, c, be, run, weights_bytes) if floor else (1.0, (0, 0))
    floor *= scale
    linear = 0.0
    if cfg.linear_scan == "gated_delta" and be.act_linear:
        # Gated-delta layers (Qwen3-Next / 3.5): act_linear layers' worth of the arrays one
        # layer writes per token (gated_delta_token_elems), held while their buffers run.
        linear = be.act_linear * c * gated_delta_token_elems(cfg) * cfg.act_bytes
    # RG-LRU (recurrent_gemma.py RGLRU): its gates, decay and normalized input, lru_width wide
    # per token, on top of a plain layer's activations.
    lru = be.rglru_arrays * c * cfg.lru_width * _act_dtype_bytes(cfg, be)
    return Term(
        "activations",
        int(max(c * per_tok, floor) + linear + lru),
        "max(chunk x dtype x (act_hidden*hidden + act_ffn*ffn + act_q*q_width "
        "+ act_moe*top_k*hidden), act_floor[drain_class] x min(1, chunk/act_floor_tokens) "
        "x floor_scale) + act_linear x chunk x gated_delta_token_elems x dtype "
        "+ rglru_arrays x chunk x lru_width x dtype",
        {"chunk": c, "hidden": h, "ffn": f, "q_width": q, "moe_copies": moe_copies,
         "bytes_per_chunk_token": round(per_tok), "floor": int(floor),
         "drain_class": drain, "commit_rule_ops_mb": list(rule),
         "floor_scale": round(scale, 3),
         "gated_delta": int(linear), "rg_lru": int(lru)},
    )


def linear_scan_bytes(cfg: ModelConfig, c: int, be: Backend) -> float:
    """A linear-attention layer's recurrence run op by op (no kernel on this backend): the
    state of every step stays alive until the chunk is done, so a per-token (Hv, Dv, Dk) state
    in the recurrence's own dtype. The count per token is measured per recurrence."""
    per_step = {"gated_delta": be.linear_fallback, "wkv7": be.wkv_fallback,
                "gla": be.gla_scan}.get(cfg.linear_scan, 0.0)
    return (per_step * c * cfg.linear_v_heads * cfg.linear_k_dim * cfg.linear_v_dim
            * cfg.linear_state_bytes)


def scores_term(cfg: ModelConfig, run: Run, n_chunk: int, be: Backend,
                quantized: bool) -> Term:
    """The largest attention intermediate of one layer: unfused score matrices (plus the bool
    mask) and MLA's pe_scores and rebuilt per-head K/V; plus, added, a state-space mixer's
    chunked-scan intermediates."""
    s = run.schedule()
    c = s.chunk_size(n_chunk)
    b = cfg.act_bytes
    best, best_in = 0.0, {}
    for a, _ in attn_groups(cfg, run, prefill_compute=True):
        k = s.keys_seen(a, n_chunk)
        v = 0.0
        q_attn = a.cache.holds_quantized(quantized)
        unfused = attn_unfused(a, run, cfg, q_attn, c)
        if q_attn:
            arrays = be.quantized_score_arrays  # mlx-lm's hand-written quantized SDPA
        elif cfg.scores_always:
            arrays = be.softcap_score_arrays  # hand-written softcapped attention (Gemma 2)
        else:
            arrays = be.sink_score_arrays if a.sinks else be.score_arrays
        if a.mla:
            m = a.mla
            arrays = be.mla_score_arrays if unfused else 1.0  # pe_scores is always built
            v += arrays * m.heads * c * k * b + c * k
            v += be.mla_kv_arrays * m.heads * k * (m.qk_nope + m.v_head) * b
        elif unfused:
            # deepseek_v41's _sparse_attention casts queries and keys to float32 first.
            v += arrays * a.q_heads * c * k * (4 if a.cache.float32_scores else b) + c * k
        if v > best:
            best = v
            best_in = {"q_heads": a.q_heads, "head_dim": a.head_dim, "keys": k, "chunk": c,
                       "unfused": unfused, "mla": a.mla is not None,
                       "score_arrays": arrays if (unfused or a.mla) else 0}
    # A linear-attention recurrence without a kernel runs in other layers than the
    # attention, so the larger of the two is alive.
    lin = linear_scan_bytes(cfg, c, be)
    if lin > best:
        best, best_in = lin, {"linear_attention_scan": int(lin), "chunk": c,
                              "recurrence": cfg.linear_scan}
    for a, _ in attn_groups(cfg, run, prefill_compute=True):
        if a.index is not None:
            # deepseek_v41's indexer: q (chunk, heads, dim) against every index key, a float32
            # (chunk, heads, keys) score matrix before it is summed over the heads.
            keys = s.index_keys(a, n_chunk)
            idx = be.index_score_arrays * c * a.index.heads * keys * 4
            if idx > best:
                best, best_in = idx, {"sparse_index_scores": int(idx), "index_keys": keys,
                                      "chunk": c}
    mixer = 0.0
    if cfg.ssm_heads:
        # Mamba2 SSD (mlx_lm/models/ssm.py ssm_attn): float32 (heads, s, s) decay/attention
        # matrices per 256-token step, plus per-token float32 copies of x.
        step = min(c, 256)
        mixer = (be.ssd_square * cfg.ssm_heads * step * step * 4
                 + be.ssd_token * c * cfg.ssm_heads * cfg.ssm_head_dim * 4)
    if mixer:
        best_in["state_space_scan"] = int(mixer)
    return Term("attention_scores", int(best + mixer),
                "unfused layers: score_arrays x q_heads x chunk x keys x dtype + chunk x keys "
                "(mask); MLA: pe_scores + heads x keys x (qk_nope + v_head) x dtype; or an "
                "op-by-op linear recurrence: per-step states x chunk x Hv x Dv x Dk x state "
                "dtype; + SSM chunked-scan intermediates", best_in)


def keys_copy_term(cfg: ModelConfig, run: Run, n_chunk: int, be: Backend,
                   quantized: bool = False) -> Term:
    """Keys and values gathered for the chunk's attention: proportional to the keys seen and
    one layer's KV bytes per token (packed bytes when the cache is quantized)."""
    s = run.schedule()
    best = 0.0
    for a, _ in attn_groups(cfg, run, prefill_compute=True):
        best = max(best, layer_kv_bytes(a, s.keys_seen(a, n_chunk), quantized, run,
                                        cfg.act_bytes))
    return Term("kv_keys_copy", int(be.act_kv * best),
                "act_kv x keys x one layer's KV bytes per token", {"act_kv": be.act_kv})


def growth_copy_term(cfg: ModelConfig, run: Run, n_chunk: int, be: Backend,
                     quantized: bool) -> Term:
    """A KVCache grows by concatenating: the old buffer of a layer lives beside the new one."""
    s = run.schedule()
    best = 0.0
    for a, _ in attn_groups(cfg, run):
        old = layer_bytes_prefill(a, s, n_chunk - 1, quantized, run, cfg.act_bytes)
        best = max(best, old if n_chunk > 1 else 0)
    return Term("kv_growth_copy", int(be.growth_copy_layers * best),
                "growth_copy_layers x one layer's cache before this chunk (concatenate copy)",
                {"growth_copy_layers": be.growth_copy_layers})


def prefill_phase(cfg: ModelConfig, run: Run, be: Backend, n_chunk: int,
                  weights_bytes: int = 0) -> Phase:
    """Caches and transient while the n-th prefill chunk runs."""
    s = run.schedule()
    c = s.chunk_size(n_chunk)
    start = run.quantized_kv_start
    # mlx-lm converts a cache after a model call (maybe_quantize_kv_cache), so the first chunk
    # always runs on the full-precision cache, even with --quantized-kv-start 0.
    quant_now = s.kv_quantized_during(n_chunk, run.kv_bits, start)
    converting = s.kv_converted_after(n_chunk, run.kv_bits, start)
    groups = attn_groups(cfg, run)
    kv = sum(n * layer_bytes_prefill(a, s, n_chunk, quant_now, run, cfg.act_bytes)
             for a, n in groups)
    terms = [
        activations_term(cfg, c, be, run, weights_bytes),
        scores_term(cfg, run, n_chunk, be, quant_now),
        keys_copy_term(cfg, run, n_chunk, be, quant_now),
        growth_copy_term(cfg, run, n_chunk, be, quant_now),
    ]
    if converting:
        q = sum(n * layer_bytes_prefill(a, s, n_chunk, True, run, cfg.act_bytes)
                for a, n in groups)
        terms.append(Term("kv_quantize_copy", int(q),
                          "the chunk that crosses --quantized-kv-start holds the bf16 cache and "
                          "its quantized copy", {"quantized_kv_start": start}))
    terms.append(Term("base", int(be.base_bytes), "backend allocations present in every run"))
    state = cfg.state_bytes_at(s.offset_after(n_chunk))
    return Phase(f"prefill chunk {n_chunk} ({c} tokens)", int(kv + state),
                 tuple(terms))


def decode_phase(cfg: ModelConfig, run: Run, be: Backend) -> Phase:
    """The last decode step: caches at the context, one layer's growth copy, the logits."""
    s = run.schedule()
    quant = run.kv_quantized
    kv = kv_bytes_final(cfg, run)
    copy = 0.0
    for a, _ in attn_groups(cfg, run):
        # The step that last grew (or trimmed) the cache held the old buffer beside the new.
        earlier = cs.Schedule(max(run.ctx - growth.STEP, 1), 0, s.prefill_step_size)
        if a.cache.resized_last_after_prefill:
            before = layer_bytes_prefill(a, s, s.chunks()[2], quant, run, cfg.act_bytes)
        else:
            before = layer_bytes_final(a, earlier, quant, run, cfg.act_bytes)
        copy = max(copy, before)
    logits = cfg.vocab * 4 * 2  # float32 logits and log-probs of one position
    terms = (
        Term("kv_growth_copy", int(be.growth_copy_layers * copy),
             "one layer's cache buffer before its last 256-token growth",
             {"growth_copy_layers": be.growth_copy_layers}),
        Term("logits", logits, "vocab x 4 bytes x 2 (logits and log-probs, float32)",
             {"vocab": cfg.vocab}),
        Term("base", int(be.base_bytes), "backend allocations present in every run"),
    )
    return Phase("decode at full context", int(kv + state_bytes_final(cfg, run)), terms)


def peak_phase(cfg: ModelConfig, run: Run, be: Backend, weights_bytes: int = 0) -> Phase:
    """The phase with the largest caches + transient: the last two prefill chunks (the last
    full chunk has the most activations, the final chunk the most keys) or decode."""
    _, _, total = run.schedule().chunks()
    cands = [decode_phase(cfg, run, be)]
    for n in {total, total - 1}:
        if n >= 1:
            cands.append(prefill_phase(cfg, run, be, n, weights_bytes))
    return max(cands, key=lambda p: p.total_over_weights)
