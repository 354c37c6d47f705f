"""FitResult -> JSON object or Rich report. No arithmetic beyond unit conversion."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlxfit.estimate.batched import BatchedStep
from mlxfit.estimate.serving_summary import ServingSummary
from mlxfit.estimate.solve import SHORT_CONTEXT, FitResult
from mlxfit.hardware.resolve import Machine, bare_machine
from mlxfit.model.caches import grows_in_steps
from mlxfit.model.inputs import WeightsDetail
from mlxfit.model.quantize import ConversionPlan
from mlxfit.render import (
    SCHEMA_VERSION,
    VERDICT_TEXT,
    bands_to_json,
    conversion_to_json,
    gb_range,
    machine_to_json,
    run_to_json,
    seconds_to_json,
    term_to_json,
    time_term_to_json,
    tps_to_json,
)
from mlxfit.render.figures import duration, tokens_short
from mlxfit.render.text import esc
from mlxfit.shown import clip

# The key of the "!" a table puts after "yes" where FitResult.watchdog is set (matrix, pick).
WATCHDOG_KEY = ("prefill may trip macOS's GPU watchdog on a Mac with a display: a lower "
                "--prefill-step-size avoids it (mlxfit fit --machine <Mac> says which)")

if TYPE_CHECKING:  # advice and the chart are on demand: a plain fit never imports them
    from mlxfit.verbs.advise import Advice
    from mlxfit.verbs.chart import ChartData


def gb(n: float) -> str:
    """GB = 10^9 bytes, as mlx-lm prints 'Peak memory'."""
    return f"{n / 1e9:,.2f} GB"


def fit_machine(r: FitResult) -> Machine:
    """The machine a result was sized for; a result made by the pure core alone (no Machine)
    gets one from its figures, with what it does not know as None."""
    if r.machine is not None:
        return r.machine
    return bare_machine(r.machine_name, r.ram_bytes, r.usable_bytes, r.usable_source,
                        r.bandwidth_gbs)


def fit_to_json(r: FitResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "model": r.model,
        "source": r.source_kind,
        "machine": machine_to_json(fit_machine(r)),
        "run": run_to_json(r.run),
        "context_tokens": r.context_tokens,
        "weights_bytes": r.weights_bytes,
        "kv_bytes": r.kv_bytes,
        "state_bytes": r.state_bytes,
        "transient_bytes": r.transient_bytes,
        "total_bytes": r.total_bytes,
        "usable_bytes": r.usable_bytes,
        "headroom_bytes": r.usable_bytes - r.total_bytes,
        "fits": r.fits,
        # additive (issue 27): "fits" | "tight" | "does_not_fit", and the band of each figure
        "verdict": r.verdict,
        "bands": bands_to_json(r.bands),
        # additive (issue 13): why it does not fit or run, and the context-limit verdict
        "problems": list(r.problems),
        "beyond_context_limit": r.beyond_context,
        "max_safe_context": r.max_safe_context,
        "context_limit": r.context_limit,
        "predicted_decode_tps": tps_to_json(r.predicted_decode_tps),
        "predicted_decode_tps_short": tps_to_json(r.predicted_decode_tps_short),
        "short_context": SHORT_CONTEXT,
        "predicted_prefill_tps": tps_to_json(r.predicted_prefill_tps),
        "predicted_ttft_s": seconds_to_json(r.predicted_ttft_s),
        "peak_phase": r.peak_phase,
        "terms": [term_to_json(t) for t in r.terms],
        "speed_terms": [term_to_json(t) for t in r.speed_terms],
        "weights": weights_to_json(r.weights_detail),
        # The conversion sized, when --q-bits/--q-mode/... are given (issue 17).
        "quantization_plan": conversion_to_json(_conversion(r)),
        "prefill_terms": [time_term_to_json(t) for t in r.prefill_terms],
        "decode_terms": [time_term_to_json(t) for t in r.decode_terms],
        "warnings": list(r.warnings),
        "notes": list(r.notes),
        "command": r.serving.command if r.serving is not None else None,
        "serving": serving_to_json(r.serving),
        # The serving terms (--parallel, --prompt-cache, --draft-model), also in "terms".
        "serving_terms": [term_to_json(t) for t in r.extra_terms],
        "max_buffer_bytes": r.max_buffer_bytes,
        "buffers": [{"name": b.name, "bytes": b.bytes, "what": b.what,
                     "over_limit": r.max_buffer_bytes is not None and b.bytes > r.max_buffer_bytes}
                    for b in r.buffers],
        "runs": r.runs,
        # Additive (issue 12): where the per-layer cache plan came from.
        "family_known": r.family_known,
        "plan_source": r.plan_source,
        "advice": _advice_json(r.advice),
        "chart": _chart_json(r.chart),
    }


def _conversion(r: FitResult) -> ConversionPlan | None:
    return r.weights_detail.conversion if r.weights_detail is not None else None


def weights_to_json(d: WeightsDetail | None) -> dict[str, Any]:
    """The "weights" object: the breakdown from the headers, "conversion" (the plan, as
    "quantization_plan") only when a conversion is sized; {} for a result of the pure core."""
    if d is None:
        return {}
    q = d.quantization
    doc: dict[str, Any] = {
        "total_bytes": d.total_bytes,
        "by_dtype": dict(d.by_dtype),
        "expert_bytes": d.expert_bytes,
        "vision_bytes": d.vision_bytes,
        "vision_counted": d.vision_counted,
        "embedding_bytes": d.embedding_bytes,
        "lm_head_bytes": d.lm_head_bytes,
        "tied_embeddings": d.tied_embeddings,
        "param_count": d.param_count,
        "n_tensors": d.n_tensors,
        "quantization": None if q is None else {
            "mode": q.mode, "bits": q.bits, "group_size": q.group_size,
            "overrides": q.overrides, "bits_per_weight": q.bits_per_weight,
        },
        "download_bytes": d.download_bytes,
        "download_at_least": d.download_at_least,
    }
    if d.conversion is not None:
        doc["conversion"] = conversion_to_json(d.conversion)
    return doc


def serving_to_json(sv: ServingSummary | None) -> dict[str, Any] | None:
    """The "serving" object: the set-up (mlx_lm.server or a speculative generate) and the
    batched decode estimate; None for a plain generate run. The command is "command"."""
    if sv is None:
        return None
    doc: dict[str, Any] = {}
    if sv.mode is not None:
        doc.update({
            "mode": sv.mode,
            "parallel": sv.parallel,
            "prefill_batch": sv.prefill_batch,
            "prompt_cache": sv.prompt_cache,
            "prompt_cache_default": sv.prompt_cache_default,
            "batched": sv.batched,
            "draft_model": sv.draft_model,
            "num_draft_tokens": sv.num_draft_tokens,
            "prefill_step_size": sv.prefill_step_size,
        })
    if sv.batched_decode is not None:
        doc["batched_decode"] = batched_step_to_json(sv.batched_decode)
    return doc or None


def _advice_json(a: Any) -> dict[str, Any] | None:
    if a is None:
        return None

    return advice_to_json(a)


def _chart_json(c: Any) -> dict[str, Any] | None:
    if c is None:
        return None

    return chart_to_json(c)


def _kv_growth(r: FitResult) -> str:
    """How the run's caches grow, from the KV term's layer kinds: KVCache-like caches in
    256-token steps, deepseek_v41's LayerCache at exact size."""
    kinds = next((t.inputs.get("layers_by_cache", {}) for t in r.terms if t.name == "kv_cache"),
                 {})
    stepped = any(grows_in_steps(k) for k in kinds)
    if kinds and not stepped:
        return "exact-size window caches (no 256-token steps)"
    if not all(grows_in_steps(k) for k in kinds):
        return "mlx-lm's 256-token steps; window caches at exact size"
    return "mlx-lm's 256-token steps"


