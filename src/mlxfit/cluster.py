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

The code is split by concern: ``mlxfit.cluster_hosts`` (links and hosts),
``mlxfit.cluster_results`` (the result records), ``mlxfit.cluster_plan`` (the pure planning)
and ``mlxfit.cluster_launch`` (JSON and launch files). This module holds the public twin
``cluster()`` and re-exports every public name of those modules, so ``from mlxfit.cluster
import ...`` keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlxfit.calibration import Calibration
from mlxfit.cluster_hosts import (
    USER_LINKS,
    HostMachine,
    HostSpec,
    Link,
    load_links,
    parse_host_args,
    read_hosts_file,
    resolve_hosts,
    resolve_link,
)
from mlxfit.cluster_launch import (
    SCHEMA_VERSION,
    SPLIT_SCRIPT,
    cluster_to_json,
    hostfile_json,
    launch_commands,
    plan_to_json,
    write_launch,
)
from mlxfit.cluster_plan import (
    MLA_MODULES,
    MLX_LM_REMAP,
    PIPELINE_ASSUMPTIONS,
    PIPELINE_MODULES,
    STRATEGIES,
    TENSOR_ASSUMPTIONS,
    TENSOR_MODELLED,
    TENSOR_MODULES,
    WeightsSplit,
    even_split,
    mlx_lm_module,
    plan_cluster,
    plan_pipeline,
    plan_tensor,
    proportional_split,
    rank_ranges,
    split_weights,
)
from mlxfit.cluster_results import ClusterResult, HostPlan, Plan
from mlxfit.errors import UsageError
from mlxfit.memory import Run

__all__ = [
    "MLA_MODULES", "MLX_LM_REMAP", "PIPELINE_ASSUMPTIONS", "PIPELINE_MODULES", "SCHEMA_VERSION",
    "SPLIT_SCRIPT", "STRATEGIES", "TENSOR_ASSUMPTIONS", "TENSOR_MODELLED", "TENSOR_MODULES",
    "USER_LINKS", "ClusterResult", "HostMachine", "HostPlan", "HostSpec", "Link", "Plan",
    "WeightsSplit", "cluster", "cluster_to_json", "even_split", "hostfile_json",
    "launch_commands", "load_links", "mlx_lm_module", "parse_host_args", "plan_cluster",
    "plan_pipeline", "plan_tensor", "plan_to_json", "proportional_split", "rank_ranges",
    "read_hosts_file", "resolve_hosts", "resolve_link", "split_weights", "write_launch",
]


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
    run = Run(ctx=ctx, gen=gen, prefill_step_size=prefill_step_size, kv_bits=kv_bits,
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
