"""What ``mlxfit cluster`` returns: ``HostPlan`` (one host's share under one strategy),
``Plan`` (one strategy over all hosts, or why it cannot run) and ``ClusterResult`` (every plan
considered and the one chosen). They are plain frozen records, kept in their own module so the
planner (``mlxfit.verbs.cluster.plan``), the writers (``mlxfit.render.cluster_launch``) and the public twin
(``mlxfit.cluster``) can all share them without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from mlxfit.estimate.bands import Bands, verdict
from mlxfit.estimate.memory import Run, Term
from mlxfit.json_result import JsonResult
from mlxfit.model.quantize import ConversionPlan
from mlxfit.verbs.cluster.hosts import HostMachine, Link

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
    # [lo, hi] of its real peak, 9 in 10 (estimate/bands.py; None without a band table)
    peak_band: tuple[int, int] | None = None

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
    # Prompt processing (verbs/cluster/prefill.py): None without compute figures
    predicted_ttft_s: float | None = None
    predicted_prefill_tps: float | None = None
    prefill_terms: tuple[Any, ...] = ()
    bands: Bands | None = None  # issue 27 (estimate/bands.plan_bands)

    @property
    def verdict(self) -> str:
        """estimate/bands.verdict, the rule of every verb, at the host nearest its limit at
        the upper bound of its peak band."""
        if not self.hosts:
            return verdict(False, None, 0)
        worst = max(self.hosts, key=lambda h: (h.peak_band[1] if h.peak_band else h.total_bytes)
                    - h.usable_bytes)
        return verdict(self.supported and self.fits,
                       worst.peak_band[1] if worst.peak_band else None, worst.usable_bytes)


@dataclass(frozen=True)
class ClusterResult(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.cluster:cluster_to_json"
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
    # The conversion sized (--q-bits ...); None otherwise.
    quantization_plan: ConversionPlan | None = None

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

    @property
    def verdict(self) -> str:
        """The chosen plan's verdict ("does_not_fit" when none can run)."""
        p = self.plan
        return p.verdict if p is not None else "does_not_fit"

