"""Plan one model across several Macs with MLX distributed: per-host weights, KV and transient,
the cluster's largest safe context, predicted decode speed, and the files ``mlx.launch`` takes.

What mlx-lm 0.32 does, and so what is sized here (mlx_lm/utils.py ``sharded_load``,
mlx_lm/models/pipeline.py, each model's ``shard()``):

Pipeline (``model.model.pipeline(group, split)``)
    Rank r runs a contiguous block of decoder layers; rank 0 runs the *last* layers and rank
    N-1 the first. Every rank keeps every weight outside ``layers.<i>.`` (embeddings, final
    norm, output head: sharded_load loads them on every stage) and computes the logits after an
    ``all_gather`` of the hidden state. ``sharded_load`` itself splits evenly (low ranks get the
    extra layers); a proportional split needs ``pipeline(group, split=[...])``, which the
    launcher script written by ``--write`` passes.
Tensor parallel (``model.shard(group)``)
    Attention q/k/v and MLP gate/up are split by output rows, o/down by input columns (MoE:
    each expert's hidden width, not the set of experts); attention and KV heads are divided by
    N; everything else (embeddings, norms, routers, output head, MLA latent projections) is
    replicated. An MLA cache (DeepSeek-V3, GLM-4.7-Flash) holds the latent: replicated too.

Only ``cluster()`` and ``write_launch()`` touch the outside world; ``plan_cluster()`` and
everything it calls are pure.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mlxfit.calibration import Calibration
from mlxfit.config import Layer, ModelConfig
from mlxfit.core import DEFAULT_MAX_CONTEXT, is_ultra, largest_true, run_at, totals_at
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.memory import Run, Term, kv_bytes_final, validate_run
from mlxfit.resources import data_path, user_file
from mlxfit.speed import kv_read_term, layer_seconds, read_seconds
from mlxfit.tensors import TensorInfo
from mlxfit.weights import is_embedding, is_expert, is_lm_head, is_vision

SCHEMA_VERSION = 1
STRATEGIES = ("pipeline", "tensor", "auto")

# --------------------------------------------------------------------------- mlx-lm facts

# mlx_lm/utils.py MODEL_REMAPPING (0.32.2): config model_type -> the module mlx-lm imports.
MLX_LM_REMAP = {
    "mistral": "llama",
    "iquestcoder": "llama",
    "xverse": "llama",
    "kimi_k2": "deepseek_v3",
    "joyai_llm_flash": "deepseek_v3",
    "minimax_m2": "minimax",
    "deepseek_v41_text": "deepseek_v41",
    "falcon_mamba": "mamba",
    "gemma4_unified": "gemma4",
}
# Modules whose inner model is a PipelineMixin (mlx-lm 0.32.2; qwen3_5_moe inherits qwen3_5's).
PIPELINE_MODULES = frozenset({
    "bailing_hybrid", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v41", "glm4_moe",
    "glm4_moe_lite", "kimi_k25", "kimi_vl", "minimax_m3_vl", "ministral3", "mistral4",
    "muse_spark", "qwen2", "qwen3_5", "qwen3_5_moe", "qwen3_moe", "qwen3_next",
})
# Modules whose Model defines shard() (mlx-lm 0.32.2).
TENSOR_MODULES = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v41", "exaone_moe", "glm4_moe",
    "glm4_moe_lite", "glm_moe_dsa", "gpt_oss", "iquestloopcoder", "kimi_k25", "kimi_k3", "llama",
    "longcat_flash", "longcat_flash_ngram", "minimax", "minimax_m3_vl", "ministral3", "mistral4",
    "muse_spark", "prism_hadamard_qwen35", "qwen2", "qwen3", "qwen3_5", "qwen3_5_moe",
    "qwen3_moe", "solar_open", "step3p5",
})
# Of those, the shard() methods mlxfit reproduces tensor by tensor (the rules below).
TENSOR_MODELLED = frozenset({
    "llama", "ministral3", "qwen2", "qwen3", "qwen3_moe", "glm4_moe", "gpt_oss", "deepseek_v2",
    "deepseek_v3", "glm4_moe_lite",
})
MLA_MODULES = frozenset({"deepseek_v3", "glm4_moe_lite"})  # heads sharded, latent replicated

# shard_linear / shard_inplace kinds by module name (the last dotted segment before the param).
_ALL_TO_SHARDED = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "q_b_proj"})
_SHARDED_TO_ALL = frozenset({"o_proj", "down_proj"})
_HEAD_SHARDED = frozenset({"embed_q", "unembed_out"})  # MLA per-head matrices: axis 0

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")  # sharded_load's own pattern

# --------------------------------------------------------------------------- links


@dataclass(frozen=True)
class Link:
    name: str
    backend: str  # mlx.launch --backend
    latency_s: float  # one small message, one hop, software stack included
    bandwidth_gbs: float  # one transfer, one direction, decimal GB/s
    nominal_gbps: float | None = None
    description: str = ""
    unverified: bool = False
    source: str = "data/links.toml"

    def hop_seconds(self, nbytes: float) -> float:
        return self.latency_s + nbytes / (self.bandwidth_gbs * 1e9)


USER_LINKS = Path("~/.config/mlxfit/links.toml")


def _kv_read(sub: ModelConfig, run: Run, cal: Calibration, ultra: bool) -> int:
    """Cache bytes a host reads per token, with the same decode factors fit applies."""
    return kv_read_term(sub, run, cal.decode,
                        fused_decode=cal.backend(run.backend).fused_decode_head_dims,
                        ultra=ultra).bytes


def _links_path() -> Path:
    try:
        return data_path("links.toml")
    except FileNotFoundError as e:
        raise MlxfitError(str(e)) from None


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise MlxfitError(f"cannot read {path}: {e}") from None


def load_links(extra: Path | None = None, user: Path | None = None) -> dict[str, Link]:
    """The shipped link table, merged key by key with the user's and then ``extra``."""
    doc = _read_toml(_links_path()).get("links", {})
    for p in (user if user is not None else user_file(str(USER_LINKS)[2:]), extra):
        if p is not None and Path(p).is_file():
            for name, tbl in _read_toml(Path(p)).get("links", {}).items():
                doc[name] = {**doc.get(name, {}), **tbl}
    out = {}
    for name, t in doc.items():
        try:
            lat, bw = float(t["latency_us"]), float(t["bandwidth_gbs"])
            backend = str(t["backend"])
        except (KeyError, TypeError, ValueError):
            raise MlxfitError(f"links table: [links.{name}] needs backend, latency_us and "
                              "bandwidth_gbs") from None
        if lat < 0 or bw <= 0:
            raise MlxfitError(f"links table: [links.{name}] latency must be >= 0 and bandwidth > 0")
        out[name] = Link(name, backend, lat * 1e-6, bw, t.get("nominal_gbps"),
                         str(t.get("description", "")), bool(t.get("unverified", False)))
    return out


