"""Total memory and decode speed against the context: the series, a terminal chart (Rich only),
an SVG written by hand (no dependency) and a PNG (matplotlib, the optional ``chart`` extra).

The series is built from two callables the API layer supplies (the core's total and decode
speed at a context), so every point is what ``mlxfit fit --ctx N`` would print for that N.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from mlxfit.errors import MlxfitError
from mlxfit.render.text import controls, esc
from mlxfit.verbs.chart import ChartData, ChartPoint
from mlxfit.writefile import write_file

# --------------------------------------------------------------------------- shared geometry


def _fmt_ctx(n: int) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    if n >= 1000:
        return f"{n / 1024:.0f}K"
    return str(n)


def _ticks(lo: int, hi: int) -> list[int]:
    """Powers of two inside [lo, hi], thinned to at most 8."""
    t = [2**e for e in range(40) if lo <= 2**e <= hi]
    while len(t) > 8:
        t = t[::2]
    return t


def ctx_ticks(lo: int, hi: int) -> list[tuple[int, str]]:
    """The context axis of every rendering (terminal, SVG, PNG): powers of two, labelled
    256, 1K, 4K, 16K, ..."""
    return [(t, _fmt_ctx(t)) for t in _ticks(lo, hi)]


def nice_ticks(vmax: float, n: int = 5) -> tuple[float, list[float]]:
    """A y axis from 0 to a round top above vmax, in at most about n steps of 1, 2, 2.5 or 5
    x 10^k: (top, ticks). The same for every rendering."""
    if not vmax > 0:
        return 1.0, [0.0, 1.0]
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    k = math.ceil(vmax / step - 1e-9)
    return step * k, [step * i for i in range(k + 1)]


def tick_label(v: float) -> str:
    return f"{v:g}" if v == round(v, 1) else f"{v:.2f}"


def axes_of(d: ChartData) -> tuple[tuple[float, list[float]], tuple[float, list[float]]]:
    """(memory GB top, ticks), (tok/s top, ticks): the y axes the three renderings share."""
    mem = max(max(p.total_bytes for p in d.points), d.usable_bytes) / 1e9
    tps = max([p.decode_tps for p in d.points if p.decode_tps is not None] or [1.0])
    return nice_ticks(mem * 1.05), nice_ticks(tps * 1.05)


def _at(d: ChartData, ctx: float) -> ChartPoint:
    """The series point at or just below ctx (the series is a step between points)."""
    best = d.points[0]
    for p in d.points:
        if p.ctx <= ctx:
            best = p
        else:
            break
    return best


# --------------------------------------------------------------------------- terminal


def render_terminal(d: ChartData, console: Any, width: int | None = None) -> None:
    """Two panels over a shared log-scale context axis: total memory (GB) with the usable line,
    and decode tok/s; kinks marked with letters, the context asked for with ▲."""
    from rich.text import Text  # rich is heavy: only a terminal chart pays for it

    w = width or max(40, min(100, (console.width or 80) - 12))
    lo, hi = d.lo, d.hi
    la, lb = math.log(lo), math.log(max(hi, lo + 1))

    def col(n: int) -> int:
        return round((math.log(max(n, lo)) - la) / (lb - la) * (w - 1))

    cols = [_at(d, math.exp(la + (lb - la) * c / (w - 1))) for c in range(w)]
    kink_cols = {col(k.ctx): chr(ord("a") + i) for i, k in enumerate(d.kinks[:26])}
    req_col = col(d.requested_ctx)
    safe_col = col(d.max_safe_context) if d.max_safe_context >= lo else None

    def panel(rows: int, values: list[float | None], ymax: float, unit: str,
              hline: float | None, ok: list[bool], yticks: list[float]) -> list[Text]:
        grid = [[(" ", "")] * w for _ in range(rows)]
        for c in kink_cols:
            for r in range(rows):
                grid[r][c] = ("┆", "dim")
        if safe_col is not None:
            for r in range(rows):
                grid[r][safe_col] = ("┊", "green")
        hr = -1
        if hline is not None:
            hr = rows - 1 - min(rows - 1, round(hline / ymax * (rows - 1)))
            for c in range(w):
                grid[hr][c] = ("─", "yellow")
        for c, v in enumerate(values):
            if v is None:
                continue
            r = rows - 1 - min(rows - 1, round(v / ymax * (rows - 1)))
            grid[r][c] = ("●", "cyan") if ok[c] else ("×", "red")
        # Each tick is labelled on the row it falls on, so a value can be read off the axis.
        labels = {rows - 1 - round(v / ymax * (rows - 1)): tick_label(v) for v in yticks}
        lines = [Text(" " * 9 + unit, style="bold")]
        for r in range(rows):
            label = f"{labels[r]:>7} " if r in labels else " " * 8
            t = Text(label + "│", style="dim")
            for ch, st in grid[r]:
                t.append(ch, style=st)
            if hline is not None and r == hr:
                t.append(f" usable {hline:,.2f}", style="yellow")
            lines.append(t)
        return lines

    (ymax_mem, mem_ticks), (ymax_tps, tps_ticks) = axes_of(d)
    totals = [p.total_bytes / 1e9 for p in cols]
    ok = [p.fits for p in cols]
    tps = [p.decode_tps for p in cols]

    console.print(Text(controls(d.title), style="bold"))
    for line in panel(12, totals, ymax_mem, "GB total (peak)", d.usable_bytes / 1e9, ok,
                      mem_ticks):
        console.print(line, soft_wrap=True)
    for line in panel(7, tps, ymax_tps, "decode tok/s", None, ok, tps_ticks):
        console.print(line, soft_wrap=True)
    ttft = [p.ttft_s for p in cols]
    if any(v is not None for v in ttft):
        ymax_ttft, ttft_ticks = nice_ticks(max(v for v in ttft if v is not None) * 1.05)
        for line in panel(7, ttft, ymax_ttft, "TTFT s", None, ok, ttft_ticks):
            console.print(line, soft_wrap=True)
    axis = Text(" " * 8 + "└" + "─" * w, style="dim")
    console.print(axis, soft_wrap=True)
    ticks = [" "] * (w + 10)
    for t, s in ctx_ticks(lo, hi):
        c = 9 + col(t)
        for i, ch in enumerate(s):
            if c + i < len(ticks):
                ticks[c + i] = ch
    console.print(Text("".join(ticks).rstrip() + "  tokens (log)", style="dim"), soft_wrap=True)
    marks = [" "] * (w + 9)
    for c, letter in kink_cols.items():
        marks[9 + c] = letter
    marks[9 + req_col] = "▲"
    console.print(Text("".join(marks).rstrip(), style="bold"), soft_wrap=True)
    legend = [f"▲ context asked for: {d.requested_ctx:,}",
              f"┊ largest safe context: {d.max_safe_context:,}",
              f"─ usable: {d.usable_bytes / 1e9:,.2f} GB", "× over usable (swaps)"]
    console.print("  ".join(legend), style="dim", soft_wrap=True)
    for i, k in enumerate(d.kinks[:26]):
        console.print(f"  {chr(ord('a') + i)}: {k.ctx:,} tokens: {esc(k.label)}", style="dim",
                      soft_wrap=True)


# --------------------------------------------------------------------------- files


def write_chart(d: ChartData, path: str | Path) -> Path:
    """Write ``.svg`` (no dependency) or ``.png`` (needs matplotlib)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise MlxfitError(f"--chart {controls(path)}: the file must end in .png or .svg")
    try:
        write_file(p, svg(d) if suffix == ".svg" else png_bytes(d))
    except OSError as e:  # a missing folder, a directory of that name, no permission, full disk
        raise MlxfitError(f"--chart {controls(path)}: cannot write it: "
                          f"{controls(e.strerror or e)}", file=str(p)) from None
    return p


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg(d: ChartData, width: int = 760, height: int = 560) -> str:
    """Two stacked panels (memory; decode tok/s with time to first token on a right-hand axis)
    over a log-scale context axis, as SVG text."""
    left, right, top = 70, 60, 40
    gap, bottom = 40, 90
    ph = (height - top - gap - bottom) // 2
    pw = width - left - right
    la, lb = math.log(d.lo), math.log(max(d.hi, d.lo + 1))

    def x(n: float) -> float:
        return left + (math.log(max(n, d.lo)) - la) / (lb - la) * pw

    (mem_max, mem_ticks), (tps_max, tps_ticks) = axes_of(d)
    y0_mem, y0_tps = top + ph, top + ph + gap + ph

    def ym(v: float) -> float:
        return y0_mem - v / mem_max * ph

    def yt(v: float) -> float:
        return y0_tps - v / tps_max * ph

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">'),
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="20" font-size="13" font-weight="bold">{_esc(d.title)}</text>']
    for y0, label in ((y0_mem, "GB total (peak)"), (y0_tps, "decode tok/s")):
        out.append(f'<rect x="{left}" y="{y0 - ph}" width="{pw}" height="{ph}" fill="none" '
                   'stroke="#999"/>')
        out.append(f'<text x="12" y="{y0 - ph / 2:.1f}" transform="rotate(-90 12 '
                   f'{y0 - ph / 2:.1f})" text-anchor="middle">{label}</text>')
    for v in mem_ticks:
        out.append(f'<text x="{left - 6}" y="{ym(v) + 4:.1f}" text-anchor="end">'
                   f'{tick_label(v)}</text>')
    for v in tps_ticks:
        out.append(f'<text x="{left - 6}" y="{yt(v) + 4:.1f}" text-anchor="end">'
                   f'{tick_label(v)}</text>')
    for t, s in ctx_ticks(d.lo, d.hi):
        out.append(f'<line x1="{x(t):.1f}" y1="{y0_tps}" x2="{x(t):.1f}" y2="{y0_tps + 4}" '
                   'stroke="#666"/>')
        out.append(f'<text x="{x(t):.1f}" y="{y0_tps + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{y0_tps + 32}" text-anchor="middle">'
               'context tokens (log scale)</text>')
    for i, k in enumerate(d.kinks):
        xx = x(k.ctx)
        out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{y0_tps}" stroke="#aaa" '
                   'stroke-dasharray="3,3"/>')
        out.append(f'<text x="{xx + 3:.1f}" y="{top + 12 + 12 * (i % 3)}" fill="#666">'
                   f'{_esc(k.label)}</text>')
    xr = x(d.requested_ctx)
    out.append(f'<line x1="{xr:.1f}" y1="{top}" x2="{xr:.1f}" y2="{y0_tps}" stroke="#444"/>')
    out.append(f'<text x="{xr:.1f}" y="{y0_tps + 48}" text-anchor="middle">--ctx '
               f'{d.requested_ctx:,}</text>')
    yu = ym(d.usable_bytes / 1e9)
    out.append(f'<line x1="{left}" y1="{yu:.1f}" x2="{left + pw}" y2="{yu:.1f}" '
               'stroke="#e69500" stroke-dasharray="6,4"/>')
    # At the left, where the memory curve is lowest (it grows with the context): not over it.
    out.append(f'<text x="{left + 4}" y="{yu - 4:.1f}" fill="#e69500">'
               f'usable {d.usable_bytes / 1e9:,.2f} GB</text>')
    mem = " ".join(f"{x(p.ctx):.1f},{ym(p.total_bytes / 1e9):.1f}" for p in d.points)
    out.append(f'<polyline points="{mem}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for seg in _runs(d.points):
        pts = " ".join(f"{x(p.ctx):.1f},{yt(p.decode_tps or 0):.1f}" for p in seg)
        out.append(f'<polyline points="{pts}" fill="none" stroke="#2ca02c" stroke-width="2"/>')
    ttft = [p for p in d.points if p.ttft_s is not None]
    if ttft:
        t_max = max(p.ttft_s or 0.0 for p in ttft) * 1.1 or 1.0
        pts = " ".join(f"{x(p.ctx):.1f},{y0_tps - (p.ttft_s or 0) / t_max * ph:.1f}"
                       for p in ttft)
        out.append(f'<polyline points="{pts}" fill="none" stroke="#d62728" stroke-width="1.5" '
                   'stroke-dasharray="5,3"/>')
        for frac in (0, 0.5, 1):
            out.append(f'<text x="{left + pw + 6}" y="{y0_tps - frac * ph + 4:.1f}" '
                       f'fill="#d62728">{t_max * frac:,.0f}</text>')
        out.append(f'<text x="{width - 8}" y="{y0_tps - ph / 2:.1f}" transform="rotate(90 '
                   f'{width - 8} {y0_tps - ph / 2:.1f})" text-anchor="middle" fill="#d62728">'
                   'time to first token, s</text>')
    if d.lo <= d.max_safe_context <= d.hi:
        xs = x(d.max_safe_context)
        out.append(f'<line x1="{xs:.1f}" y1="{top}" x2="{xs:.1f}" y2="{y0_tps}" '
                   'stroke="#2ca02c" stroke-dasharray="6,3"/>')
        anchor = "end" if xs > left + pw / 2 else "start"  # inside the frame
        out.append(f'<text x="{xs + (-4 if anchor == "end" else 4):.1f}" y="{y0_tps + 62}" '
                   f'text-anchor="{anchor}" fill="#2ca02c">'
                   f'largest safe {d.max_safe_context:,}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _runs(points: tuple[ChartPoint, ...]) -> list[list[ChartPoint]]:
    """Consecutive points that have a speed (the tok/s line breaks where memory runs out)."""
    segs: list[list[ChartPoint]] = []
    cur: list[ChartPoint] = []
    for p in points:
        if p.decode_tps is None:
            if cur:
                segs.append(cur)
            cur = []
        else:
            cur.append(p)
    if cur:
        segs.append(cur)
    return segs


def png_bytes(d: ChartData) -> bytes:
    try:
        import matplotlib  # optional (the chart extra) and heavy: only for a PNG

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # after use("Agg"): no display needed
    except ImportError:
        raise MlxfitError("--chart *.png needs matplotlib: pip install 'mlxfit[chart]' "
                          "(an .svg needs nothing)") from None
    fig, (a1, a2) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    xs = [p.ctx for p in d.points]
    a1.plot(xs, [p.total_bytes / 1e9 for p in d.points], color="#1f77b4", label="total (peak)")
    a1.axhline(d.usable_bytes / 1e9, color="#e69500", ls="--", label="usable")
    a1.set_ylabel("GB")
    for seg in _runs(d.points):
        a2.plot([p.ctx for p in seg], [p.decode_tps for p in seg], color="#2ca02c")
    a2.set_ylabel("decode tok/s")
    ttft = [p for p in d.points if p.ttft_s is not None]
    if ttft:
        a3 = a2.twinx()
        a3.plot([p.ctx for p in ttft], [p.ttft_s for p in ttft], color="#d62728", ls="--")
        a3.set_ylabel("time to first token, s", color="#d62728")
        a3.set_ylim(bottom=0)
    a2.set_xscale("log", base=2)
    a2.set_xlabel("context tokens (log scale)")
    ticks = ctx_ticks(d.lo, d.hi)  # the terminal's and the SVG's labels: 256, 1K, 4K, ...
    a2.set_xticks([t for t, _ in ticks], [s for _, s in ticks])
    a2.minorticks_off()
    (mem_top, mem_ticks), (tps_top, tps_ticks) = axes_of(d)
    a1.set_yticks(mem_ticks, [tick_label(v) for v in mem_ticks])
    a2.set_yticks(tps_ticks, [tick_label(v) for v in tps_ticks])
    for ax in (a1, a2):
        for k in d.kinks:
            ax.axvline(k.ctx, color="#aaa", ls=":")
        ax.axvline(d.requested_ctx, color="#444", lw=0.8)
        if d.lo <= d.max_safe_context <= d.hi:
            ax.axvline(d.max_safe_context, color="#2ca02c", ls="--", lw=0.8)
    a1.set_ylim(0, mem_top)
    a2.set_ylim(0, tps_top)
    for i, k in enumerate(d.kinks):
        a1.annotate(k.label, xy=(k.ctx, 0), xycoords=("data", "axes fraction"),
                    xytext=(3, 4 + 11 * (i % 3)), textcoords="offset points", fontsize=7,
                    color="#666")
    a2.annotate(f"--ctx {d.requested_ctx:,}", xy=(d.requested_ctx, 0),
                xycoords=("data", "axes fraction"), xytext=(3, 4), textcoords="offset points",
                fontsize=7)
    if d.lo <= d.max_safe_context <= d.hi:
        right = math.log(d.max_safe_context) > (math.log(d.lo) + math.log(max(d.hi, 2))) / 2
        a2.annotate(f"largest safe {d.max_safe_context:,}", xy=(d.max_safe_context, 0),
                    xycoords=("data", "axes fraction"), xytext=(-3 if right else 3, 16),
                    textcoords="offset points", fontsize=7, color="#2ca02c",
                    ha="right" if right else "left")  # inside the frame
    # Above the plot, not over the usable line or the curve.
    a1.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=8, frameon=False)
    fig.suptitle(d.title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()  # then written like every file mlxfit writes (writefile.write_file)
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()


