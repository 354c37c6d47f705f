"""`mlxfit cluster` as text and as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlxfit.hardware.resolve import bare_machine
from mlxfit.render import (
    SCHEMA_VERSION,
    VERDICT_TEXT,
    bands_to_json,
    conversion_to_json,
    machine_to_json,
    run_to_json,
    seconds_to_json,
    term_to_json,
    time_term_to_json,
    tps_to_json,
)
from mlxfit.render.fit import render_conversion
from mlxfit.render.text import esc
from mlxfit.verbs.cluster.hosts import HostMachine
from mlxfit.verbs.cluster.results import ClusterResult, HostPlan, Plan


def _host_machine(h: HostMachine | HostPlan) -> dict[str, Any]:
    m = getattr(h, "machine", None)
    if m is None:  # a plan built without resolve_hosts: only its figures
        m = bare_machine(h.machine_name, h.ram_bytes, h.usable_bytes, h.usable_source,
                         h.bandwidth_gbs)
    return machine_to_json(m)


def _machine_json(hp: HostPlan, hosts: tuple[HostMachine, ...]) -> dict[str, Any]:
    return _host_machine(next((h for h in hosts if h.rank == hp.rank), hp))


def _host_json(hp: HostPlan, hosts: tuple[HostMachine, ...]) -> dict[str, Any]:
    return {
        "rank": hp.rank, "name": hp.label, "machine": _machine_json(hp, hosts),
        "usable_bytes": hp.usable_bytes,
        "layers": {"start": hp.layers[0], "end": hp.layers[1], "count": hp.n_layers},
        "weights_bytes": hp.weights_bytes, "own_weights_bytes": hp.sharded_weights_bytes,
        "replicated_weights_bytes": hp.replicated_weights_bytes, "kv_bytes": hp.kv_bytes,
        "state_bytes": hp.state_bytes, "transient_bytes": hp.transient_bytes,
        "comm_buffer_bytes": hp.comm_bytes, "total_bytes": hp.total_bytes,
        "headroom_bytes": hp.headroom_bytes, "fits": hp.fits,
        "peak_band": list(hp.peak_band) if hp.peak_band else None, "peak_phase": hp.peak_phase,
        "decode_seconds": hp.decode_seconds,
        "terms": [term_to_json(t) for t in hp.terms],
    }


def plan_to_json(p: Plan, hosts: tuple[HostMachine, ...] = ()) -> dict[str, Any]:
    return {
        "strategy": p.strategy, "supported": p.supported, "refusal": p.refusal,
        "fits": p.fits, "failing_hosts": list(p.failing_hosts),
        "verdict": p.verdict, "bands": bands_to_json(p.bands),  # issue 27
        "max_safe_context": p.max_safe_context,
        "predicted_decode_tps": tps_to_json(p.predicted_decode_tps),
        "predicted_prefill_tps": tps_to_json(p.predicted_prefill_tps),
        "predicted_ttft_s": seconds_to_json(p.predicted_ttft_s),
        "decode_seconds": p.decode_seconds, "comm_seconds": p.comm_seconds,
        "split": list(p.split), "even_split": list(p.even_split),
        "even_split_fits": p.even_split_fits,
        "hosts": [_host_json(h, hosts) for h in p.hosts],
        "speed_terms": [term_to_json(t) for t in p.speed_terms],
        "prefill_terms": [time_term_to_json(t) for t in p.prefill_terms],
        "assumptions": list(p.assumptions), "sums": dict(p.sums),
    }


def cluster_to_json(r: ClusterResult, written: Sequence[Path | str] = ()) -> dict[str, Any]:
    """The chosen plan's verdict, largest safe context and speed are at the top; every plan
    considered is in "plans"; "written" (last) lists the files --write wrote, when any."""
    p = r.plan
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": r.model, "source": r.source_kind, "mlx_lm_module": r.mlx_lm_module,
        "run": run_to_json(r.run), "context_tokens": r.context_tokens,
        "context_limit": r.context_limit,
        "strategy_requested": r.strategy_requested, "chosen": r.chosen, "why": r.why,
        "fits": r.fits,
        "verdict": r.verdict,  # issue 27: the chosen plan's
        "bands": bands_to_json(p.bands) if p is not None and p.supported else None,
        "max_safe_context": p.max_safe_context if p is not None and p.supported else 0,
        "predicted_decode_tps": tps_to_json(p.predicted_decode_tps)
        if p is not None and p.supported else None,
        "link": {"name": r.link.name, "backend": r.link.backend,
                 "latency_us": r.link.latency_s * 1e6, "bandwidth_gbs": r.link.bandwidth_gbs,
                 "nominal_gbps": r.link.nominal_gbps, "unverified": r.link.unverified,
                 "source": r.link.source},
        "weights_bytes": r.weights_bytes, "kv_bytes": r.kv_bytes,
        "hosts": [{"rank": h.rank, "name": h.label, "machine": _host_machine(h)}
                  for h in r.hosts],
        "plans": [plan_to_json(q, r.hosts) for q in r.plans],
        "quantization_plan": conversion_to_json(r.quantization_plan),
        "warnings": list(r.warnings), "notes": list(r.notes),
    }
    if written:
        doc["written"] = [str(w) for w in written]
    return doc


def _gb(n: float) -> str:
    return f"{n / 1e9:,.2f}"


def render_cluster(r: Any, c: Any, explain: bool = False) -> None:
    """The report: the chosen plan's hosts, the verdict and why, the other plan in one line."""
    from rich.table import Table  # rich is heavy: only a text report needs a table

    p = r.plan
    n = len(r.hosts)
    head = f"[bold]{esc(r.model)}[/] on {n} host{'s' if n > 1 else ''} at {r.context_tokens:,} tokens"
    if p is None or not p.supported:
        c.print(f"{head}: [bold red]NO PLAN CAN RUN[/]")
        c.print(f"  {esc(r.why)}")
    else:
        color = {"fits": "green", "tight": "yellow"}.get(p.verdict, "red")
        verdict = f"[bold {color}]{VERDICT_TEXT[p.verdict]}[/]"
        c.print(f"{head}, {esc(p.strategy)}" + (f" over {esc(r.link.name)} ({esc(r.link.backend)})"
                                           if n > 1 else "") + f": {verdict}")
        c.print(f"  [dim]{esc(r.why)}[/]")
        render_conversion(r.quantization_plan, c)
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col, just in (("rank", "right"), ("host", "left"), ("layers", "left"),
                          ("weights", "right"), ("KV", "right"), ("transient", "right"),
                          ("total", "right"), ("usable", "right"), ("", "left")):
            t.add_column(col, justify=just, no_wrap=col != "host")  # type: ignore[arg-type]
        for h in p.hosts:
            kv = h.kv_bytes + h.state_bytes
            mark = ("[bold red]OVER[/]" if not h.fits else "[yellow]tight[/]"
                    if h.peak_band and h.peak_band[1] > h.usable_bytes else "[green]ok[/]")
            who = h.machine_name if h.label == f"host{h.rank}" else \
                f"{h.label} ({h.machine_name})"
            t.add_row(str(h.rank), esc(who), f"{h.layers[0]}-{h.layers[1] - 1}",
                      _gb(h.weights_bytes), _gb(kv), _gb(h.transient_bytes),
                      _gb(h.total_bytes), _gb(h.usable_bytes), mark)
        c.print(t)
        c.print("  [dim]GB (10^9 B); KV includes recurrent state; weights = own share + "
                "replicated (embeddings, norms, head)[/]", soft_wrap=True)
        if p.failing_hosts:
            c.print(f"  [bold red]cannot hold its share:[/] {esc(', '.join(p.failing_hosts))}")
        c.print(f"largest safe context: [bold]{p.max_safe_context:,}[/] tokens "
                f"(model limit {r.context_limit:,})")
        if p.predicted_decode_tps is not None:
            comm = (f" (of which link {p.comm_seconds * 1e3:.2f} ms/token)"
                    if p.comm_seconds else "")
            b = p.bands.predicted_decode_tps if p.bands else None
            rng = f" ({b[0]:,.1f}-{b[1]:,.1f})" if b else ""
            c.print(f"predicted decode: [bold]{p.predicted_decode_tps:,.1f} tok/s[/]{rng}{comm}")
        if p.predicted_ttft_s is not None and p.predicted_prefill_tps is not None:
            c.print(f"predicted prompt: [bold]{p.predicted_prefill_tps:,.0f} tok/s[/], time to "
                    f"first token [bold]{p.predicted_ttft_s:,.1f} s[/]")
        if p.strategy == "pipeline":
            c.print(f"split (layers by rank, rank 0 runs the last layers): "
                    f"{'/'.join(map(str, p.split))}; mlx-lm's default even split "
                    f"{'/'.join(map(str, p.even_split))} "
                    + ("fits" if p.even_split_fits else "does not fit"))
    for q in r.plans:
        if q is p:
            continue
        if not q.supported:
            c.print(f"[dim]{esc(q.strategy)}: cannot run: {esc(q.refusal)}[/]")
        else:
            tps = (f", {q.predicted_decode_tps:.1f} tok/s" if q.predicted_decode_tps else "")
            c.print(f"[dim]{esc(q.strategy)}: {'fits' if q.fits else 'does not fit'}, largest safe "
                    f"context {q.max_safe_context:,}{tps}[/]")
    if p is not None and p.assumptions:
        c.print("[bold]assumptions[/]")
        for a in p.assumptions:
            c.print(f"  - {esc(a)}", soft_wrap=True)
        lk = r.link
        c.print(f"  - link {esc(lk.name)}: {lk.latency_s * 1e6:g} us per hop, "
                f"{lk.bandwidth_gbs:g} GB/s ({esc(lk.source)})", soft_wrap=True)
    if explain and p is not None:
        for h in p.hosts:
            c.print(f"\n[bold]rank {h.rank} {esc(h.label)}[/]")
            for term in h.terms:
                c.print(f"  {esc(term.name)} = {term.bytes:,} B ({term.bytes / 1e9:.2f} GB)  "
                        f"[dim]{esc(term.formula)}[/]", soft_wrap=True)
        for term in p.speed_terms:
            inputs = ", ".join(f"{k}={v}" for k, v in term.inputs.items())
            c.print(f"  {esc(term.name)}: [dim]{esc(term.formula)}; {esc(inputs)}[/]",
                    soft_wrap=True)
    for w in r.warnings:
        c.print(f"[yellow]warning:[/] {esc(w)}", soft_wrap=True)
    for note in r.notes:
        c.print(f"[dim]note: {esc(note)}[/]", soft_wrap=True)
