"""The pure planning behind ``mlxfit cluster``: the proportional pipeline split, each host's
totals at the context, the predicted decode speed, and the choice between strategies
(``plan_cluster``). What mlx-lm supports per model module and how it shards a model (the facts
this planner reads) are in ``mlxfit.verbs.cluster.sharding``. No file, network or SKU-table
access happens here: every figure comes from the arguments, so this module can be tested in
isolation. How mlx-lm distributes a model is described in ``mlxfit.verbs.cluster.twin``'s docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mlxfit.calibration.constants import Calibration
from mlxfit.errors import UsageError
from mlxfit.estimate.bands import peak_band_at, plan_bands
from mlxfit.estimate.compute import decode_matmul_flops
from mlxfit.estimate.memory import Run, Term, kv_bytes_final, state_bytes_final, validate_run
from mlxfit.estimate.solve import context_limit, largest_true, run_at, totals_at
from mlxfit.estimate.speed import (
    cache_seconds,
    decode_factors,
    layer_seconds,
    read_seconds,
    unfused_decode_layers,
    weights_read_term,
    weights_seconds,
)
from mlxfit.model.config import ModelConfig
from mlxfit.model.families import mlx_lm_module
from mlxfit.model.inputs import MatmulParams, WeightsRead
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import is_expert, is_vision
from mlxfit.verbs.cluster.hosts import HostMachine, Link
from mlxfit.verbs.cluster.prefill import pipeline_ttft, tensor_ttft
from mlxfit.verbs.cluster.results import ClusterResult, HostPlan, Plan
from mlxfit.verbs.cluster.sharding import (
    LAYER_RE,
    MLA_MODULES,
    PIPELINE_MODULES,
    TENSOR_MODELLED,
    TENSOR_MODULES,
    WeightsSplit,
    even_split,
    rank_ranges,
    shard_axis,
    split_weights,
    tensor_kind,
    tp_cfg,
    tp_refusal,
)

STRATEGIES = ("pipeline", "tensor", "auto")

# --------------------------------------------------------------------------- pure planning


def _sub_cfg(cfg: ModelConfig, start: int, end: int) -> ModelConfig:
    layers = cfg.layers[start:end]
    return replace(cfg, layers=tuple(layers), num_layers=len(layers))


def proportional_split(costs: Sequence[float], capacities: Sequence[float]) -> tuple[int, ...]:
    """Contiguous layers per rank, at least one each, in proportion to what each host can
    hold: the split minimizing the largest load/capacity ratio (then the sum of squared
    ratios, so the other hosts are balanced too). ``costs`` are per layer in model order,
    ``capacities`` per rank; rank N-1 takes the first layers, as in mlx-lm. Exact (dynamic
    programming over stage boundaries)."""
    n, L = len(capacities), len(costs)
    if n > L:
        raise UsageError(f"{n} hosts for {L} layers: a pipeline stage needs at least one layer")
    if n == 1:
        return (L,)
    caps = [max(float(c), 1.0) for c in capacities][::-1]  # stage order: first layers first
    pre = [0.0]
    for c in costs:
        pre.append(pre[-1] + c)
    inf = (float("inf"), float("inf"))
    # best[s][i]: the best (max ratio, sum of squares) covering layers [0, i) with stages 0..s
    best = [[inf] * (L + 1) for _ in range(n)]
    back = [[0] * (L + 1) for _ in range(n)]
    for i in range(1, L - n + 2):
        r = pre[i] / caps[0]
        best[0][i] = (r, r * r)
    for s in range(1, n):
        for i in range(s + 1, L - (n - s - 1) + 1):
            cand, arg = inf, 0
            for j in range(s, i):
                prev = best[s - 1][j]
                if prev == inf:
                    continue
                r = (pre[i] - pre[j]) / caps[s]
                v = (max(prev[0], r), prev[1] + r * r)
                if v < cand:
                    cand, arg = v, j
            best[s][i], back[s][i] = cand, arg
    counts, i = [], L
    for s in range(n - 1, 0, -1):
        j = back[s][i]
        counts.append(i - j)
        i = j
    counts.append(i)
    # counts is in reverse stage order = rank order (rank 0 runs the last layers)
    return tuple(counts)


@dataclass(frozen=True)
class _Model:
    """What the planners read: config, weights by role, per-tensor sharding for TP."""

    cfg: ModelConfig
    weights: WeightsSplit
    tensors: tuple[TensorInfo, ...]
    module: str
    with_vision: bool = False
    params: MatmulParams | None = None  # prefill's matmul parameters (estimate/compute.py)


def _band_at(cal: Calibration, h: HostMachine, cfg: ModelConfig, weights_total: int,
             backend: str):
    """The host's peak band at context n (the whole model's segment on its chip), or None."""
    if cal.bands is None:
        return None
    return peak_band_at(cal.bands, h.machine_name, cfg, weights_total, cfg.family_known,
                        backend)


def _fits_at(total: int, usable: int, band, n: int, side: int | None = 1) -> bool:
    """The largest safe context's rule (issue 27): the UPPER bound of the peak band fits
    (side 0: the lower bound, the band's other end; None: the estimate itself)."""
    if band is None or side is None:
        return total <= usable
    return total * (1 + band(n)[side]) <= usable


def _host_plan(h: HostMachine, cfg: ModelConfig, run: Run, cal: Calibration, *,
               layers: tuple[int, int], own: int, replicated: int, comm: int,
               seconds: float | None, band=None) -> HostPlan:
    t = totals_at(cfg, own + replicated, run, cal)
    total = t.total + comm
    pb = band(run.ctx) if band is not None else None
    terms = (
        Term("weights", own + replicated, "own share + replicated weights",
             {"own": own, "replicated": replicated}),
        Term("kv_cache", t.kv, "its layers' caches at the context"),
        Term("recurrent_state", t.state, "its layers' linear/SSM state"),
        Term("transient", t.transient + comm, f"peak phase '{t.phase.name}' + comm buffers",
             {"phase": t.phase.name, "comm_buffers": comm}),
        *t.phase.terms,
    )
    return HostPlan(
        rank=h.rank, label=h.label, machine_name=h.machine_name, ram_bytes=h.ram_bytes,
        bandwidth_gbs=h.bandwidth_gbs, usable_bytes=h.usable_bytes,
        usable_source=h.usable_source, layers=layers, weights_bytes=own + replicated,
        sharded_weights_bytes=own, replicated_weights_bytes=replicated, kv_bytes=t.kv,
        state_bytes=t.state, transient_bytes=t.transient + comm, comm_bytes=comm,
        total_bytes=total, peak_phase=t.phase.name, fits=total <= h.usable_bytes,
        decode_seconds=seconds, terms=terms,
        peak_band=(int(total * (1 + pb[0])), round(total * (1 + pb[1]))) if pb else None)


def _replicated_read(cfg: ModelConfig, w: WeightsSplit) -> int:
    """The replicated weights read per token, by fit's rule: the input embedding is a row
    lookup unless tied (the head then reads the whole table), per-layer lookup tables are
    gathered, not streamed."""
    return weights_read_term(cfg, WeightsRead(w.replicated, 0, w.embedding, w.tied,
                                              w.lookup)).bytes


def _pipeline_comm_bytes(cfg: ModelConfig, run: Run, n: int) -> int:
    """Per host during the largest prefill chunk (Schedule.largest_call): the received hidden
    state and the all_gather output (n copies), in the activation dtype."""
    if n == 1:
        return 0
    return (n + 1) * run.schedule().largest_call * cfg.hidden * cfg.act_bytes


def _tp_comm_bytes(cfg: ModelConfig, run: Run, n: int) -> int:
    """The all_sum's input and output of the largest chunk's hidden state."""
    if n == 1:
        return 0
    return 2 * run.schedule().largest_call * cfg.hidden * cfg.act_bytes


PIPELINE_ASSUMPTIONS = (
    ("every rank holds the embeddings, final norm and output head (mlx-lm's sharded_load loads "
     "every non-layer weight on every stage) and computes the logits after an all_gather"),
    ("decode time = the stages one after the other (batch 1: nothing overlaps) + the slowest "
     "host's output-head read + (N-1) sends and an (N-1)-step ring all_gather of one hidden "
     "state, each hop at the link's latency + bytes/bandwidth"),
    ("each stage reads its layers' weights (routed experts at top_k/num_experts) and caches at "
     "its own memory bandwidth, with calibration.toml's eta and per-layer costs"),
    "the split is fixed at the requested context; the largest safe context is for that split",
)
TENSOR_ASSUMPTIONS = (
    ("each host holds 1/N of the sharded weights (attention q/k/v/o, MLP and expert widths) and "
     "all of the replicated ones (embeddings, norms, routers, output head, MLA latent "
     "projections); KV heads are divided by N (an MLA latent cache is replicated)"),
    ("decode time = the slowest host's share read at its bandwidth + two all-reduces per layer "
     "(attention output, MLP/MoE output) of one hidden state, each a ring of 2(N-1) steps of "
     "link latency + (bytes/N)/bandwidth"),
    "the hosts compute in lock step: the slowest host sets the pace",
)


def plan_pipeline(m: _Model, hosts: Sequence[HostMachine], run: Run, cal: Calibration,
                  link: Link, limit: int) -> Plan:
    cfg, w, n = m.cfg, m.weights, len(hosts)
    if n > 1 and m.module not in PIPELINE_MODULES:
        return Plan("pipeline", False,
                    f"mlx-lm's {m.module} has no pipeline() (model.model.pipeline): "
                    "sharded_load refuses pipeline parallelism for it")
    if n > cfg.num_layers:
        return Plan("pipeline", False,
                    f"{n} hosts for {cfg.num_layers} layers: each stage needs a layer")
    comm = _pipeline_comm_bytes(cfg, run, n)

    # Fixed cost per host: the replicated weights and the whole model's transient (its
    # activations do not shrink with fewer layers); per layer: weights + caches at the context.
    full = totals_at(cfg, w.total, run, cal)
    fixed = w.replicated + full.transient + comm
    costs = []
    for i in range(cfg.num_layers):
        one = _sub_cfg(cfg, i, i + 1)
        costs.append(w.per_layer[i] + kv_bytes_final(one, run) + state_bytes_final(one, run))
    caps = [h.usable_bytes - fixed for h in hosts]
    split = proportional_split(costs, caps) if n > 1 else (cfg.num_layers,)
    ranges = rank_ranges(split)
    subs = [_sub_cfg(cfg, a, b) for a, b in ranges]
    own = [sum(w.per_layer[a:b]) for a, b in ranges]
    own_exp = [sum(w.per_layer_experts[a:b]) for a, b in ranges]

    bands = [_band_at(cal, h, cfg, w.total, run.backend) for h in hosts]

    def all_fit(nctx: int, sp: Sequence[tuple[int, int]] = ranges,
                side: int | None = 1) -> bool:
        r = run_at(run, nctx)
        c = _pipeline_comm_bytes(cfg, r, n)
        for h, (a, b), band in zip(hosts, sp, bands):
            sub = _sub_cfg(cfg, a, b)
            if not _fits_at(totals_at(sub, sum(w.per_layer[a:b]) + w.replicated, r, cal).total
                            + c, h.usable_bytes, band, nctx, side):
                return False
        return True

    # Speed.
    speed_known = all(h.bandwidth_gbs for h in hosts)
    d = cal.decode
    stage_s: list[float | None] = []
    head_s = 0.0
    if speed_known:
        for h, sub, ob, oe in zip(hosts, subs, own, own_exp):
            ultra = decode_factors(cal, run.backend, h.machine_name)[1]
            fused = decode_factors(cal, run.backend, h.machine_name)[0]
            stage_s.append(weights_seconds(cfg, WeightsRead(ob, oe, 0, True), h.bandwidth_gbs,
                                           d, ultra=ultra)
                           + cache_seconds(sub, run, h.bandwidth_gbs, d, fused_decode=fused,
                                           ultra=ultra,
                                           matmul_flops=decode_matmul_flops(h.compute))
                           + layer_seconds(sub.num_layers, sub.moe_layers, d, fixed=False,
                                           unfused_layers=unfused_decode_layers(sub, run,
                                                                                fused)))
            head_s = max(head_s, read_seconds(_replicated_read(cfg, w), h.bandwidth_gbs, d,
                                              ultra=ultra))
    else:
        stage_s = [None] * n
    msg = cfg.hidden * cfg.act_bytes
    comm_s = 2 * (n - 1) * link.hop_seconds(msg) if n > 1 else 0.0

    host_plans = tuple(
        _host_plan(h, sub, run, cal, layers=rg, own=ob, replicated=w.replicated, comm=comm,
                   seconds=s, band=band)
        for h, sub, rg, ob, s, band in zip(hosts, subs, ranges, own, stage_s, bands))
    fits = all(hp.fits for hp in host_plans)
    failing = tuple(hp.label for hp in host_plans if not hp.fits)
    max_ctx = largest_true(all_fit, limit)
    safe = (max_ctx, largest_true(lambda k: all_fit(k, side=0), limit))

    tps = secs = None
    speed_terms: tuple[Term, ...] = ()
    if speed_known and fits:
        secs = sum(s for s in stage_s if s is not None) + head_s + d.fixed_s + comm_s
        tps = 1.0 / secs
        speed_terms = (
            Term("stages_seconds", 0, "sum over ranks of (layers read + caches read) / (eta x "
                 "bandwidth) + per-layer costs",
                 {hp.label: round(hp.decode_seconds or 0.0, 6) for hp in host_plans}),
            Term("head_seconds", 0, "replicated weights read (output head) on the slowest host",
                 {"seconds": round(head_s, 6), "bytes": _replicated_read(cfg, w)}),
            Term("comm_seconds", 0, "(N-1) sends + (N-1)-step all_gather of hidden x dtype",
                 {"seconds": round(comm_s, 6), "message_bytes": msg,
                  "latency_us": link.latency_s * 1e6, "bandwidth_gbs": link.bandwidth_gbs}),
        )
    ev = even_split(cfg.num_layers, n)
    ev_fits = all_fit(run.ctx, rank_ranges(ev), side=None) if n > 1 else None
    sums = {
        "weights_layers": sum(own), "weights_replicated": w.replicated, "weights_total": w.total,
        "kv": sum(hp.kv_bytes for hp in host_plans), "state": sum(hp.state_bytes
                                                                  for hp in host_plans),
        "layers": sum(split),
    }
    plan = Plan("pipeline" if n > 1 else "single", True, None, host_plans, tuple(split), ev,
                ev_fits, fits, failing, max_ctx, tps, secs, comm_s if speed_known else None,
                speed_terms, PIPELINE_ASSUMPTIONS if n > 1 else (), sums)
    if secs is not None:
        t = pipeline_ttft(cfg, m.params, w, list(zip(subs, own, own_exp)), hosts, run, cal,
                          link, secs)
        plan = plan if t is None else _with_ttft(plan, run, *t)
    return _with_bands(plan, cfg, w.total, run, cal, safe)


def _with_bands(plan: Plan, cfg: ModelConfig, weights_total: int, run: Run, cal: Calibration,
                safe: tuple[int, int]) -> Plan:
    if cal.bands is None:
        return plan
    return replace(plan, bands=plan_bands(
        cal.bands, [h.machine_name for h in plan.hosts], cfg, weights_total, run.ctx,
        [h.total_bytes for h in plan.hosts], safe, plan.predicted_decode_tps,
        plan.predicted_prefill_tps, plan.predicted_ttft_s, run.backend))


def _with_ttft(plan: Plan, run: Run, ttft: float, terms: tuple) -> Plan:
    return replace(plan, predicted_ttft_s=ttft,
                   predicted_prefill_tps=run.schedule().prompt / ttft, prefill_terms=terms)


def _tp_shares(m: _Model, n: int) -> tuple[int, int, int, str | None]:
    """(sharded bytes per host, replicated bytes, expert bytes per host, refusal) from the
    tensors: each sharded tensor's split axis must divide by n."""
    sharded = replicated = experts = 0
    bad: list[str] = []
    for t in m.tensors:
        if is_vision(t.name) and not m.with_vision:
            continue
        mm = LAYER_RE.search(t.name)
        kind = (tensor_kind(t.name, m.module)
                if mm and int(mm.group(1)) < m.cfg.num_layers else None)
        if kind is None:
            replicated += t.nbytes
            continue
        ax = shard_axis(t, kind)
        dim = t.shape[ax] if t.shape else 1
        if dim % n:
            bad.append(f"{t.name} (dim {ax} = {dim})")
            continue
        sharded += t.nbytes // n
        if is_expert(t.name):
            experts += t.nbytes // n
    if bad:
        return 0, 0, 0, (f"{len(bad)} tensor(s) cannot be split {n} ways, e.g. {bad[0]} "
                         f"(quantization groups or widths not divisible by {n})")
    return sharded, replicated, experts, None


def plan_tensor(m: _Model, hosts: Sequence[HostMachine], run: Run, cal: Calibration,
                link: Link, limit: int) -> Plan:
    cfg, w, n = m.cfg, m.weights, len(hosts)
    if n > 1:
        if m.module not in TENSOR_MODULES:
            return Plan("tensor", False,
                        f"mlx-lm's {m.module} has no shard(): no tensor parallelism for it")
        if m.module not in TENSOR_MODELLED:
            return Plan("tensor", False,
                        f"mlx-lm's {m.module}.shard() is not modelled by mlxfit yet "
                        f"(modelled: {', '.join(sorted(TENSOR_MODELLED))})")
        why = tp_refusal(cfg, m.module, n)
        if why:
            return Plan("tensor", False, f"tensor parallel over {n} hosts: {why}")
    if n == 1:
        own, repl, exp, bad = w.total, 0, w.expert_total, None
    else:
        own, repl, exp, bad = _tp_shares(m, n)
    if bad:
        return Plan("tensor", False, f"tensor parallel over {n} hosts: {bad}")
    sub = tp_cfg(cfg, n, m.module in MLA_MODULES)
    comm = _tp_comm_bytes(cfg, run, n)
    all_layers = (0, cfg.num_layers)

    d = cal.decode
    msg = cfg.hidden * cfg.act_bytes
    per_ar = 2 * (n - 1) * link.hop_seconds(msg / n) if n > 1 else 0.0
    comm_s = 2 * cfg.num_layers * per_ar
    speed_known = all(h.bandwidth_gbs for h in hosts)
    host_s: list[float | None] = []
    for h in hosts:
        if not speed_known:
            host_s.append(None)
            continue
        fused, ultra = decode_factors(cal, run.backend, h.machine_name)
        share = WeightsRead(own + repl, exp, w.embedding, w.tied, w.lookup)
        host_s.append(weights_seconds(cfg, share, h.bandwidth_gbs, d, ultra=ultra)
                      + cache_seconds(sub, run, h.bandwidth_gbs, d, fused_decode=fused,
                                      ultra=ultra, matmul_flops=decode_matmul_flops(h.compute))
                      + layer_seconds(cfg.num_layers, sub.moe_layers, d,
                                      unfused_layers=unfused_decode_layers(cfg, run, fused)))
    bands = [_band_at(cal, h, cfg, w.total, run.backend) for h in hosts]
    host_plans = tuple(
        _host_plan(h, sub, run, cal, layers=all_layers, own=own, replicated=repl, comm=comm,
                   seconds=s, band=band)
        for h, s, band in zip(hosts, host_s, bands))
    fits = all(hp.fits for hp in host_plans)

    def all_fit(nctx: int, side: int = 1) -> bool:
        r = run_at(run, nctx)
        c = _tp_comm_bytes(cfg, r, n)
        tot = totals_at(sub, own + repl, r, cal).total + c
        return all(_fits_at(tot, h.usable_bytes, band, nctx, side)
                   for h, band in zip(hosts, bands))

    tps = secs = None
    speed_terms: tuple[Term, ...] = ()
    if speed_known and fits:
        slowest = max(host_s)  # type: ignore[type-var]
        secs = slowest + comm_s
        tps = 1.0 / secs
        speed_terms = (
            Term("slowest_host_seconds", 0, "(its share of weights + caches) / (eta x bandwidth)"
                 " + fixed and per-layer costs",
                 {hp.label: round(hp.decode_seconds or 0.0, 6) for hp in host_plans}),
            Term("all_reduce_seconds", 0, "2 per layer x 2(N-1) x (latency + hidden x dtype / N "
                 "/ bandwidth)",
                 {"seconds": round(comm_s, 6), "all_reduces": 2 * cfg.num_layers,
                  "message_bytes": msg, "latency_us": link.latency_s * 1e6,
                  "bandwidth_gbs": link.bandwidth_gbs}),
        )
    sums = {
        "weights_sharded": own * n, "weights_replicated": repl, "weights_total": w.total,
        "kv": sum(hp.kv_bytes for hp in host_plans),
    }
    plan = Plan("tensor" if n > 1 else "single", True, None, host_plans, (), (), None, fits,
                tuple(hp.label for hp in host_plans if not hp.fits),
                largest_true(all_fit, limit), tps, secs, comm_s if speed_known else None,
                speed_terms, TENSOR_ASSUMPTIONS if n > 1 else (), sums)
    safe = (plan.max_safe_context, largest_true(lambda k: all_fit(k, side=0), limit))
    if secs is not None:
        read = own + repl - (0 if w.tied else w.embedding) - w.lookup
        t = tensor_ttft(cfg, sub, m.params, read, exp, hosts, run, cal, link, secs)
        plan = plan if t is None else _with_ttft(plan, run, *t)
    return _with_bands(plan, cfg, w.total, run, cal, safe)


def _choose(plans: Sequence[Plan], requested: str, ctx: int) -> tuple[str | None, str]:
    by = {p.strategy: p for p in plans}
    if "single" in by:
        return "single", ("one host: no distribution, the numbers of `mlxfit fit --machine`")
    if requested != "auto":
        p = by[requested]
        if not p.supported:
            return requested, f"{requested} was asked for and cannot run: {p.refusal}"
        return requested, f"{requested} was asked for"
    runnable = [p for p in plans if p.supported]
    refused = [p for p in plans if not p.supported]
    why_not = "; ".join(f"{p.strategy} cannot run ({p.refusal})" for p in refused)
    if not runnable:
        return None, f"neither strategy can run: {why_not}"
    fitting = [p for p in runnable if p.fits]
    if len(fitting) == 2:
        known = [p for p in fitting if p.predicted_decode_tps is not None]
        if len(known) == 2:
            best = max(known, key=lambda p: p.predicted_decode_tps or 0.0)
            other = known[0] if best is known[1] else known[1]
            return best.strategy, (
                f"both fit at {ctx:,} tokens; {best.strategy} is faster "
                f"({best.predicted_decode_tps:.1f} vs {other.predicted_decode_tps:.1f} tok/s "
                f"for {other.strategy})")
        best = max(fitting, key=lambda p: p.max_safe_context)
        return best.strategy, (f"both fit at {ctx:,} tokens, speed unknown; {best.strategy} "
                               f"reaches the larger context ({best.max_safe_context:,})")
    if len(fitting) == 1:
        best = fitting[0]
        others = [p for p in runnable if p is not best]
        reason = f"only {best.strategy} fits at {ctx:,} tokens"
        if others:
            o = others[0]
            reason += f" ({o.strategy} runs out of memory on {', '.join(o.failing_hosts)})"
        elif why_not:
            reason += f"; {why_not}"
        return best.strategy, reason
    best = max(runnable, key=lambda p: p.max_safe_context)
    reason = (f"nothing fits at {ctx:,} tokens; {best.strategy} reaches the largest context "
              f"({best.max_safe_context:,} tokens)" if best.max_safe_context > 0 else
              f"nothing fits at {ctx:,} tokens, nor at any context: the weights alone are too "
              "large for these hosts")
    if why_not:
        reason += f"; {why_not}"
    return best.strategy, reason


def plan_cluster(*, model: str, source_kind: str, cfg: ModelConfig,
                 tensors: Sequence[TensorInfo], hosts: Sequence[HostMachine], run: Run,
                 cal: Calibration, link: Link, strategy: str = "auto",
                 with_vision: bool = False, notes: Sequence[str] = (),
                 warnings: Sequence[str] = (), model_path: str = "",
                 single_safetensors: bool = False,
                 params: MatmulParams | None = None) -> ClusterResult:
    """The pure planner: every figure of the report from its inputs."""
    if strategy not in STRATEGIES:
        raise UsageError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}",
                         param="strategy")
    if not hosts:
        raise UsageError("give at least one hosts (or hosts_file)", param="hosts",
                         also=("hosts_file",))
    validate_run(cfg, run)
    module = mlx_lm_module(cfg.model_type)
    m = _Model(cfg, split_weights(tensors, cfg.num_layers, with_vision), tuple(tensors), module,
               with_vision, params)
    limit, limit_warnings = context_limit(cfg, run)
    warn = [*cfg.warnings, *warnings, *limit_warnings]
    n = len(hosts)
    plans: list[Plan] = []
    if n == 1:
        plans.append(plan_pipeline(m, hosts, run, cal, link, limit))
    else:
        if strategy in ("pipeline", "auto"):
            plans.append(plan_pipeline(m, hosts, run, cal, link, limit))
        if strategy in ("tensor", "auto"):
            plans.append(plan_tensor(m, hosts, run, cal, link, limit))
    chosen, why = _choose(plans, strategy, run.ctx)
    for h in hosts:
        if h.bandwidth_gbs is None:
            warn.append(f"{h.label}: memory bandwidth unknown, no decode speed")
        if h.unverified:
            warn.append(f"{h.label} ({h.machine_name}): some figures in the SKU table are "
                        "unverified")
    if n > 1 and link.unverified:
        warn.append(f"link '{link.name}': latency/bandwidth rest on weak sources "
                    "(data/links.toml); measure yours and pass --link-latency-us / --link-gbs")
    p = next((q for q in plans if q.strategy == chosen), None)
    # Only a plan that fits has a split worth launching (ux-3 F19).
    if p and p.supported and p.fits and p.strategy == "pipeline" and p.split != p.even_split:
        warn_even = ("fits" if p.even_split_fits else "does NOT fit")
        notes = [*notes, (
            f"mlx-lm's own pipeline split is even ({'/'.join(map(str, p.even_split))} layers "
            f"by rank) and {warn_even} here; the planned split "
            f"{'/'.join(map(str, p.split))} needs the launcher script --write writes")]
    if p and p.supported and p.strategy == "tensor" and link.backend == "ring":
        warn.append("tensor parallelism over the ring backend (TCP) pays the link latency 4 "
                    "times per layer per token; MLX recommends JACCL (Thunderbolt 5 RDMA) for it")
    if n > 1 and single_safetensors and p is not None and p.strategy == "pipeline":
        warn.append("the model folder has no model.safetensors.index.json: mlx-lm's "
                    "sharded_load reads it for pipeline parallelism and fails without one")
    return ClusterResult(
        model=model, source_kind=source_kind, mlx_lm_module=module, context_tokens=run.ctx,
        context_limit=limit, run=run, link=link, strategy_requested=strategy, chosen=chosen,
        why=why, plans=tuple(plans), weights_bytes=m.weights.total,
        kv_bytes=kv_bytes_final(cfg, run), hosts=tuple(hosts), warnings=tuple(warn),
        notes=tuple(notes), model_path=model_path, single_safetensors=single_safetensors)
