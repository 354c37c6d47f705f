"""The chart's data: total memory and decode tok/s against the context on a log grid, and the
contexts where the cache plan kinks (window, prefill step). Rendering is in render/chart.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mlxfit.estimate.memory import Run, attn_groups
from mlxfit.model.config import ModelConfig

DEFAULT_POINTS = 64


MIN_CONTEXT = 256  # the chart starts here (or at the context asked for, when smaller)


@dataclass(frozen=True)
class ChartPoint:
    ctx: int
    total_bytes: int
    decode_tps: float | None  # None where the total is over the usable memory (it would swap)
    fits: bool
    ttft_s: float | None = None  # time to first token of this context's prompt (None: unknown)


@dataclass(frozen=True)
class Kink:
    ctx: int
    label: str


@dataclass(frozen=True)
class ChartData:
    title: str
    points: tuple[ChartPoint, ...]
    usable_bytes: int
    requested_ctx: int
    max_safe_context: int
    kinks: tuple[Kink, ...]

    @property
    def lo(self) -> int:
        return self.points[0].ctx

    @property
    def hi(self) -> int:
        return self.points[-1].ctx


def log_grid(lo: int, hi: int, n: int) -> list[int]:
    """n contexts spaced evenly in log between lo and hi (inclusive, distinct integers)."""
    if hi <= lo:
        return [lo]
    a, b = math.log(lo), math.log(hi)
    return sorted({round(math.exp(a + (b - a) * i / (n - 1))) for i in range(n)})


def build_chart(*, title: str, limit: int, requested_ctx: int, max_safe_context: int,
                usable_bytes: int, total_at: Callable[[int], int],
                tps_at: Callable[[int], float | None], kinks: list[Kink],
                n_points: int = DEFAULT_POINTS,
                ttft_at: Callable[[int], float | None] = lambda n: None) -> ChartData:
    """Evaluate the core on a log grid from min(256, ctx) to the model's context limit, plus
    each kink (and the token after it), the context asked for and the largest safe context."""
    lo = max(1, min([MIN_CONTEXT, requested_ctx] + [k.ctx // 2 for k in kinks]))
    hi = max(limit, requested_ctx)
    ctxs = set(log_grid(lo, hi, n_points))
    keep = [k for k in kinks if lo <= k.ctx <= hi]
    for k in keep:
        ctxs.update({k.ctx, min(k.ctx + 1, hi)})
    ctxs.add(requested_ctx)
    if lo <= max_safe_context <= hi:
        ctxs.update({max_safe_context, min(max_safe_context + 1, hi)})
    points = []
    for n in sorted(ctxs):
        total = total_at(n)
        fits = total <= usable_bytes
        points.append(ChartPoint(n, total, tps_at(n) if fits else None, fits,
                                 ttft_at(n) if fits else None))
    return ChartData(title=title, points=tuple(points), usable_bytes=usable_bytes,
                     requested_ctx=requested_ctx, max_safe_context=max_safe_context,
                     kinks=tuple(sorted(keep, key=lambda k: k.ctx)))


def kinks_for(cfg: ModelConfig, run: Run) -> list[Kink]:
    """Contexts where the curves bend: a sliding/chunked window fills (those layers stop
    growing), prefill starts chunking (ctx = step + 1), a --max-kv-size window fills, and KV
    quantization starts."""
    out: dict[int, str] = {}
    for a, n in attn_groups(cfg, run):
        window, what = a.cache.window, a.cache.fill_note
        if what and window:
            if run.max_kv_size and window == run.max_kv_size:
                what = "the --max-kv-size window is full"
            out.setdefault(window, f"{what}: {n} layers stop growing")
    # The prompt is ctx - gen tokens, its first prompt - 1 are prefilled in chunks.
    out.setdefault(run.prefill_step_size + 1 + run.gen,
                   f"prefill step {run.prefill_step_size}: longer prompts are chunked")
    if run.kv_bits is not None and run.quantized_kv_start > 0:
        out.setdefault(run.quantized_kv_start,
                       f"the KV cache is quantized to {run.kv_bits} bits from this")
    return [Kink(c, label) for c, label in sorted(out.items())]