def resolve_link(name: str, latency_us: float | None = None, bandwidth_gbs: float | None = None,
                 table: dict[str, Link] | None = None) -> Link:
    links = table if table is not None else load_links()
    key = name.strip().lower()
    if key not in links:
        raise UsageError(f"--link {name!r}: unknown link (known: {', '.join(sorted(links))})")
    link = links[key]
    if latency_us is not None:
        if not latency_us >= 0:
            raise UsageError(f"--link-latency-us must be >= 0, got {latency_us}")
        link = replace(link, latency_s=latency_us * 1e-6, source="--link-latency-us",
                       unverified=False)
    if bandwidth_gbs is not None:
        if not bandwidth_gbs > 0:
            raise UsageError(f"--link-gbs must be positive, got {bandwidth_gbs}")
        link = replace(link, bandwidth_gbs=bandwidth_gbs, source="command line", unverified=False)
    return link


# --------------------------------------------------------------------------- hosts


@dataclass(frozen=True)
class HostSpec:
    """One Mac of the cluster as the user described it (a --host string or a hosts-file entry)."""

    machine: str  # "M3 Ultra 512GB"
    name: str | None = None  # label in the report; default ssh, else host<rank>
    ssh: str | None = None  # for the hostfile; default the label
    ips: tuple[str, ...] = ()
    rdma: tuple[str | None, ...] | None = None  # one entry per rank (None for itself / no cable)
    memory_budget_gb: float | None = None
    macos: int | None = None


_REPEAT_RE = re.compile(r"^\s*(\d+)\s*[x×]\s+(.+)$", re.IGNORECASE)


def parse_host_args(hosts: Sequence[str | HostSpec]) -> list[HostSpec]:
    """``"M4 Max 128GB"``, ``"2x M3 Ultra 512GB"`` or HostSpec objects, in rank order."""
    out: list[HostSpec] = []
    for h in hosts:
        if isinstance(h, HostSpec):
            out.append(h)
            continue
        m = _REPEAT_RE.match(h)
        if m:
            n = int(m.group(1))
            if not 1 <= n <= 64:
                raise UsageError(f"--host {h!r}: repeat count must be 1..64")
            out.extend(HostSpec(machine=m.group(2).strip()) for _ in range(n))
        else:
            out.append(HostSpec(machine=h.strip()))
    return out


