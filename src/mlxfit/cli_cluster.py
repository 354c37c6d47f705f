"""`mlxfit cluster`: one model across several Macs with MLX distributed (see mlxfit.cluster)."""

from __future__ import annotations

import json
from typing import Any

import typer

from mlxfit.cli_common import console, fail
from mlxfit.errors import MlxfitError


def _gb(n: float) -> str:
    return f"{n / 1e9:,.2f}"


def render_cluster(r: Any, c: Any, explain: bool = False) -> None:
    """The report: the chosen plan's hosts, the verdict and why, the other plan in one line."""
    from rich.table import Table

    p = r.plan
    n = len(r.hosts)
    head = f"[bold]{r.model}[/] on {n} host{'s' if n > 1 else ''} at {r.context_tokens:,} tokens"
    if p is None or not p.supported:
        c.print(f"{head}: [bold red]NO PLAN CAN RUN[/]")
        c.print(f"  {r.why}")
    else:
        verdict = "[bold green]FITS[/]" if p.fits else "[bold red]DOES NOT FIT[/]"
        c.print(f"{head}, {p.strategy}" + (f" over {r.link.name} ({r.link.backend})"
                                           if n > 1 else "") + f": {verdict}")
        c.print(f"  [dim]{r.why}[/]")
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col, just in (("rank", "right"), ("host", "left"), ("layers", "left"),
                          ("weights", "right"), ("KV", "right"), ("transient", "right"),
                          ("total", "right"), ("usable", "right"), ("", "left")):
            t.add_column(col, justify=just, no_wrap=col != "host")  # type: ignore[arg-type]
        for h in p.hosts:
            kv = h.kv_bytes + h.state_bytes
            mark = "[green]ok[/]" if h.fits else "[bold red]OVER[/]"
            who = h.machine_name if h.label == f"host{h.rank}" else \
                f"{h.label} ({h.machine_name})"
            t.add_row(str(h.rank), who, f"{h.layers[0]}-{h.layers[1] - 1}",
                      _gb(h.weights_bytes), _gb(kv), _gb(h.transient_bytes),
                      _gb(h.total_bytes), _gb(h.usable_bytes), mark)
        c.print(t)
        c.print("  [dim]GB (10^9 B); KV includes recurrent state; weights = own share + "
                "replicated (embeddings, norms, head)[/]", soft_wrap=True)
        if p.failing_hosts:
            c.print(f"  [bold red]cannot hold its share:[/] {', '.join(p.failing_hosts)}")
        c.print(f"largest safe context: [bold]{p.max_safe_context:,}[/] tokens "
                f"(model limit {r.context_limit:,})")
        if p.predicted_decode_tps is not None:
            comm = (f" (of which link {p.comm_seconds * 1e3:.2f} ms/token)"
                    if p.comm_seconds else "")
            c.print(f"predicted decode: [bold]{p.predicted_decode_tps:,.1f} tok/s[/]{comm}")
        if p.strategy == "pipeline":
            c.print(f"split (layers by rank, rank 0 runs the last layers): "
                    f"{'/'.join(map(str, p.split))}; mlx-lm's default even split "
                    f"{'/'.join(map(str, p.even_split))} "
                    + ("fits" if p.even_split_fits else "does not fit"))
    for q in r.plans:
        if q is p:
            continue
        if not q.supported:
            c.print(f"[dim]{q.strategy}: cannot run: {q.refusal}[/]")
        else:
            tps = (f", {q.predicted_decode_tps:.1f} tok/s" if q.predicted_decode_tps else "")
            c.print(f"[dim]{q.strategy}: {'fits' if q.fits else 'does not fit'}, largest safe "
                    f"context {q.max_safe_context:,}{tps}[/]")
    if p is not None and p.assumptions:
        c.print("[bold]assumptions[/]")
        for a in p.assumptions:
            c.print(f"  - {a}", soft_wrap=True)
        lk = r.link
        c.print(f"  - link {lk.name}: {lk.latency_s * 1e6:g} us per hop, "
                f"{lk.bandwidth_gbs:g} GB/s ({lk.source})", soft_wrap=True)
    if explain and p is not None:
        for h in p.hosts:
            c.print(f"\n[bold]rank {h.rank} {h.label}[/]")
            for term in h.terms:
                c.print(f"  {term.name} = {term.bytes:,} B ({term.bytes / 1e9:.2f} GB)  "
                        f"[dim]{term.formula}[/]", soft_wrap=True)
        for term in p.speed_terms:
            inputs = ", ".join(f"{k}={v}" for k, v in term.inputs.items())
            c.print(f"  {term.name}: [dim]{term.formula}; {inputs}[/]", soft_wrap=True)
    for w in r.warnings:
        c.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
    for note in r.notes:
        c.print(f"[dim]note: {note}[/]", soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("cluster")
    def cluster_cmd(
        model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id, or catalog id."),
        host: list[str] | None = typer.Option(
            None, "--host", help='A Mac of the cluster in rank order, e.g. "M3 Ultra 512GB" or '
                                 '"2x M4 Max 128GB"; repeat for each.'),
        hosts_file: str | None = typer.Option(
            None, "--hosts-file", help="TOML file of \\[\\[hosts]] (machine, name, ssh, ips, rdma, "
                                       "memory_budget_gb, count); listed before any --host."),
        ctx: int = typer.Option(8192, "--ctx", help="Tokens in context at the end."),
        strategy: str = typer.Option("auto", "--strategy", help="pipeline, tensor or auto."),
        link: str | None = typer.Option(None, "--link", help="tb5 (JACCL RDMA), tb4 or 10gbe "
                                                                "(ring over TCP); default tb5."),
        link_latency_us: float | None = typer.Option(
            None, "--link-latency-us", help="Your measured per-hop latency (replaces the table)."),
        link_gbs: float | None = typer.Option(
            None, "--link-gbs", help="Your measured link bandwidth, GB/s (replaces the table)."),
        macos: int | None = typer.Option(None, "--macos", help="macOS major version (default 26)."),
        revision: str | None = typer.Option(None, "--revision"),
        gen: int = typer.Option(0, "--gen", help="How many of the --ctx tokens are generated."),
        prefill_step_size: int = typer.Option(2048, "--prefill-step-size"),
        kv_bits: int | None = typer.Option(None, "--kv-bits"),
        kv_group_size: int = typer.Option(64, "--kv-group-size"),
        quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start"),
        backend: str = typer.Option("metal", "--backend", help="metal or cpu."),
        write: str | None = typer.Option(
            None, "--write", help="Write hostfile.json, run.sh and plan.json for mlx.launch here."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
        explain: bool = typer.Option(False, "--explain", help="Every host's terms."),
    ) -> None:
        """Split a model across several Macs (MLX distributed): per-host memory, context, speed."""
        from mlxfit.cluster import cluster, cluster_to_json, write_launch

        try:
            r = cluster(model, host or [], ctx, hosts_file=hosts_file, strategy=strategy,
                        link=link, link_latency_us=link_latency_us, link_gbs=link_gbs,
                        macos=macos, revision=revision, gen=gen,
                        prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                        kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
                        backend=backend)
            written = write_launch(r, write) if write else []
        except MlxfitError as e:
            fail(e)
            return
        if as_json:
            doc = cluster_to_json(r)
            if written:
                doc["written"] = [str(p) for p in written]
            print(json.dumps(doc, indent=2))
        else:
            c = console()
            render_cluster(r, c, explain=explain)
            if written:
                c.print(f"wrote {', '.join(str(p) for p in written)}", soft_wrap=True)
        raise typer.Exit(0 if r.fits else 1)