def _weights_note(d: WeightsDetail | None) -> str:
    parts = ["exact from headers"]
    if d is None:
        return parts[0]
    q = d.quantization
    if q:
        bpw = f", {q.bits_per_weight:.2f} bits/weight" if q.bits_per_weight else ""
        parts.append(f"{q.mode} {q.bits}-bit g{q.group_size}{bpw}")
    elif d.by_dtype:
        parts.append("/".join(k.lower() for k in d.by_dtype))
    if d.expert_bytes:
        parts.append(f"experts {gb(d.expert_bytes)}")
    n = d.param_count
    if n:
        parts.append(f"{n / 1e9:.2f}B params" if n >= 1e8 else f"{n / 1e6:.1f}M params")
    if d.download_bytes is not None:
        parts.append(f"download {'at least ' if d.download_at_least else ''}{gb(d.download_bytes)}")
    return "; ".join(parts)


def _cells(markup: str) -> int:
    """Terminal cells a one-line markup string takes."""
    from rich.text import Text  # rich is heavy: only a text report needs it

    return Text.from_markup(markup).cell_len


def render_fit(r: FitResult, console: Any, explain: bool = False) -> None:
    from rich.table import Table  # rich is heavy: only a text report needs a table

    color = {"fits": "green", "tight": "yellow"}.get(r.verdict, "red")
    verdict = f"[bold {color}]{VERDICT_TEXT[r.verdict] if r.fits else VERDICT_TEXT['does_not_fit']}[/]"
    if r.beyond_context and r.total_bytes <= r.usable_bytes:  # memory is not why: say so
        verdict = (f"[bold yellow]FITS IN MEMORY[/] ({gb(r.total_bytes)} of "
                   f"{gb(r.usable_bytes)}), but {r.context_tokens:,} tokens is past the model's "
                   f"trained context of {r.context_limit:,}")
    elif r.beyond_context:
        verdict += (f" (and --ctx {r.context_tokens:,} is past the model's trained context of "
                    f"{r.context_limit:,} tokens)")
    if r.fits and r.oversize_buffers:
        verdict = "[bold red]FITS IN MEMORY, BUT AN ARRAY EXCEEDS THE GPU'S LARGEST BUFFER[/]"
    unverified = "" if r.family_known else " [bold yellow](UNVERIFIED: unknown family)[/]"
    what = f"[bold]{esc(r.model)}[/] on [bold]{esc(r.machine_name)}[/] at {r.context_tokens:,} tokens"
    head = f"{what}: {verdict}{unverified}"
    if console.is_terminal and _cells(head) > console.width:
        # Too wide for the terminal: the verdict first, whole, so a wrap never splits it.
        head = f"{verdict}{unverified}: {what}"
    console.print(head)
    render_conversion(_conversion(r), console)
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("term")
    t.add_column("GB (10^9 B)", justify="right")
    t.add_column("what it is")
    t.add_row("weights", gb(r.weights_bytes), esc(_weights_note(r.weights_detail)))
    t.add_row("KV cache", gb(r.kv_bytes), f"at {r.context_tokens:,} tokens, {_kv_growth(r)}")
    if r.state_bytes:
        t.add_row("recurrent state", gb(r.state_bytes), "linear-attention / SSM / conv layers")
    t.add_row("transient", gb(r.transient_bytes), f"peak: {esc(r.peak_phase)}")
    for term in r.extra_terms:
        t.add_row(esc(term.name.replace("_", " ")), gb(term.bytes),
                  esc(_EXTRA_WHAT.get(term.name, "")))
    band = r.bands.total_bytes if r.bands else None
    t.add_row("[bold]total (peak)[/]", f"[bold]{gb(r.total_bytes)}[/]",
              f"9 in 10 real peaks: {gb_range(band)}" if band else "")
    t.add_row("usable", gb(r.usable_bytes), esc(r.usable_source))
    t.add_row("headroom", gb(r.usable_bytes - r.total_bytes), "")
    console.print(t)
    b = r.bands
    upto = (f" (at the peak band's upper bound; {b.max_safe_context[1]:,} at its lower)"
            if b and b.max_safe_context[1] != b.max_safe_context[0] else "")
    source = f": {esc(r.context_source)}" if r.context_source else ""
    console.print(f"largest safe context: [bold]{r.max_safe_context:,}[/] tokens{upto} "
                  f"(model limit {r.context_limit:,}{source})")
    if r.predicted_decode_tps is not None:
        rng = (f" ({b.predicted_decode_tps[0]:,.1f}-{b.predicted_decode_tps[1]:,.1f})"
               if b and b.predicted_decode_tps else "")
        short = (f" ({r.predicted_decode_tps_short:,.1f} tok/s at {tokens_short(SHORT_CONTEXT)})"
                 if r.predicted_decode_tps_short is not None else "")
        console.print(f"predicted decode: [bold]{r.predicted_decode_tps:,.1f} tok/s[/]{rng} with "
                      f"{tokens_short(r.context_tokens)} in context{short}, at "
                      f"{r.bandwidth_gbs:g} GB/s")
    if r.predicted_ttft_s is not None and r.predicted_prefill_tps is not None:
        pre = (f" ({b.predicted_prefill_tps[0]:,.0f}-{b.predicted_prefill_tps[1]:,.0f})"
               if b and b.predicted_prefill_tps else "")
        console.print(f"predicted prompt: [bold]{r.predicted_prefill_tps:,.0f} tok/s[/]{pre}, "
                      f"time to first token [bold]{duration(r.predicted_ttft_s, b and b.predicted_ttft_s)}[/] "
                      f"for "
                      f"{r.run.schedule().prompt:,} prompt tokens (prefill step "
                      f"{r.run.prefill_step_size})")
    _render_serving(r, console)
    if explain:
        console.print("\n[bold]terms[/] (bytes; formula; inputs)")
        for term in r.terms + r.speed_terms:
            console.print(f"  [bold]{esc(term.name)}[/] = {term.bytes:,} B ({gb(term.bytes)})")
            console.print(f"    {esc(term.formula)}", soft_wrap=True)
            if term.inputs:
                inputs = ", ".join(f"{k}={v}" for k, v in term.inputs.items())
                console.print(f"    [dim]{esc(inputs)}[/]", soft_wrap=True)
        if r.decode_terms:
            console.print("\n[bold]decode time per token[/] (seconds; formula; inputs)")
        for tt in r.decode_terms:
            _print_time_term(tt, console, "{:,.6f}")
        if r.prefill_terms:
            console.print("\n[bold]time to first token[/] (seconds; formula; inputs)")
        for tt in r.prefill_terms:
            _print_time_term(tt, console, "{:,.3f}")
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {esc(w)}")
    for n in r.notes:
        console.print(f"[dim]note: {esc(clip(n))}[/]")
    if r.advice is not None:
        render_advice(r.advice, console)