def read_hosts_file(path: Path) -> tuple[list[HostSpec], dict[str, Any]]:
    """A TOML file: ``[[hosts]]`` entries (machine, optional name, ssh, ips, rdma,
    memory_budget_gb, macos, count) and optional top-level ``link`` / ``backend``.
    TOML has no null: write "" in ``rdma`` for the host itself and uncabled peers."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UsageError(f"hosts file {path} does not exist")
    doc = _read_toml(path)
    entries = doc.get("hosts")
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{path}: no [[hosts]] entries")
    out: list[HostSpec] = []
    for i, e in enumerate(entries):
        where = f"{path}: hosts[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("machine"), str):
            raise UsageError(f"{where} needs machine = \"<chip> <RAM>GB\"")
        ips = e.get("ips", [])
        if isinstance(ips, str):
            ips = [ips]
        if not isinstance(ips, list) or not all(isinstance(x, str) for x in ips):
            raise UsageError(f"{where}: ips must be a list of strings")
        rdma = e.get("rdma")
        if rdma is not None:
            if not isinstance(rdma, list) or not all(isinstance(x, (str, list)) for x in rdma):
                raise UsageError(f"{where}: rdma must be a list (\"\" for itself / no cable)")
            rdma = tuple(None if x in ("", []) else x for x in rdma)
        budget = e.get("memory_budget_gb")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                                   or not budget > 0):
            raise UsageError(f"{where}: memory_budget_gb must be a positive number")
        count = e.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
            raise UsageError(f"{where}: count must be an integer 1..64")
        for k in range(count):
            name = e.get("name")
            if name is not None and count > 1:
                name = f"{name}-{k}"
            out.append(HostSpec(
                machine=e["machine"], name=name, ssh=e.get("ssh") if count == 1 else None,
                ips=tuple(ips) if count == 1 else (), rdma=rdma if count == 1 else None,
                memory_budget_gb=float(budget) if budget is not None else None,
                macos=e.get("macos")))
    extra = {k: doc[k] for k in ("link", "backend") if k in doc}
    return out, extra


@dataclass(frozen=True)
class HostMachine:
    """A resolved host: the figures the plan needs (from mlxfit.machine.Machine)."""

    rank: int
    label: str
    machine_name: str
    ram_bytes: int
    bandwidth_gbs: float | None
    usable_bytes: int
    usable_source: str
    spec: HostSpec = field(default_factory=lambda: HostSpec(machine=""))
    notes: tuple[str, ...] = ()
    unverified: bool = False


def resolve_hosts(specs: Sequence[HostSpec], macos: int | None = None) -> list[HostMachine]:
    from mlxfit import machine as mach

    out = []
    for r, s in enumerate(specs):
        try:
            m = mach.resolve_machine(s.machine, macos_major=s.macos or macos or 26)
        except MlxfitError as e:
            raise type(e)(f"host {r} ({s.machine!r}): {e}") from None
        if s.memory_budget_gb is not None:
            m = mach.machine_with_budget(m, int(s.memory_budget_gb * 1e9))
        label = s.name or s.ssh or f"host{r}"
        out.append(HostMachine(r, label, m.name, m.ram_bytes, m.bandwidth_gbs, m.usable_bytes,
                               m.usable_source, s, tuple(m.notes), m.unverified))
    for h in out:
        if h.spec.rdma is not None and len(h.spec.rdma) != len(out):
            raise UsageError(f"{h.label}: rdma lists {len(h.spec.rdma)} devices for "
                             f"{len(out)} hosts (one per rank, \"\" for itself)")
    labels = [h.label for h in out]
    if len(set(labels)) != len(labels):
        raise UsageError(f"host names must be unique, got {', '.join(labels)}")
    return out


# --------------------------------------------------------------------------- weights by role


@dataclass(frozen=True)
class WeightsSplit:
    """The loaded weights attributed as mlx-lm's sharded_load attributes them."""

    total: int
    per_layer: tuple[int, ...]  # bytes of tensors named layers.<i>. for i < num_layers
    per_layer_experts: tuple[int, ...]
    replicated: int  # everything else: embeddings, norms, head (and layers past num_layers)
    embedding: int
    lm_head: int
    tied: bool
    expert_total: int

    @property
    def layer_total(self) -> int:
        return sum(self.per_layer)


def split_weights(tensors: Sequence[TensorInfo], num_layers: int,
                  with_vision: bool = False) -> WeightsSplit:
    """Attribute every loaded tensor to a decoder layer or to the replicated rest. Sums are
    exact: sum(per_layer) + replicated == total (the total ``fit`` uses)."""
    per = [0] * num_layers
    per_exp = [0] * num_layers
    total = replicated = emb = head = experts = 0
    for t in tensors:
        if is_vision(t.name) and not with_vision:
            continue
        total += t.nbytes
        exp = is_expert(t.name)
        experts += t.nbytes if exp else 0
        if is_embedding(t.name):
            emb += t.nbytes
        elif is_lm_head(t.name):
            head += t.nbytes
        m = _LAYER_RE.search(t.name)
        i = int(m.group(1)) if m else -1
        if 0 <= i < num_layers and not is_vision(t.name):
            per[i] += t.nbytes
            per_exp[i] += t.nbytes if exp else 0
        else:
            replicated += t.nbytes
    return WeightsSplit(total, tuple(per), tuple(per_exp), replicated, emb, head,
                        head == 0 and emb > 0, experts)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class HostPlan:
    rank: int
    label: str
    machine_name: str
    ram_bytes: int
    bandwidth_gbs: float | None
    usable_bytes: int
    usable_source: str
    layers: tuple[int, int]  # [start, end) of decoder layers it runs
    weights_bytes: int  # all it holds
    sharded_weights_bytes: int  # its own share (pipeline: its layers; tensor: its 1/N slices)
    replicated_weights_bytes: int  # held by every host
    kv_bytes: int
    state_bytes: int
    transient_bytes: int
    comm_bytes: int  # receive / gather buffers of the distributed ops (in transient_bytes)
    total_bytes: int
    peak_phase: str
    fits: bool
    decode_seconds: float | None  # its own part of one token (pipeline: its stage)
    terms: tuple[Term, ...] = ()

    @property
    def n_layers(self) -> int:
        return self.layers[1] - self.layers[0]

    @property
    def headroom_bytes(self) -> int:
        return self.usable_bytes - self.total_bytes


