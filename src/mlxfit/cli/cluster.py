"""`mlxfit cluster`: one model across several Macs with MLX distributed (see mlxfit.verbs.cluster.twin)."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail
from mlxfit.cli.sizes import tokens
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.render import dumps
from mlxfit.render.cluster import cluster_to_json, render_cluster
from mlxfit.render.cluster_launch import write_launch
from mlxfit.render.text import esc
from mlxfit.verbs.cluster.twin import cluster

app = typer.Typer()

@app.command("cluster")
def cluster_cmd(
    model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id, or catalog id."),
    host: list[str] | None = typer.Option(  # noqa: B008 (Typer's idiom for a list option)
        None, "--host", help='A Mac of the cluster in rank order, e.g. "M3 Ultra 512GB" or '
                             '"2x M4 Max 128GB"; repeat for each.'),
    hosts_file: str | None = typer.Option(
        None, "--hosts-file", help="TOML file of \\[\\[hosts]] (machine, name, ssh, ips, rdma, "
                                   "memory_budget_gb, count); listed before any --host."),
    ctx: int = typer.Option(8192, "--ctx", parser=tokens, metavar="TOKENS", help="Tokens in context at the end."),
    strategy: str = typer.Option("auto", "--strategy", help="pipeline, tensor or auto."),
    link: str | None = typer.Option(None, "--link", help="tb5 (JACCL RDMA), tb4 or 10gbe "
                                                            "(ring over TCP); default tb5."),
    link_latency_us: float | None = typer.Option(
        None, "--link-latency-us", help="Your measured per-hop latency (replaces the table)."),
    link_gbs: float | None = typer.Option(
        None, "--link-gbs", help="Your measured link bandwidth, GB/s (replaces the table)."),
    macos: int | None = typer.Option(None, "--macos", help="macOS major version (default 26)."),
    revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit (a unique prefix of a cached snapshot too)."),
    gen: int = typer.Option(0, "--gen", parser=tokens, metavar="TOKENS", help="How many of the --ctx tokens are generated."),
    prefill_step_size: int = typer.Option(2048, "--prefill-step-size", parser=tokens, metavar="TOKENS", help="mlx-lm's prefill chunk (mlx-lm --prefill-step-size)."),
    kv_bits: int | None = typer.Option(None, "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits)."),
    kv_group_size: int = typer.Option(64, "--kv-group-size", help="Group size of the quantized KV cache (mlx-lm --kv-group-size: 32, 64 or 128)."),
    quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start", parser=tokens, metavar="TOKENS", help="Tokens before the KV cache is quantized (mlx-lm --quantized-kv-start)."),
    backend: str = typer.Option("metal", "--backend", help="metal or cpu."),
    write: str | None = typer.Option(
        None, "--write", help="Write hostfile.json, run.sh and plan.json for mlx.launch here "
                              "(only for a plan that fits, unless --force)."),
    force: bool = typer.Option(False, "--force", help="With --write: write the launch files "
                                                      "even when the plan does not fit."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    explain: bool = typer.Option(False, "--explain", help="Every host's terms."),
    q_bits: int | None = typer.Option(None, "--q-bits", help="Size an unquantized model as `mlx_lm.convert -q --q-bits B` would write it."),
    q_group_size: int | None = typer.Option(None, "--q-group-size", help="mlx_lm.convert's group size (affine default 64)."),
    q_mode: str | None = typer.Option(None, "--q-mode", help="affine, mxfp4, nvfp4 or mxfp8."),
    quant_predicate: str | None = typer.Option(None, "--quant-predicate", help="mixed_2_6, mixed_3_4, mixed_3_6 or mixed_4_6."),
    dtype: str | None = typer.Option(None, "--dtype", help="float16, bfloat16 or float32 (mlx_lm.convert --dtype)."),
    plan: str = typer.Option("auto", "--plan", help="Cache plan: auto, table or mlx-lm (as fit's)."),
    with_vision: bool = typer.Option(False, "--with-vision", help="Count vision/audio towers."),
) -> None:
    """Split a model across several Macs (MLX distributed): per-host memory, context, speed."""
    try:
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