def _print_time_term(tt: Any, console: Any, fmt: str) -> None:
    """One time term (estimate.speed.TimeTerm) of --explain: seconds, formula, inputs."""
    console.print(f"  [bold]{esc(tt.name)}[/] = {fmt.format(tt.seconds)} s")
    console.print(f"    {esc(tt.formula)}", soft_wrap=True)
    if tt.inputs:
        inputs = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in tt.inputs.items())
        console.print(f"    [dim]{esc(inputs)}[/]", soft_wrap=True)


def render_conversion(plan: ConversionPlan | None, console: Any) -> None:
    """The lines saying which conversion is sized (verbs.convert_plan.ConversionPlan)."""
    if not plan:
        return
    console.print(f"as `{esc(plan.command)}` would write it:", soft_wrap=True)
    console.print(f"  converted weights {gb(plan.weight_bytes)}, "
                  f"{plan.bits_per_weight:.3f} bits per weight, disk "
                  f"{gb(plan.disk_bytes)} in {plan.shards} shard"
                  f"{'s' * (plan.shards != 1)}; {plan.quantized_modules} modules quantized, "
                  f"{plan.float_modules} left in float", soft_wrap=True)


_EXTRA_WHAT = {
    "parallel_kv": "the other sequences' KV caches (--parallel)",
    "batched_transient": "the batch's prefill/decode transient",
    "prompt_cache": "cached prompts' KV caches (mlx_lm.server)",
    "draft_weights": "the draft model's weights",
    "draft_kv_cache": "the draft model's KV cache",
    "draft_prefill": "the draft's own prefill peak, where higher",
}