@dataclass(frozen=True)
class Plan:
    strategy: str  # "pipeline" | "tensor" | "single"
    supported: bool
    refusal: str | None  # why this strategy cannot run (mlx-lm support, divisibility)
    hosts: tuple[HostPlan, ...] = ()
    split: tuple[int, ...] = ()  # layers per rank, rank 0 first (mlx-lm's pipeline split)
    even_split: tuple[int, ...] = ()  # what sharded_load does without a split
    even_split_fits: bool | None = None
    fits: bool = False
    failing_hosts: tuple[str, ...] = ()
    max_safe_context: int = 0
    predicted_decode_tps: float | None = None
    decode_seconds: float | None = None
    comm_seconds: float | None = None
    speed_terms: tuple[Term, ...] = ()
    assumptions: tuple[str, ...] = ()
    sums: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterResult:
    model: str
    source_kind: str
    mlx_lm_module: str
    context_tokens: int
    context_limit: int
    run: Run
    link: Link
    strategy_requested: str
    chosen: str | None  # the plan auto (or the request) settled on; None when none can run
    why: str
    plans: tuple[Plan, ...]
    weights_bytes: int
    kv_bytes: int  # whole model at the context (what fit reports)
    hosts: tuple[HostMachine, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    model_path: str = ""  # what to pass to mlx-lm's --model
    single_safetensors: bool = False  # no model.safetensors.index.json: sharded_load fails

    @property
    def plan(self) -> Plan | None:
        for p in self.plans:
            if p.strategy == self.chosen:
                return p
        return None

    @property
    def fits(self) -> bool:
        p = self.plan
        return bool(p and p.supported and p.fits)


# --------------------------------------------------------------------------- pure planning


def mlx_lm_module(model_type: str) -> str:
    return MLX_LM_REMAP.get(model_type, model_type)


def even_split(num_layers: int, n: int) -> tuple[int, ...]:
    """PipelineMixin.pipeline's default: base layers each, the low ranks one more."""
    base, extra = divmod(num_layers, n)
    return tuple(base + (1 if r < extra else 0) for r in range(n))


def rank_ranges(split: Sequence[int]) -> list[tuple[int, int]]:
    """Rank r runs [sum(split[r+1:]), that + split[r]) as PipelineMixin sets start/end_idx."""
    out = []
    for r, k in enumerate(split):
        start = sum(split[r + 1:])
        out.append((start, start + k))
    return out


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


def _tp_cfg(cfg: ModelConfig, n: int, mla: bool) -> ModelConfig:
    """The per-host model under tensor parallelism: heads, KV heads and MLP widths / n."""
    if n == 1:
        return cfg
    layers = []
    for ly in cfg.layers:
        a = ly.attn
        if a is not None:
            if a.mla is not None:
                a = replace(a, q_heads=a.q_heads // n, mla=replace(a.mla, heads=a.mla.heads // n))
            elif mla:
                a = replace(a, q_heads=a.q_heads // n)
            else:
                a = replace(a, q_heads=a.q_heads // n, kv_heads=a.kv_heads // n)
        layers.append(Layer(a, ly.state_bytes, ly.state_kind, ly.moe))
    return replace(cfg, layers=tuple(layers), intermediate=cfg.intermediate // n,
                   moe_intermediate=cfg.moe_intermediate // n,
                   shared_intermediate=cfg.shared_intermediate // n)


def _tensor_kind(name: str, family: str) -> str | None:
    """'rows' (all-to-sharded), 'cols' (sharded-to-all), 'heads' (axis 0) or None
    (replicated) for a tensor inside a decoder layer of mlx-lm module ``family``."""
    parts = name.split(".")
    if len(parts) < 2:
        return None
    param, module = parts[-1], parts[-2]
    if param == "sinks":  # gpt_oss: one sink per attention head
        return "heads" if family == "gpt_oss" else None
    if module == "kv_b_proj":  # deepseek_v2 shards it; MLA (v3) turns it into embed_q/unembed_out
        return "rows" if family == "deepseek_v2" else None
    if module in _ALL_TO_SHARDED:
        return "rows"
    if module in _SHARDED_TO_ALL:
        return None if param == "bias" else "cols"
    if module in _HEAD_SHARDED:
        return "heads" if family in MLA_MODULES else None
    return None


def _shard_axis(t: TensorInfo, kind: str) -> int:
    if kind == "rows":
        return len(t.shape) - 1 if t.name.endswith(".bias") else max(len(t.shape) - 2, 0)
    if kind == "cols":
        return len(t.shape) - 1
    return 0


def _tp_refusal(cfg: ModelConfig, module: str, n: int) -> str | None:
    """Every divisibility mlx-lm's shard() needs and this model lacks, in the config's terms
    (None when all hold)."""
    if n == 1:
        return None
    mla = module in MLA_MODULES
    bad: list[str] = []
    why: list[str] = []
    for h in sorted({a.q_heads for a in cfg.attention_layers}):
        if h % n:
            bad.append(f"num_attention_heads {h}")
    if not mla:
        for kv in sorted({a.kv_heads for a in cfg.attention_layers}):
            if kv % n:
                bad.append(f"num_key_value_heads {kv}")
    if bad:
        why.append(f"each host takes heads/{n} whole heads")
    if cfg.intermediate and any(not ly.moe for ly in cfg.layers) and cfg.intermediate % n:
        bad.append(f"intermediate_size {cfg.intermediate}")
    if cfg.is_moe and cfg.moe_intermediate % n:
        bad.append(f"moe_intermediate_size {cfg.moe_intermediate}")
        why.append("mlx-lm splits every expert's hidden width across the hosts, it does not "
                   "place whole experts")
    if cfg.is_moe and cfg.shared_intermediate % n:
        bad.append(f"shared expert width {cfg.shared_intermediate}")
    if not bad:
        return None
    return (f"{', '.join(bad)} not divisible by {n}"
            + (f" ({'; '.join(why)})" if why else ""))


@dataclass(frozen=True)
class _Model:
    """What the planners read: config, weights by role, per-tensor sharding for TP."""

    cfg: ModelConfig
    weights: WeightsSplit
    tensors: tuple[TensorInfo, ...]
    module: str
    with_vision: bool = False


def _host_plan(h: HostMachine, cfg: ModelConfig, run: Run, cal: Calibration, *,
               layers: tuple[int, int], own: int, replicated: int, comm: int,
               seconds: float | None) -> HostPlan:
    t = totals_at(cfg, own + replicated, run, cal)
    total = t.total + comm
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
        decode_seconds=seconds, terms=terms)


def _stage_read(cfg: ModelConfig, layer_bytes: int, layer_experts: int) -> float:
    """Bytes of a block of layers read per token: routed experts at top_k/num_experts."""
    if cfg.is_moe and layer_experts:
        return layer_bytes - layer_experts * (1 - cfg.top_k / cfg.num_experts)
    return float(layer_bytes)


def _replicated_read(w: WeightsSplit) -> int:
    """Embeddings are a row lookup unless tied (the head then reads the whole table)."""
    return w.replicated - (0 if w.tied else w.embedding)


def _pipeline_comm_bytes(cfg: ModelConfig, run: Run, n: int) -> int:
    """Per host during a prefill chunk: the received hidden state and the all_gather output
    (n copies), in the activation dtype."""
    if n == 1:
        return 0
    chunk = min(run.prefill_step, run.ctx)
    return (n + 1) * chunk * cfg.hidden * cfg.act_bytes


def _tp_comm_bytes(cfg: ModelConfig, run: Run, n: int) -> int:
    """The all_sum's input and output of one chunk's hidden state."""
    if n == 1:
        return 0
    return 2 * min(run.prefill_step, run.ctx) * cfg.hidden * cfg.act_bytes


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
        costs.append(w.per_layer[i] + kv_bytes_final(one, run) + one.state_bytes)
    caps = [h.usable_bytes - fixed for h in hosts]
    split = proportional_split(costs, caps) if n > 1 else (cfg.num_layers,)
    ranges = rank_ranges(split)
    subs = [_sub_cfg(cfg, a, b) for a, b in ranges]
    own = [sum(w.per_layer[a:b]) for a, b in ranges]
    own_exp = [sum(w.per_layer_experts[a:b]) for a, b in ranges]

    def all_fit(nctx: int, sp: Sequence[tuple[int, int]] = ranges) -> bool:
        r = run_at(run, nctx)
        c = _pipeline_comm_bytes(cfg, r, n)
        for h, (a, b) in zip(hosts, sp):
            sub = _sub_cfg(cfg, a, b)
            if totals_at(sub, sum(w.per_layer[a:b]) + w.replicated, r, cal).total + c \
                    > h.usable_bytes:
                return False
        return True

    # Speed.
    speed_known = all(h.bandwidth_gbs for h in hosts)
    d = cal.decode
    stage_s: list[float | None] = []
    head_s = 0.0
    if speed_known:
        for h, sub, ob, oe in zip(hosts, subs, own, own_exp):
            ultra = is_ultra(h.machine_name)
            moe = sum(1 for ly in sub.layers if ly.moe)
            read = _stage_read(cfg, ob, oe) + _kv_read(sub, run, cal, ultra)
            stage_s.append(read_seconds(read, h.bandwidth_gbs, d, ultra=ultra)
                           + layer_seconds(sub.num_layers, moe, d, fixed=False))
            head_s = max(head_s, read_seconds(_replicated_read(w), h.bandwidth_gbs, d,
                                              ultra=ultra))
    else:
        stage_s = [None] * n
    msg = cfg.hidden * cfg.act_bytes
    comm_s = 2 * (n - 1) * link.hop_seconds(msg) if n > 1 else 0.0

    host_plans = tuple(
        _host_plan(h, sub, run, cal, layers=rg, own=ob, replicated=w.replicated, comm=comm,
                   seconds=s)
        for h, sub, rg, ob, s in zip(hosts, subs, ranges, own, stage_s))
    fits = all(hp.fits for hp in host_plans)
    failing = tuple(hp.label for hp in host_plans if not hp.fits)
    max_ctx = largest_true(all_fit, limit)

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
                 {"seconds": round(head_s, 6), "bytes": _replicated_read(w)}),
            Term("comm_seconds", 0, "(N-1) sends + (N-1)-step all_gather of hidden x dtype",
                 {"seconds": round(comm_s, 6), "message_bytes": msg,
                  "latency_us": link.latency_s * 1e6, "bandwidth_gbs": link.bandwidth_gbs}),
        )
    ev = even_split(cfg.num_layers, n)
    ev_fits = all_fit(run.ctx, rank_ranges(ev)) if n > 1 else None
    sums = {
        "weights_layers": sum(own), "weights_replicated": w.replicated, "weights_total": w.total,
        "kv": sum(hp.kv_bytes for hp in host_plans), "state": sum(hp.state_bytes
                                                                  for hp in host_plans),
        "layers": sum(split),
    }
    return Plan("pipeline" if n > 1 else "single", True, None, host_plans, tuple(split), ev,
                ev_fits, fits, failing, max_ctx, tps, secs, comm_s if speed_known else None,
                speed_terms, PIPELINE_ASSUMPTIONS if n > 1 else (), sums)


def _tp_shares(m: _Model, n: int) -> tuple[int, int, int, str | None]:
    """(sharded bytes per host, replicated bytes, expert bytes per host, refusal) from the
    tensors: each sharded tensor's split axis must divide by n."""
    sharded = replicated = experts = 0
    bad: list[str] = []
    for t in m.tensors:
        if is_vision(t.name) and not m.with_vision:
            continue
        mm = _LAYER_RE.search(t.name)
        kind = (_tensor_kind(t.name, m.module)
                if mm and int(mm.group(1)) < m.cfg.num_layers else None)
        if kind is None:
            replicated += t.nbytes
            continue
        ax = _shard_axis(t, kind)
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
        why = _tp_refusal(cfg, m.module, n)
        if why:
            return Plan("tensor", False, f"tensor parallel over {n} hosts: {why}")
    if n == 1:
        own, repl, exp, bad = w.total, 0, w.expert_total, None
    else:
        own, repl, exp, bad = _tp_shares(m, n)
    if bad:
        return Plan("tensor", False, f"tensor parallel over {n} hosts: {bad}")
    sub = _tp_cfg(cfg, n, m.module in MLA_MODULES)
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
        ultra = is_ultra(h.machine_name)
        moe = sum(1 for ly in sub.layers if ly.moe)
        read = own + repl - (exp * (1 - cfg.top_k / cfg.num_experts) if cfg.is_moe else 0)
        read -= 0 if w.tied else w.embedding
        read += _kv_read(sub, run, cal, ultra)
        host_s.append(read_seconds(read, h.bandwidth_gbs, d, ultra=ultra)
                      + layer_seconds(cfg.num_layers, moe, d))
    host_plans = tuple(
        _host_plan(h, sub, run, cal, layers=all_layers, own=own, replicated=repl, comm=comm,
                   seconds=s)
        for h, s in zip(hosts, host_s))
    fits = all(hp.fits for hp in host_plans)

    def all_fit(nctx: int) -> bool:
        r = run_at(run, nctx)
        c = _tp_comm_bytes(cfg, r, n)
        tot = totals_at(sub, own + repl, r, cal).total + c
        return all(tot <= h.usable_bytes for h in hosts)

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
    return Plan("tensor" if n > 1 else "single", True, None, host_plans, (), (), None, fits,
                tuple(hp.label for hp in host_plans if not hp.fits),
                largest_true(all_fit, limit), tps, secs, comm_s if speed_known else None,
                speed_terms, TENSOR_ASSUMPTIONS if n > 1 else (), sums)


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
              f"({best.max_safe_context:,} tokens)")
    if why_not:
        reason += f"; {why_not}"
    return best.strategy, reason


def plan_cluster(*, model: str, source_kind: str, cfg: ModelConfig,
                 tensors: Sequence[TensorInfo], hosts: Sequence[HostMachine], run: Run,
                 cal: Calibration, link: Link, strategy: str = "auto",
                 with_vision: bool = False, notes: Sequence[str] = (),
                 model_path: str = "", single_safetensors: bool = False) -> ClusterResult:
    """The pure planner: every figure of the report from its inputs."""
    if strategy not in STRATEGIES:
        raise UsageError(f"--strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if not hosts:
        raise UsageError("give at least one --host (or --hosts-file)")
    validate_run(cfg, run)
    module = mlx_lm_module(cfg.model_type)
    m = _Model(cfg, split_weights(tensors, cfg.num_layers, with_vision), tuple(tensors), module,
               with_vision)
    warn = list(cfg.warnings)
    limit = cfg.max_position or DEFAULT_MAX_CONTEXT
    if not cfg.max_position:
        warn.append(f"config has no max_position_embeddings: max context searched up to {limit}")
    if run.ctx > limit:
        warn.append(f"--ctx {run.ctx} is beyond the model's max_position_embeddings ({limit})")
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
    if p and p.supported and p.strategy == "pipeline" and p.split != p.even_split:
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


# --------------------------------------------------------------------------- the twin


def cluster(
    model: str,
    hosts: Sequence[str | HostSpec] | None = None,
    ctx: int = 8192,
    *,
    hosts_file: str | Path | None = None,
    strategy: str = "auto",
    link: str | Link | None = None,
    link_latency_us: float | None = None,
    link_gbs: float | None = None,
    macos: int | None = None,
    revision: str | None = None,
    gen: int = 0,
    prefill_step_size: int = 2048,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = 5000,
    backend: str = "metal",
    calibration: Calibration | None = None,
) -> ClusterResult:
    """Will ``model`` run a ``ctx``-token generation with mlx-lm across these Macs, split how,
    how fast? ``hosts`` are SKU strings ("M3 Ultra 512GB", "2x M4 Max 128GB") in rank order;
    ``hosts_file`` a TOML file of [[hosts]] (listed first)."""
    from mlxfit import api
    from mlxfit.api import activation_bytes
    from mlxfit.calibration import load_calibration
    from mlxfit.config import parse_config
    from mlxfit.sources import INDEX_NAME, resolve_model

    specs: list[HostSpec] = []
    extra: dict[str, Any] = {}
    if hosts_file is not None:
        specs, extra = read_hosts_file(Path(hosts_file))
    specs += parse_host_args(list(hosts or []))
    if not specs:
        raise UsageError("give at least one --host (or --hosts-file)")
    if link is None:
        link = extra.get("link", "tb5")
    lk = link if isinstance(link, Link) else resolve_link(str(link), link_latency_us, link_gbs)
    if isinstance(extra.get("backend"), str):
        lk = replace(lk, backend=extra["backend"])
    run = Run(ctx=ctx, gen=gen, prefill_step=prefill_step_size, kv_bits=kv_bits,
              kv_group=kv_group_size, quantized_kv_start=quantized_kv_start, backend=backend)
    src = resolve_model(model, revision=revision)
    where = f"{src.location}/config.json" if src.kind != "catalog" else f"{src.name} (catalog)"
    cfg = parse_config(src.config, act_bytes=activation_bytes(src.tensors), where=where)
    machines = resolve_hosts(specs, macos)
    cal = calibration or load_calibration(api.user_calibration())
    notes = list(src.notes)
    by_note: dict[str, list[str]] = {}
    for h in machines:
        for x in h.notes:
            by_note.setdefault(x, []).append(h.label)
    notes += [f"{', '.join(labels)}: {x}" for x, labels in by_note.items()]
    if cal.source != "calibration.toml":
        notes.append(f"calibration: {cal.source}")
    single = False
    model_path = src.name
    if src.kind in ("folder", "hf-cache"):  # a local snapshot: does it carry the index?
        loc = Path(src.location)
        single = not (loc / INDEX_NAME).exists()
        if src.kind == "folder":
            model_path = str(loc)
    return plan_cluster(model=src.name, source_kind=src.kind, cfg=cfg, tensors=src.tensors,
                        hosts=machines, run=run, cal=cal, link=lk, strategy=strategy,
                        notes=notes, model_path=model_path, single_safetensors=single)


# --------------------------------------------------------------------------- JSON


def _term(t: Term) -> dict[str, Any]:
    return {"name": t.name, "bytes": t.bytes, "formula": t.formula, "inputs": t.inputs}


def _host_json(hp: HostPlan) -> dict[str, Any]:
    return {
        "rank": hp.rank, "name": hp.label, "machine": hp.machine_name,
        "ram_bytes": hp.ram_bytes, "bandwidth_gbs": hp.bandwidth_gbs,
        "usable_bytes": hp.usable_bytes, "usable_source": hp.usable_source,
        "layers": {"start": hp.layers[0], "end": hp.layers[1], "count": hp.n_layers},
        "weights_bytes": hp.weights_bytes, "own_weights_bytes": hp.sharded_weights_bytes,
        "replicated_weights_bytes": hp.replicated_weights_bytes, "kv_bytes": hp.kv_bytes,
        "state_bytes": hp.state_bytes, "transient_bytes": hp.transient_bytes,
        "comm_buffer_bytes": hp.comm_bytes, "total_bytes": hp.total_bytes,
        "headroom_bytes": hp.headroom_bytes, "fits": hp.fits, "peak_phase": hp.peak_phase,
        "decode_seconds": round(hp.decode_seconds, 6) if hp.decode_seconds is not None else None,
        "explain": [_term(t) for t in hp.terms],
    }


def plan_to_json(p: Plan) -> dict[str, Any]:
    return {
        "strategy": p.strategy, "supported": p.supported, "refusal": p.refusal,
        "fits": p.fits, "failing_hosts": list(p.failing_hosts),
        "max_safe_context": p.max_safe_context,
        "predicted_decode_tps": (round(p.predicted_decode_tps, 2)
                                 if p.predicted_decode_tps is not None else None),
        "decode_seconds": p.decode_seconds, "comm_seconds": p.comm_seconds,
        "split": list(p.split), "even_split": list(p.even_split),
        "even_split_fits": p.even_split_fits,
        "hosts": [_host_json(h) for h in p.hosts],
        "speed_terms": [_term(t) for t in p.speed_terms],
        "assumptions": list(p.assumptions), "sums": dict(p.sums),
    }


def cluster_to_json(r: ClusterResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "model": r.model, "source": r.source_kind, "mlx_lm_module": r.mlx_lm_module,
        "run": asdict(r.run), "context_tokens": r.context_tokens,
        "context_limit": r.context_limit,
        "link": {"name": r.link.name, "backend": r.link.backend,
                 "latency_us": r.link.latency_s * 1e6, "bandwidth_gbs": r.link.bandwidth_gbs,
                 "nominal_gbps": r.link.nominal_gbps, "unverified": r.link.unverified,
                 "source": r.link.source},
        "strategy_requested": r.strategy_requested, "chosen": r.chosen, "why": r.why,
        "fits": r.fits, "weights_bytes": r.weights_bytes, "kv_bytes": r.kv_bytes,
        "plans": [plan_to_json(p) for p in r.plans],
        "warnings": list(r.warnings), "notes": list(r.notes),
    }


# --------------------------------------------------------------------------- launch files

SPLIT_SCRIPT = "mlxfit_pipeline_split.py"

_SPLIT_TEMPLATE = '''"""Written by `mlxfit cluster --write`: run an mlx-lm tool with the planned pipeline split.

mlx-lm's sharded_load calls model.model.pipeline(group) without a split, which splits the
layers evenly. This sets the split mlxfit planned (layers per rank, rank 0 first; rank 0 runs
the last layers) and then runs the tool named by the first argument, e.g.
    python3 {script} mlx_lm.server --model MODEL --pipeline
"""

import runpy
import sys

SPLIT = {split!r}

from mlx_lm.models import pipeline as _pipeline  # noqa: E402

_plain = _pipeline.PipelineMixin.pipeline


def _planned(self, group, split=None):
    if split is None:
        if group.size() != len(SPLIT):
            raise SystemExit(
                f"mlxfit planned {{len(SPLIT)}} ranks, the launch has {{group.size()}}"
            )
        split = SPLIT
    return _plain(self, group, split=split)


_pipeline.PipelineMixin.pipeline = _planned

if len(sys.argv) < 2:
    raise SystemExit("usage: python3 {script} mlx_lm.<tool> [its arguments]")
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
'''


def hostfile_json(r: ClusterResult) -> dict[str, Any]:
    """The hostfile mlx.launch reads (mlx/_distributed_utils/common.py Hostfile.from_file):
    {"backend", "envs", "hosts": [{"ssh", "ips", "rdma"}]}, one entry per rank in rank order."""
    n = len(r.hosts)
    backend = r.link.backend
    hosts = []
    for h in r.hosts:
        s = h.spec
        rdma: list[Any] = []
        if backend.startswith("jaccl"):
            rdma = list(s.rdma) if s.rdma is not None else [None] * n
        hosts.append({"ssh": s.ssh or h.label, "ips": list(s.ips), "rdma": rdma})
    # MLX's own hostfile example for jaccl sets MLX_METAL_FAST_SYNCH=1 (common.py docstring).
    envs = ["MLX_METAL_FAST_SYNCH=1"] if backend.startswith("jaccl") else []
    return {"backend": backend, "envs": envs, "hosts": hosts}


def launch_commands(r: ClusterResult) -> dict[str, str]:
    """The command lines to run the chosen plan (benchmark to check, server to serve)."""
    import shlex

    p = r.plan
    model = shlex.quote(r.model_path or r.model)
    strat = p.strategy if p else "pipeline"
    flag = " --pipeline" if strat == "pipeline" else ""
    use_script = bool(p and strat == "pipeline" and p.split != p.even_split)
    py = f"python3 {SPLIT_SCRIPT} " if use_script else "python3 -m "
    prompt = r.run.ctx - r.run.gen
    gen = max(r.run.gen, 1)
    launch = "mlx.launch --hostfile hostfile.json --"
    if strat == "single":
        launch = ""
    bench = (f"{launch} {py}mlx_lm.benchmark --model {model}{flag} -p {prompt} -g {gen} "
             f"--prefill-step-size {r.run.prefill_step} -n 1").strip()
    serve = f"{launch} {py}mlx_lm.server --model {model}{flag}".strip()
    return {"benchmark": bench, "server": serve}


def write_launch(r: ClusterResult, directory: str | Path) -> list[Path]:
    """hostfile.json, run.sh (the command lines), plan.json (this report) and, for a pipeline
    split other than mlx-lm's even one, the launcher script that applies it."""
    d = Path(directory).expanduser()
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--write {d}: cannot create the directory ({e.strerror or e})") \
            from None
    p = r.plan
    written: list[Path] = []

    def put(name: str, text: str, mode: int | None = None) -> None:
        f = d / name
        try:
            f.write_text(text)
            if mode is not None:
                f.chmod(mode)
        except OSError as e:
            raise UsageError(f"--write: cannot write {f} ({e.strerror or e})") from None
        written.append(f)

    put("hostfile.json", json.dumps(hostfile_json(r), indent=4) + "\n")
    put("plan.json", json.dumps(cluster_to_json(r), indent=2) + "\n")
    if p and p.strategy == "pipeline" and p.split != p.even_split:
        put(SPLIT_SCRIPT, _SPLIT_TEMPLATE.format(split=list(p.split), script=SPLIT_SCRIPT))
    cmds = launch_commands(r)
    names = ",".join(h.spec.ssh or h.label for h in r.hosts)
    over = "thunderbolt" if r.link.name.startswith("tb") else "ethernet"
    # distributed_config takes --backend (ring, jaccl, jaccl-ring) and --auto-setup only for
    # Thunderbolt; over ethernet it reads each host's en0/en1 address.
    config_backend = f" --backend {r.link.backend}" if over == "thunderbolt" else ""
    auto = " --auto-setup" if over == "thunderbolt" else ""
    lines = ["#!/bin/sh",
             f"# Written by mlxfit cluster for {r.model} at {r.context_tokens:,} tokens."]
    if p is None or not p.supported:
        lines.append(f"# NO PLAN CAN RUN: {r.why}")
    else:
        verdict = "FITS" if p.fits else "DOES NOT FIT"
        tps = (f", predicted decode {p.predicted_decode_tps:.1f} tok/s"
               if p.predicted_decode_tps else "")
        lines.append(f"# Plan: {p.strategy} over {len(r.hosts)} host(s), link {r.link.name} "
                     f"(backend {r.link.backend}): {verdict}, largest safe context "
                     f"{p.max_safe_context:,}{tps}.")
        for hp in p.hosts:
            lines.append(f"#   rank {hp.rank}: {hp.label} ({hp.machine_name}) layers "
                         f"{hp.layers[0]}-{hp.layers[1] - 1}, {hp.total_bytes / 1e9:.2f} of "
                         f"{hp.usable_bytes / 1e9:.2f} GB")
    lines += [
        "#",
        "# Before the first run: hostfile.json lists the hosts in rank order; fill in their",
        "# \"ips\" (and \"rdma\" devices for jaccl), or let MLX find them (keep this host order:",
        "# each rank's layers were planned for that Mac):",
        (f"#   mlx.distributed_config --over {over}{config_backend} --hosts {names} "
         f"--output-hostfile hostfile.json{auto}"),
        "# This directory must exist at the same path on every host (mlx.launch changes into",
        "# it), and python3 there must have mlx-lm.",
        'cd "$(dirname "$0")"',
        "",
        "# Check the prediction (peak memory and tok/s are printed by rank 0):",
        cmds["benchmark"],
        "",
        "# Serve it (OpenAI-compatible API on rank 0):",
        "# " + cmds["server"],
        "",
    ]
    put("run.sh", "\n".join(lines), 0o755)
    return written
