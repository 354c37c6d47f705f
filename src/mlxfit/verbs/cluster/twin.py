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

The code is split by concern: ``hosts`` (links and hosts), ``results`` (the result records),
``plan`` (the pure planning), ``launch`` (the mlx.launch files) and ``mlxfit.render.cluster``
(text and JSON). This module holds the twin ``cluster()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlxfit.calibration.constants import Calibration
from mlxfit.errors import UsageError
from mlxfit.estimate.memory import run_from
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.sources.resolve import resolve_model
from mlxfit.sources.source import INDEX_NAME
from mlxfit.verbs.cluster.hosts import (
    HostSpec,
    Link,
    parse_host_args,
    read_hosts_file,
    resolve_hosts,
    resolve_link,
)
from mlxfit.verbs.cluster.plan import (
    plan_cluster,
)
from mlxfit.verbs.cluster.results import ClusterResult
from mlxfit.verbs.convert_plan import quant_recipe
from mlxfit.verbs.edges import (
    calibration_for_user,
    calibration_note,
    check_machine_params,
    run_on,
)
from mlxfit.verbs.fit import fit_inputs, sized_source
from mlxfit.verbs.plan import check_plan, with_plan

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
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: int | None = None,
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
    backend: str = "metal",
    calibration: Calibration | None = None,
    q_bits: int | None = None,
    q_group_size: int | None = None,
    q_mode: str | None = None,
    quant_predicate: str | None = None,
    dtype: str | None = None,
    plan: str = "auto",
    with_vision: bool = False,
) -> ClusterResult:
    """Will ``model`` run a ``ctx``-token generation with mlx-lm across these Macs, split how,
    how fast? ``hosts`` are SKU strings ("M3 Ultra 512GB", "2x M4 Max 128GB") in rank order;
    ``hosts_file`` a TOML file of [[hosts]] (listed first). ``q_bits``...``dtype``: size the
    model as mlx_lm.convert would write it (mlxfit.verbs.convert_plan)."""
    # Every parameter is checked before the hosts file is read or the model resolved.
    run = run_from(ctx=ctx, gen=gen, prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                   kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
                   backend=backend)
    check_machine_params(macos=macos)
    check_plan(plan)
    recipe = quant_recipe(q_bits, q_group_size, q_mode, quant_predicate, dtype)
    cal = calibration_for_user(calibration)
    cal.backend(backend)  # a backend the calibration has
    specs: list[HostSpec] = []
    extra: dict[str, Any] = {}
    if hosts_file is not None:
        specs, extra = read_hosts_file(Path(hosts_file))
    specs += parse_host_args(list(hosts or []))
    if not specs:
        raise UsageError("give at least one hosts (or hosts_file)", param="hosts",
                         also=("hosts_file",))
    if link is None:
        link = extra.get("link", "tb5")
    lk = link if isinstance(link, Link) else resolve_link(str(link), link_latency_us, link_gbs)
    if isinstance(extra.get("backend"), str):
        lk = replace(lk, backend=extra["backend"])
    # The one model path of fit, matrix and serve-plan: the config checked against its own
    # weights, sized as mlx_lm.convert would write it when asked, with the chosen cache plan.
    given = resolve_model(model, revision=revision)
    src, inputs = sized_source(given, recipe, model, with_vision)
    inputs, plan_warnings, plan_notes = with_plan(inputs, src.config, plan, run)
    converted = recipe is not None
    conversion = inputs.weights_detail.conversion
    cfg = inputs.cfg
    machines = resolve_hosts(specs, macos)
    # The run on the hosts' GPUs (verbs.edges.run_on, as fit takes it from its machine) when
    # every host gives the same; else their GPU class and tier where those agree (the commit
    # rule and drain class of the Metal floor), the kernel paths left at the default.
    if all(h.machine for h in machines):
        on_hosts = {run_on(run, h.machine) for h in machines}
        kinds = {(r.gpu_class, r.gpu_tier) for r in on_hosts}
        if len(on_hosts) == 1:
            run = on_hosts.pop()
        elif len(kinds) == 1:
            cls, tier = kinds.pop()
            run = replace(run, gpu_class=cls, gpu_tier=tier)
    notes = list(src.notes)
    by_note: dict[str, list[str]] = {}
    for h in machines:
        for x in h.notes:
            by_note.setdefault(x, []).append(h.label)
    notes += [f"{', '.join(labels)}: {x}" for x, labels in by_note.items()]
    notes += [*plan_notes, *calibration_note(cal)]
    single = False
    model_path = src.name
    if src.kind in ("folder", "hf-cache") and not converted:  # does it carry the index?
        loc = Path(src.location)
        single = not (loc / INDEX_NAME).exists()
        if src.kind == "folder":
            model_path = str(loc)
    result = plan_cluster(model=src.name, source_kind=src.kind, cfg=cfg, tensors=src.tensors,
                          hosts=machines, run=run, cal=cal, link=lk, strategy=strategy,
                          with_vision=with_vision, notes=notes, warnings=plan_warnings,
                          model_path=model_path, single_safetensors=single,
                          params=inputs.weights.params)
    result = replace(result, quantization_plan=conversion)
    if len(machines) == 1 and machines[0].machine is not None and result.fits:
        # One Mac: fit's own run on it, for the GPU-watchdog rule every verb applies.
        dog = fit_inputs(inputs, run, machines[0].machine, cal).watchdog
        if dog:
            result = replace(result, warnings=(*result.warnings, dog))
    return result
