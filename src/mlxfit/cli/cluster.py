"""`mlxfit cluster`: one model across several Macs with MLX distributed (see mlxfit.verbs.cluster.twin)."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail, wants_json
from mlxfit.cli.options import (
    BackendOpt,
    ClusterForceOpt,
    ClusterWriteOpt,
    CtxOpt,
    DtypeOpt,
    ExplainOpt,
    FormatOpt,
    GenOpt,
    JsonOpt,
    KvBitsOpt,
    KvGroupSizeOpt,
    MacosOpt,
    PlanOpt,
    PrefillStepSizeOpt,
    QBitsOpt,
    QGroupSizeOpt,
    QModeOpt,
    QuantizedKvStartOpt,
    QuantPredicateOpt,
    RevisionOpt,
    WithVisionOpt,
)
from mlxfit.cli.positional import ModelFlagCommand
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.render import dumps
from mlxfit.render.cluster import cluster_to_json, render_cluster
from mlxfit.render.cluster_launch import write_launch
from mlxfit.render.text import esc
from mlxfit.verbs.cluster.twin import cluster

app = typer.Typer(add_completion=False)  # the completion flags are the root command's

@app.command("cluster", cls=ModelFlagCommand)  # --model X: mlx-lm's spelling
def cluster_cmd(
    model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id, catalog id, or a Hub repo id (headers only)."),
    host: list[str] | None = typer.Option(  # noqa: B008 (Typer's idiom for a list option)
        None, "--host", help='A Mac of the cluster in rank order, e.g. "M3 Ultra 512GB" or '
                             '"2x M4 Max 128GB"; repeat for each.'),
    hosts_file: str | None = typer.Option(
        None, "--hosts-file", help="TOML file of \\[\\[hosts]] (machine, name, ssh, ips, rdma, "
                                   "memory_budget_gb, count); listed before any --host."),
    ctx: CtxOpt = 8192,
    strategy: str = typer.Option("auto", "--strategy", help="pipeline, tensor or auto."),
    link: str | None = typer.Option(None, "--link", help="tb5 (JACCL RDMA), tb4 or 10gbe "
                                                            "(ring over TCP); default tb5."),
    link_latency_us: float | None = typer.Option(
        None, "--link-latency-us", help="Your measured per-hop latency (replaces the table)."),
    link_gbs: float | None = typer.Option(
        None, "--link-gbs", help="Your measured link bandwidth, GB/s (replaces the table)."),
    macos: MacosOpt = None,
    revision: RevisionOpt = None,
    gen: GenOpt = 0,
    prefill_step_size: PrefillStepSizeOpt = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: KvBitsOpt = None,
    kv_group_size: KvGroupSizeOpt = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: QuantizedKvStartOpt = DEFAULT_QUANTIZED_KV_START,
    backend: BackendOpt = "metal",
    write: ClusterWriteOpt = None,
    force: ClusterForceOpt = False,
    as_json: JsonOpt = False,
    fmt: FormatOpt = "table",
    explain: ExplainOpt = False,
    q_bits: QBitsOpt = None,
    q_group_size: QGroupSizeOpt = None,
    q_mode: QModeOpt = None,
    quant_predicate: QuantPredicateOpt = None,
    dtype: DtypeOpt = None,
    plan: PlanOpt = "auto",
    with_vision: WithVisionOpt = False,
) -> None:
    """Split a model across several Macs (MLX distributed): per-host memory, context, speed."""
    try:
        as_json = wants_json(fmt, as_json, "cluster")
        r = cluster(model, host or [], ctx, hosts_file=hosts_file, strategy=strategy,
                    link=link, link_latency_us=link_latency_us, link_gbs=link_gbs,
                    macos=macos, revision=revision, gen=gen,
                    prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                    kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
                    backend=backend, q_bits=q_bits, q_group_size=q_group_size, q_mode=q_mode,
                    quant_predicate=quant_predicate, dtype=dtype, plan=plan,
                    with_vision=with_vision)
        if write and not r.fits and not force:
            why = r.why if r.plan is None or not r.plan.supported else \
                f"the {r.plan.strategy} plan does not fit at {r.context_tokens:,} tokens"
            raise UsageError(f"write: nothing written: {why}; a launch script for it would "
                             "run out of memory (--force writes it anyway)", param="write",
                             also=("force",))
        written = write_launch(r, write) if write else []
    except MlxfitError as e:
        fail(e, as_json)
        return
    if as_json:
        print(dumps(cluster_to_json(r, written)))
    else:
        c = console()
        render_cluster(r, c, explain=explain)
        if written:
            c.print(f"wrote {esc(', '.join(str(p) for p in written))}", soft_wrap=True)
    raise typer.Exit(0 if r.fits else 1)
