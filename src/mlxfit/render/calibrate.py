"""`mlxfit calibrate` as text and as JSON."""

from __future__ import annotations

from typing import Any

from mlxfit.render import SCHEMA_VERSION
from mlxfit.render.text import esc, runs
from mlxfit.settings import user_calibration
from mlxfit.verbs.calibrate.twin import CalibrationResult, ErrorStats


def result_to_json(r: CalibrationResult) -> dict[str, Any]:
    def stats(s: ErrorStats) -> dict[str, Any]:
        return {"n": s.n, "median": s.median, "p90": s.p90, "max": s.max}

    return {
        "schema_version": SCHEMA_VERSION,
        "source": r.source,
        "calibration": r.calibration,
        "backends": [
            {"backend": b.backend, "n_records": b.n_records, "n_runs": b.n_runs,
             "fitted": list(b.fitted),
             "unused": list(b.unused), "old": b.old, "new": b.new,
             "old_peak_error": stats(b.old_stats), "new_peak_error": stats(b.new_stats),
             "kv_mismatches": b.kv_mismatches, "refused": b.refused or None}
            for b in r.backends
        ],
        "decode": None if r.decode is None else {
            "n_records": r.decode.n_records, "fitted": list(r.decode.fitted),
            "old": r.decode.old, "new": r.decode.new,
            "old_tps_error": stats(r.decode.stats("old")),
            "new_tps_error": stats(r.decode.stats("new")),
        },
        "records": [
            {"name": x.name, "backend": x.backend, "measured_peak": x.measured,
             "old_peak": x.old, "new_peak": x.new, "old_error": x.old_error,
             "new_error": x.new_error, "kv_exact": x.kv_exact, "repeats": x.repeats}
            for x in r.rows
        ],
        "skipped": [{"record": a, "reason": b} for a, b in r.skipped],
        "written_to": r.written_to,
    }


SHOWN_ROWS = 15


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _v(x: float) -> str:
    return f"{x:.4g}"


def render_calibration(r: Any, out: Any, show_all: bool = False) -> None:
    from rich.table import Table  # rich is heavy: only a text report needs a table

    n = sum(b.n_runs for b in r.backends)
    skipped = f" ({len(r.skipped)} skipped)" if r.skipped else ""
    out.print(f"[bold]{runs(n, 'measured run')}[/] from {esc(r.source)}{skipped}; old constants: "
              f"{esc(r.calibration)}", soft_wrap=True)
    if any(b.n_runs != b.n_records for b in r.backends):
        out.print("[dim]identical runs count once, with their largest peak[/]")
    for b in r.backends:
        o, w = b.old_stats, b.new_stats
        out.print(f"\n[bold]backend {esc(b.backend)}[/]: {runs(b.n_records, 'distinct run')}, "
                  "|peak error| median "
                  f"{_pct(o.median)} -> [bold]{_pct(w.median)}[/], p90 {_pct(o.p90)} -> "
                  f"{_pct(w.p90)}, max {_pct(o.max)} -> {_pct(w.max)}", soft_wrap=True)
        if b.refused:
            out.print(f"[yellow]not fitted, constants kept:[/] {b.refused}", soft_wrap=True)
        if b.kv_mismatches:
            out.print(f"[yellow]{runs(b.kv_mismatches)} whose caches mlxfit does not predict to "
                      "the byte (their error is not only the transient's)[/]", soft_wrap=True)
        if b.fitted:
            t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
            t.add_column("constant", no_wrap=True)
            t.add_column("old", justify="right", no_wrap=True)
            t.add_column("new", justify="right", no_wrap=True)
            for k in b.fitted:
                t.add_row(esc(k), _v(b.old[k]), _v(b.new[k]))
            out.print(t)
        if b.unused:
            out.print(f"[dim]not exercised by these runs, kept: {esc(', '.join(b.unused))}[/]",
                      soft_wrap=True)
    d = r.decode
    if d is not None:
        if d.fitted:
            so, sn = d.stats("old"), d.stats("new")
            out.print(f"\n[bold]decode[/] ({runs(d.n_records, 'Metal tok/s run')}): "
                      + ", ".join(f"{k} {_v(d.old[k])} -> {_v(d.new[k])}" for k in d.fitted)
                      + f"; |tok/s error| median {_pct(so.median)} -> {_pct(sn.median)}",
                      soft_wrap=True)
        else:
            out.print(f"\ndecode: {runs(d.n_records, 'Metal tok/s run')}, no usable fit (kept)")
    else:
        out.print("\n[dim]decode: no Metal run with a measured tok/s and a known bandwidth: "
                  "eta and fixed_s kept[/]", soft_wrap=True)

    rows = sorted(r.rows, key=lambda x: -abs(x.new_error))
    shown = rows if show_all else rows[:SHOWN_ROWS]
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("old", justify="right", no_wrap=True)
    t.add_column("new", justify="right", no_wrap=True)
    t.add_column("meas. MB", justify="right", no_wrap=True)
    t.add_column("run" + ("" if show_all else f" (largest new error first, {len(shown)} of "
                          f"{len(rows)}; --all for every one)"), overflow="fold")
    for x in shown:
        kv = "" if x.kv_exact else " [yellow](KV not exact)[/]"
        rep = f" (max of {x.repeats})" if x.repeats > 1 else ""
        t.add_row(f"{100 * x.old_error:+.1f} %", f"{100 * x.new_error:+.1f} %",
                  f"{x.measured / 1e6:,.3f}", f"{esc(x.backend)} {esc(x.name)}{rep}{kv}")
    out.print()
    out.print(t)
    for name, why in r.skipped[:5]:
        out.print(f"[dim]skipped {esc(name)}: {esc(why)}[/]", soft_wrap=True)
    if len(r.skipped) > 5:
        out.print(f"[dim]... and {len(r.skipped) - 5} more skipped[/]")
    if r.written_to:
        out.print(f"\nwritten to [bold]{esc(r.written_to)}[/]: `mlxfit fit` and `mlxfit measure` now "
                  "use these constants (and say so in their notes)", soft_wrap=True)
    elif any(b.fitted for b in r.backends) or (r.decode is not None and r.decode.fitted):
        target = user_calibration()
        if target is not None:
            out.print(f"\n--write stores these constants in {esc(str(target))}", soft_wrap=True)
