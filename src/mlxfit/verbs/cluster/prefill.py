"""Time to first token of a cluster plan, from the one-device prefill model
(``mlxfit.estimate.compute.prefill_seconds``).

Pipeline (mlx-lm's pipeline(): no micro-batching): every chunk runs through the stages in
sequence, each stage computing its own layers and sending the chunk's hidden states on
(chunk x hidden x dtype over the link); the last stage, like a single Mac, skips the layers
from its last cache owner on. Tensor parallel (shard()): every host computes 1/N of the
matmuls and of the attention heads in lock step (the slowest host sets the pace), and each
computed layer all-reduces the chunk's hidden states twice (attention and MLP outputs), each a
ring of 2(N-1) steps of (latency + bytes/N / bandwidth). Both add the plan's first decode step.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlxfit.calibration.constants import Calibration
from mlxfit.estimate.compute import TimeTerm, prefill_layers, prefill_seconds
from mlxfit.estimate.memory import Run
from mlxfit.estimate.speed import experts_touched
from mlxfit.model.config import ModelConfig
from mlxfit.model.inputs import MatmulParams
from mlxfit.verbs.cluster.hosts import HostMachine, Link
from mlxfit.verbs.cluster.sharding import WeightsSplit


def _chunk_read(cfg: ModelConfig, weights: float, experts: float):
    """Bytes a chunk of ``size`` tokens reads of a host's ``weights`` (``experts`` of them
    routed): the dense part and the union of experts its tokens touch, as fit's
    compute.chunk_read_bytes."""
    def read(size: int) -> float:
        if not experts or not cfg.num_experts:
            return weights
        share = min(experts_touched(cfg.num_experts, cfg.top_k, size) / cfg.num_experts, 1.0)
        return weights - experts + experts * share
    return read


def _matmul_totals(p: MatmulParams) -> tuple[float, float]:
    """(dense, expert) parameters of the layers (no embedding, head or lookup tables)."""
    return p.total - p.experts - p.embedding - p.lm_head - p.lookup, float(p.experts)


def _usable(hosts: Sequence[HostMachine], cal: Calibration,
            params: MatmulParams | None) -> bool:
    return (params is not None and cal.prefill is not None
            and all(h.compute is not None and h.bandwidth_gbs for h in hosts))


def pipeline_ttft(cfg: ModelConfig, params: MatmulParams | None, w: WeightsSplit,
                  stages: Sequence[tuple[ModelConfig, int, int]], hosts: Sequence[HostMachine],
                  run: Run, cal: Calibration, link: Link, decode_s: float
                  ) -> tuple[float, tuple[TimeTerm, ...]] | None:
    """TTFT of a pipeline plan: ``stages`` = (sub-config, own layer bytes, own expert bytes)
    per rank, rank 0 first. None without a compute figure for every host."""
    if not _usable(hosts, cal, params):
        return None
    assert params is not None
    dense, experts = _matmul_totals(params)
    dense_bytes = max(w.layer_total - w.expert_total, 1)
    msg = cfg.hidden * cfg.act_bytes
    per_stage: dict[str, float] = {}
    total = 0.0
    for i, (h, (sub, own, own_exp)) in enumerate(zip(hosts, stages)):
        last = i == len(stages) - 1
        d = dense * (own - own_exp) / dense_bytes
        e = experts * own_exp / w.expert_total if w.expert_total else 0.0
        # each stage's share, as a whole model of its own layers: every layer counts
        p = MatmulParams(total=int(d + e), experts=int(e), fmt=params.fmt)
        ps = prefill_seconds(
            sub, p, run, h.compute, cal, bandwidth_gbs=h.bandwidth_gbs or 0.0,  # type: ignore[arg-type]
            read_bytes=_chunk_read(cfg, own, own_exp),
            computed=prefill_layers(sub) if last else sub.num_layers,
            per_chunk_s=None if last else (lambda size: link.hop_seconds(size * msg)),
            ultra=h.compute.ultra)  # type: ignore[union-attr]
        per_stage[h.label] = round(ps.seconds, 4)
        total += ps.seconds
    ttft = total + decode_s
    return ttft, (
        TimeTerm("prefill_stages_seconds", total,
                 "sum over stages of their chunks (each stage's layers; hidden states sent on "
                 "after each chunk)", per_stage),
        TimeTerm("ttft_seconds", ttft, "prefill_stages_seconds + the plan's decode step",
                 {"decode_step_s": round(decode_s, 6)}),
    )


def tensor_ttft(cfg: ModelConfig, sub: ModelConfig, params: MatmulParams | None,
                read_bytes: int, read_experts: int, hosts: Sequence[HostMachine], run: Run, cal: Calibration,
                link: Link, decode_s: float) -> tuple[float, tuple[TimeTerm, ...]] | None:
    """TTFT of a tensor-parallel plan: ``sub`` is one host's share (heads / N), ``read_bytes``
    its weights (``read_experts`` of them routed experts). None without a compute figure for every host."""
    if not _usable(hosts, cal, params):
        return None
    assert params is not None
    n = len(hosts)
    dense, experts = _matmul_totals(params)
    p = MatmulParams(total=int((dense + experts) / n), experts=int(experts / n),
                     fmt=params.fmt)
    computed = prefill_layers(sub)
    msg = cfg.hidden * cfg.act_bytes

    def all_reduces(size: int) -> float:
        return 2 * computed * 2 * (n - 1) * link.hop_seconds(size * msg / n) if n > 1 else 0.0

    per_host = {}
    for h in hosts:
        ps = prefill_seconds(sub, p, run, h.compute, cal,  # type: ignore[arg-type]
                             bandwidth_gbs=h.bandwidth_gbs or 0.0,
                             read_bytes=_chunk_read(cfg, read_bytes, read_experts),
                             computed=computed, per_chunk_s=all_reduces,
                             ultra=h.compute.ultra)  # type: ignore[union-attr]
        per_host[h.label] = ps.seconds
    slowest = max(per_host.values())
    ttft = slowest + decode_s
    return ttft, (
        TimeTerm("prefill_slowest_host_seconds", slowest,
                 "the slowest host's 1/N of every chunk + 2 all-reduces per computed layer per "
                 "chunk (2(N-1) x (latency + chunk x hidden x dtype / N / bandwidth))",
                 {k: round(v, 4) for k, v in per_host.items()}),
        TimeTerm("ttft_seconds", ttft, "prefill_slowest_host_seconds + the plan's decode step",
                 {"decode_step_s": round(decode_s, 6)}),
    )