def _render_serving(r: FitResult, console: Any) -> None:
    sv = r.serving
    if sv is None:
        return
    if sv.mode == "mlx_lm.server":
        how = "batched" if sv.batched else "one request at a time"
        cache = f"{sv.prompt_cache} cached prompts"
        if sv.prompt_cache_default:
            cache += " (mlx_lm.server's default --prompt-cache-size)"
        console.print(f"serving: mlx_lm.server, {sv.parallel} concurrent sequence(s) ({how}, "
                      f"{sv.prefill_batch} prefilled together), {cache}; each up to "
                      f"{r.context_tokens:,} tokens")
    if sv.draft_model:
        console.print(f"speculative decoding: draft {esc(sv.draft_model)}, "
                      f"{sv.num_draft_tokens} draft tokens per step")
    bd = sv.batched_decode
    if bd:
        console.print(f"batched decode ({bd.bound}-bound at {bd.sequences} sequences): "
                      f"{bd.per_sequence_tps:,.1f} tok/s per sequence, "
                      f"{bd.aggregate_tps:,.1f} tok/s in all")
    if sv.command:
        console.print(f"[dim]mlx-lm: {esc(sv.command)}[/]", soft_wrap=True)
        if sv.command.startswith("mlx_lm.generate"):
            console.print(f"[dim]  prompt.txt: the {r.run.ctx - r.run.gen:,}-token prompt this "
                          f"run was sized for; --max-tokens is your --gen "
                          f"({r.run.gen:,}, at least 1)[/]", soft_wrap=True)


