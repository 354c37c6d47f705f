"""Honest bands (issue 27): the range each predicted figure really holds, and the verdict.

A band is where the real mlx-lm figure lies 9 times in 10 around mlxfit's prediction, made from
mlxfit's own out-of-sample errors on published runs (bench/fit_bands.py writes the table,
data/bands.toml; docs/accuracy.md says how). Pure: the table arrives parsed, as part of the
Calibration.

The verdict, one rule for every verb: "does_not_fit" when the run does not fit at the estimate,
"tight" when it fits at the estimate but not at the band's upper bound (the usable memory lies
inside the peak band), "fits" otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mlxfit.calibration.bands import DIMS, BandTable, Pair
from mlxfit.errors import MlxfitError
from mlxfit.model.caches import Rotating
from mlxfit.model.config import ModelConfig

# --------------------------------------------------------------------------- segments


def chip_class(machine_name: str) -> str:
    """Ultra, M5, Max, Pro, base (an Apple chip by its name), or other."""
    n = machine_name or ""
    if not n.startswith("M") or len(n) < 2 or not n[1].isdigit():
        return "other"
    if "Ultra" in n:
        return "Ultra"
    if n.startswith("M5"):
        return "M5"
    return "Max" if "Max" in n else ("Pro" if "Pro" in n else "base")


def family_kind(cfg: ModelConfig) -> str:
    """MLA, hybrid (linear attention or SSM layers), sliding (a rotating cache), MoE, dense."""
    if any(a.mla is not None for a in cfg.attention_layers):
        return "MLA"
    if cfg.linear_v_heads or cfg.ssm_heads:
        return "hybrid"
    if any(isinstance(a.cache, Rotating) for a in cfg.attention_layers):
        return "sliding"
    return "MoE" if cfg.is_moe else "dense"


def size_class(weights_bytes: int) -> str:
    gb = weights_bytes / 1e9
    return "<4GB" if gb < 4 else "4-16GB" if gb < 16 else "16-64GB" if gb < 64 else ">=64GB"


def ctx_class(tokens: int) -> str:
    return ("<1K" if tokens < 1024 else "1K-8K" if tokens < 8192
            else "8K-32K" if tokens < 32768 else ">=32K")


def segment(machine_name: str, cfg: ModelConfig, weights_bytes: int, ctx: int) -> dict[str, str]:
    return {"chip": chip_class(machine_name), "kind": family_kind(cfg),
            "size": size_class(weights_bytes), "ctx": ctx_class(ctx)}


# --------------------------------------------------------------------------- bands


def chip_band(table: BandTable, figure: str, chip: str) -> Pair:
    """The chip class's band (lo <= 0 <= hi): its runs' quantiles shrunk towards the pooled
    ones with weight n / (n + shrink_n); the pooled band for a chip class without runs."""
    f = table.get(figure)
    if f is None:
        raise MlxfitError(f"band table has no {figure!r} bands")
    plo, phi = f.pooled
    entry = f.segments["chip"].get(chip)
    if entry is None:
        return min(plo, 0.0), max(phi, 0.0)
    lo, hi, n = entry
    w = n / (n + table.shrink_n)
    return min(w * lo + (1 - w) * plo, 0.0), max(w * hi + (1 - w) * phi, 0.0)


def band_of(table: BandTable, figure: str, seg: Mapping[str, Any],
            family_known: bool) -> Pair:
    """(lo, hi) bounds of measured/predicted - 1 for one figure of a run in segment ``seg``.

    The chip class's band (``chip_band``), widened per side by the largest factor of the
    run's other segments (family kind, weights size, context band: how far, in units of the
    chip band, their runs' errors reach; shrunk towards 1 like the chip's), times the table's
    one scale per side. A family kind without runs takes the leave-one-kind-out factor, an
    unverified family wider still. Always lo <= 0 <= hi: the prediction lies in its band."""
    f = table.get(figure)
    if f is None:
        raise MlxfitError(f"band table has no {figure!r} bands")
    lo, hi = chip_band(table, figure, str(seg.get("chip")))
    flo = fhi = 1.0
    for dim in DIMS[1:]:
        entry = f.segments[dim].get(str(seg.get(dim)))
        if entry is None:
            if dim == "kind":
                flo, fhi = max(flo, f.unseen_kind[0]), max(fhi, f.unseen_kind[1])
            continue
        a, b, n = entry
        w = n / (n + table.shrink_n)
        flo, fhi = max(flo, w * a + (1 - w)), max(fhi, w * b + (1 - w))
    lo, hi = lo * flo * f.scale[0], hi * fhi * f.scale[1]
    if not family_known:
        lo, hi = lo * table.unverified_widen, hi * table.unverified_widen
    return max(lo, -0.99), hi


def scaled(x: float, band: Pair) -> Pair:
    return x * (1 + band[0]), x * (1 + band[1])


@dataclass(frozen=True)
class Bands:
    """The band of each predicted figure of one run (None: the figure is not predicted)."""

    total_bytes: tuple[int, int]
    max_safe_context: tuple[int, int]
    predicted_decode_tps: Pair | None = None
    predicted_prefill_tps: Pair | None = None
    predicted_ttft_s: Pair | None = None

    @property
    def peak_hi(self) -> int:
        return self.total_bytes[1]


def peak_figure(table: BandTable, backend: str) -> str:
    """The table's peak figure for a backend: MLX's CPU backend has its own residuals
    (the CPU campaigns); every other run is sized as Metal."""
    return "peak_cpu" if backend == "cpu" and table.get("peak_cpu") is not None else "peak"


def peak_band_at(table: BandTable, machine_name: str, cfg: ModelConfig, weights_bytes: int,
                 family_known: bool, backend: str = "metal") -> Callable[[int], Pair]:
    """The peak band at context n (its context band moves with n): for the solver."""
    base = segment(machine_name, cfg, weights_bytes, 0)
    if backend == "cpu":
        base["chip"] = "cpu"
    figure = peak_figure(table, backend)

    def at(n: int) -> Pair:
        return band_of(table, figure, {**base, "ctx": ctx_class(n)}, family_known)

    return at


def run_bands(table: BandTable, machine_name: str, cfg: ModelConfig, weights_bytes: int,
              ctx: int, family_known: bool, total: int, safe_context: tuple[int, int],
              decode_tps: float | None, prefill_tps: float | None,
              ttft_s: float | None, backend: str = "metal") -> Bands:
    """The bands of one run's figures. ``safe_context``: (largest context whose upper peak
    bound fits, largest whose lower bound fits), from the solver."""
    seg = segment(machine_name, cfg, weights_bytes, ctx)
    plo, phi = scaled(total, peak_band_at(table, machine_name, cfg, weights_bytes,
                                          family_known, backend)(ctx))
    dec = (scaled(decode_tps, band_of(table, "decode", seg, family_known))
           if decode_tps is not None and table.get("decode") else None)
    pre = None
    ttft = None
    if prefill_tps is not None and table.get("prefill"):
        pre = scaled(prefill_tps, band_of(table, "prefill", seg, family_known))
        if ttft_s is not None:
            # the prompt's time is its length over the prompt speed: the band turns over
            ttft = (ttft_s * prefill_tps / pre[1], ttft_s * prefill_tps / pre[0])
    return Bands(total_bytes=(int(plo), round(phi)), max_safe_context=safe_context,
                 predicted_decode_tps=dec, predicted_prefill_tps=pre, predicted_ttft_s=ttft)


def widest(pairs: list[Pair]) -> Pair:
    """The band that holds every one of ``pairs`` (a plan over several Macs: its hosts')."""
    return min(p[0] for p in pairs), max(p[1] for p in pairs)


def plan_bands(table: BandTable, machine_names: list[str], cfg: ModelConfig, weights_bytes: int,
               ctx: int, host_totals: list[int], safe_context: tuple[int, int],
               decode_tps: float | None, prefill_tps: float | None,
               ttft_s: float | None, backend: str = "metal") -> Bands:
    """The bands of a plan over several hosts (cluster): the peak band of each host's total
    (summed: the plan's total), and for the speeds the widest of its hosts' bands."""
    segs = [segment(name, cfg, weights_bytes, ctx) for name in machine_names]
    known = cfg.family_known
    peaks = [scaled(t, peak_band_at(table, name, cfg, weights_bytes, known, backend)(ctx))
             for t, name in zip(host_totals, machine_names)]

    def speed(figure: str, x: float | None) -> Pair | None:
        if x is None or table.get(figure) is None or not segs:
            return None
        return scaled(x, widest([band_of(table, figure, sg, known) for sg in segs]))

    pre = speed("prefill", prefill_tps)
    ttft = (ttft_s * prefill_tps / pre[1], ttft_s * prefill_tps / pre[0]) \
        if pre is not None and ttft_s is not None and prefill_tps is not None else None
    return Bands(total_bytes=(int(sum(p[0] for p in peaks)), round(sum(p[1] for p in peaks))),
                 max_safe_context=safe_context, predicted_decode_tps=speed("decode", decode_tps),
                 predicted_prefill_tps=pre, predicted_ttft_s=ttft)


# --------------------------------------------------------------------------- the verdict

VERDICTS = ("fits", "tight", "does_not_fit")


def verdict(runs: bool, peak_hi: int | None, usable_bytes: int) -> str:
    """The one verdict rule of every verb: "does_not_fit" when the run does not fit (or run) at
    the estimate, "tight" when it does but the peak band's upper bound is over the usable
    memory, "fits" otherwise (no band: the estimate decides alone)."""
    if not runs:
        return "does_not_fit"
    if peak_hi is not None and peak_hi > usable_bytes:
        return "tight"
    return "fits"
