"""ServePlan -> JSON object or Rich report. No arithmetic beyond unit conversion."""

from __future__ import annotations

from typing import Any

from mlxfit.hardware.resolve import bare_machine
from mlxfit.render import (
    SCHEMA_VERSION,
    VERDICT_TEXT,
    bands_to_json,
    machine_to_json,
    tps_to_json,
)
from mlxfit.render.fit import fit_to_json, gb
from mlxfit.render.text import esc
from mlxfit.verbs.serve_plan import ServePlan


def _secs(s: float | None) -> float | None:
    return round(s, 3) if s is not None else None


def serve_plan_to_json(p: ServePlan) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "model": p.model,
        "machine": machine_to_json(p.machine or bare_machine(
            p.machine_name, 0, p.usable_bytes, "")),
        "usable_bytes": p.usable_bytes,
        "context_tokens": p.ctx,
        "users": p.users,
        "batched": p.batched,
        "concurrency": p.concurrency,
        "max_concurrency": p.max_concurrency,
        "fits": p.fits,
        "runs": p.fits and p.result is not None and p.result.runs,
        "total_bytes": p.result.total_bytes if p.result is not None else None,
        # issue 27: the plan's verdict and bands (FitResult's, the rule of every verb)
        "verdict": p.verdict,
        "bands": bands_to_json(p.result.bands if p.result is not None else None),
        "aggregate_tps": tps_to_json(p.aggregate_tps),
        "per_user_tps": tps_to_json(p.per_user_tps),
        "predicted_ttft_s": _secs(p.ttft_seconds),
        "predicted_ttft_batch_s": _secs(p.ttft_batch_seconds),
        "prompt_cache_size": p.prompt_cache_size,
        "prompt_cache_bytes": p.prompt_cache_bytes,
        "bytes_per_cached_prompt": p.bytes_per_cached_prompt,
        "command": p.command,
        "table": [{"concurrency": r.concurrency, "total_bytes": r.total_bytes, "fits": r.fits,
                   "verdict": r.verdict,
                   "aggregate_tps": tps_to_json(r.aggregate_tps),
                   "per_user_tps": tps_to_json(r.per_user_tps), "bound": r.bound}
                  for r in p.rows],
        "warnings": list(p.warnings),
        "notes": list(p.notes),
        "fit": fit_to_json(p.result) if p.result is not None else None,
    }


# PlanRow.bound -> what the table says: the step's time is set by reading bytes or by FLOPs.
_SET_BY = {"memory": "bandwidth", "compute": "compute"}


def _tps(v: float | None) -> str:
    return f"{v:,.1f}" if v is not None else "-"


def _memory_line(p: ServePlan) -> str:
    """The plan's peak as the sum it is: weights + the running requests' caches + the cached
    prompts + the transient (+ recurrent state), each named."""
    r = p.result
    extra = {t.name: t.bytes for t in r.extra_terms}
    caches = r.kv_bytes + extra.pop("parallel_kv", 0)  # the first request's + the others'
    transient = r.transient_bytes + extra.pop("batched_transient", 0)
    parts = [f"weights {gb(r.weights_bytes)}",
             f"{p.concurrency} request cache{'s' if p.concurrency > 1 else ''} {gb(caches)}"]
    if r.state_bytes:
        parts.append(f"recurrent state {gb(r.state_bytes)}")
    if "prompt_cache" in extra:
        parts.append(f"{p.prompt_cache_size} cached prompt{'s' if p.prompt_cache_size > 1 else ''}"
                     f" {gb(extra.pop('prompt_cache'))}")
    parts += [f"{esc(name.replace('_', ' '))} {gb(b)}" for name, b in extra.items()]
    parts.append(f"transient {gb(transient)}")
    return (f"memory at {p.concurrency}: {gb(r.total_bytes)} of {gb(p.usable_bytes)} usable = "
            + " + ".join(parts))


def render_serve_plan(p: ServePlan, console: Any) -> None:
    from rich.table import Table  # rich is heavy: only a text report needs a table

    if not p.concurrency:
        console.print(f"[bold]{esc(p.model)}[/] on [bold]{esc(p.machine_name)}[/]: "
                      "[bold red]not even "
                      f"one {p.ctx:,}-token request fits[/] ({gb(p.usable_bytes)} usable)")
    else:
        how = "batched" if p.batched else "one at a time"
        where = (f"[bold]{esc(p.model)}[/] on [bold]{esc(p.machine_name)}[/], {p.ctx:,}-token "
                 "requests: ")
        if not p.fits:  # the question asked comes first, not as the last warning (ux-3 F14)
            console.print(where + f"[bold red]--users {p.users} does not fit[/]: at most "
                          f"{p.concurrency} concurrent ({how}); the plan below is for "
                          f"{p.concurrency}")
        else:
            console.print(where + f"[bold green]{p.concurrency} concurrent[/] ({how})"
                          + (f", as asked (--users {p.users})" if p.users else "")
                          + (f": [bold yellow]{VERDICT_TEXT['tight']}[/]" if p.verdict == "tight"
                             else ""))
        console.print(_memory_line(p))
        console.print(f"decode with every request at {p.ctx:,} tokens: "
                      f"[bold]{_tps(p.aggregate_tps)} tok/s[/] in all, "
                      f"{_tps(p.per_user_tps)} tok/s per user")
        if p.ttft_seconds is not None:
            together = (f", {p.ttft_batch_seconds:,.1f} s when {min(p.concurrency, 8)} arrive "
                        "together" if p.concurrency > 1 else "")
            console.print(f"time to first token: {p.ttft_seconds:,.1f} s for a lone "
                          f"{p.ctx:,}-token prompt{together}")
        cache = (f"prompt cache: {p.prompt_cache_size} cached prompt(s) of up to "
                 f"{gb(p.bytes_per_cached_prompt)} each (--prompt-cache-size)")
        if p.prompt_cache_bytes is not None:
            cache += (f"; --prompt-cache-bytes {p.prompt_cache_bytes:,} = (cached + "
                      "concurrent) x one cache, as the server counts it")
        console.print(cache)
        console.print("\n[bold]launch:[/]")
        console.print(f"  $ {esc(p.command)}", soft_wrap=True)
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col, just in (("concurrent", "right"), ("GB (10^9 B)", "right"), ("fits", "left"),
                      ("tok/s in all", "right"), ("tok/s per user", "right"),
                      ("speed set by", "left")):
        t.add_column(col, justify=just)
    for row in p.rows:
        t.add_row(str(row.concurrency), gb(row.total_bytes).removesuffix(" GB"),
                  ("[yellow]tight[/]" if row.verdict == "tight" else "yes") if row.fits
                  else "[red]no[/]", _tps(row.aggregate_tps),
                  _tps(row.per_user_tps), _SET_BY.get(row.bound or "", "-"))
    console.print()
    console.print(t)
    console.print(f"[dim]each row: mlxfit fit MODEL --ctx {p.ctx} --parallel N "
                  f"--prompt-cache {p.prompt_cache_size}; the last row is the first count that "
                  "does not fit; speed set by: what one decode step waits for (memory "
                  "bandwidth reading weights and caches, or compute)[/]")
    for w in p.warnings:
        console.print(f"[yellow]warning:[/] {esc(w)}", soft_wrap=True)
    for n in p.notes:
        console.print(f"[dim]note: {esc(n)}[/]", soft_wrap=True)