def render_advice(a: Any, console: Any) -> None:
    """The advisor's options, cheapest first, each with its command line."""
    if not a.needed:
        console.print("\n[bold]advice:[/] fits as asked, nothing to change")
        return
    what = "what buys margin" if a.margin else "what would make it fit"
    console.print(f"\n[bold]{what}[/] ({esc(a.problem)}); cheapest first, "
                  "your --ctx is never changed silently:")
    for i, o in enumerate(a.options, 1):
        r = o.result
        bd = r.serving.batched_decode if r.serving is not None else None
        # A batch's option shows what each user gets and the batch's sum, not one stream's.
        speed = (f"{bd.per_sequence_tps:,.1f} tok/s per user, {bd.aggregate_tps:,.1f} in all"
                 if bd is not None
                 else f"{r.predicted_decode_tps:,.1f} tok/s" if r.predicted_decode_tps is not None
                 else "speed unknown")
        console.print(f" [bold]{i}. {esc(o.label)}[/]: total {gb(r.total_bytes)} of "
                      f"{gb(r.usable_bytes)}, largest safe context {r.max_safe_context:,}, "
                      f"{speed}", soft_wrap=True)
        for c in o.changes:
            console.print(f"    [dim]cost: {esc(c.cost)}[/]", soft_wrap=True)
        own = [c.mlxfit for c in o.changes if c.mlxfit]
        if own:
            console.print(f"    [dim]re-check with mlxfit: {esc(' '.join(own))}[/]", soft_wrap=True)
        if o.ttft_cost_s is not None:
            console.print(f"    [dim]cost: time to first token {o.ttft_cost_s:+,.1f} s "
                          f"(predicted {r.predicted_ttft_s or 0:,.1f} s)[/]", soft_wrap=True)
        for cmd in o.setup:
            console.print(f"    $ {esc(cmd)}", soft_wrap=True)
        console.print(f"    $ {esc(o.command)}", soft_wrap=True)
    if not a.options:
        console.print(" [red]nothing found[/]")
    for n in a.notes:
        console.print(f" [dim]note: {esc(clip(n))}[/]")
    for x in a.refused:
        console.print(f" [dim]not offered: {esc(x.reason)}[/]", soft_wrap=True)


def advice_to_json(a: Advice) -> dict[str, Any]:
    return {
        "needed": a.needed,
        "problem": a.problem,
        "margin": a.margin,
        "options": [
            {
                "changes": [{"kind": c.kind, "label": c.label, "cost": c.cost,
                             "mlxfit": c.mlxfit or None} for c in o.changes],
                "model": o.model,
                "setup": list(o.setup),
                "command": o.command,
                "total_bytes": o.result.total_bytes,
                "usable_bytes": o.result.usable_bytes,
                "max_safe_context": o.result.max_safe_context,
                "context_tokens": o.result.context_tokens,
                "predicted_decode_tps": tps_to_json(o.result.predicted_decode_tps),
                "predicted_ttft_s": seconds_to_json(o.result.predicted_ttft_s),
                "ttft_cost_s": seconds_to_json(o.ttft_cost_s),
            }
            for o in a.options
        ],
        "refused": [{"kind": r.kind, "reason": r.reason} for r in a.refused],
        "notes": list(a.notes),
    }


def chart_to_json(d: ChartData) -> dict[str, Any]:
    return {
        "title": d.title,
        "usable_bytes": d.usable_bytes,
        "requested_ctx": d.requested_ctx,
        "max_safe_context": d.max_safe_context,
        "kinks": [{"ctx": k.ctx, "label": k.label} for k in d.kinks],
        "points": [{"ctx": p.ctx, "total_bytes": p.total_bytes,
                    "decode_tps": round(p.decode_tps, 2) if p.decode_tps is not None else None,
                    "ttft_s": seconds_to_json(p.ttft_s), "fits": p.fits} for p in d.points],
    }


def batched_step_to_json(b: BatchedStep) -> dict[str, Any]:
    """One batched decode step (``serving.batched_decode``) as fit's JSON shows it."""
    return {"sequences": b.sequences, "step_seconds": b.step_seconds,
            "per_sequence_tps": b.per_sequence_tps, "aggregate_tps": b.aggregate_tps,
            "weights_seconds": b.weights_seconds, "kv_seconds": b.kv_seconds,
            "matmul_seconds": b.matmul_seconds,
            "attention_seconds": b.attention_seconds,
            "fixed_seconds": b.fixed_seconds, "batch_seconds": b.batch_seconds,
            "bound": b.bound,
            "weights_read_bytes": b.weights_read_bytes,
            "kv_read_bytes": b.kv_read_bytes}
