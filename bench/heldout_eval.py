"""mlxfit as shipped against published mlx-lm runs from sources it was never fitted on.

`bench/results/metal_heldout.jsonl` holds runs from sources that no constant in
calibration.toml or band in data/bands.toml was fitted to (bench/results/README.md, "Held-out
sources"). This script predicts each with the shipped calibration (the same functions
`bench/metal_eval.py` uses: ``predict_peak``, ``predict_tps``, ``prefill_eval.check_current``)
and prints |pred/meas - 1| (median / p90 / max) per source, chip, family kind and prompt length,
the share of runs whose shipped band holds the measured figure, and the worst runs.

Usage:  PYTHONPATH=src python bench/heldout_eval.py [--md FILE] [--rows FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import metal_eval as ev
import numpy as np
import prefill_eval as pe

from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.bands import band_of, segment

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "bench" / "results" / "metal_heldout.jsonl"
FIGURES = (("peak", "peak GB"), ("decode", "decode tok/s"), ("prefill", "prompt tok/s"))


def _bucket(p: int) -> str:
    return "< 1K" if p < 1024 else "1K-8K" if p < 8192 else ">= 8K"


def cases(rows: list[dict]) -> list[tuple[dict, ev.Case]]:
    """(row, metal_eval Case) of every run mlxfit can predict, mapped as metal_eval maps its
    own rows (a row's ``chip`` is already a machine name here)."""
    for r in rows:
        ev.MACHINE.setdefault(r["chip"], r["chip"])
    out = []
    for i, r in enumerate(rows):
        c = ev.map_row(i, r)
        if isinstance(c, ev.Case):
            out.append((r, c))
    return out


def predictions(rows: list[dict]) -> list[dict]:
    """One record per run and figure: measured, shipped prediction, whether its band holds."""
    cal = ev.base_cal()
    bands = load_calibration().bands  # data/bands.toml as shipped
    out = []
    for r, c in cases(rows):
        model = ev.load_model(c.desc)
        base = {"run": c.idx, "source": r["heldout_source"], "model": c.desc,
                "machine": c.machine, "kind": ev.family_kind(c), "P": c.P, "G": c.G,
                "bucket": _bucket(c.P), "case": c}
        if c.peak is not None:
            out.append({**base, "figure": "peak", "meas": c.peak,
                        "pred": ev.predict_peak(c, cal)[0]})
        if c.tps is not None:
            out.append({**base, "figure": "decode", "meas": c.tps, "pred": ev.predict_tps(c, cal)})
        if r.get("prompt_tps"):
            p = pe.check_current(c, model, r, cal)
            if p is not None:
                out.append({**base, "figure": "prefill", "meas": float(r["prompt_tps"]),
                            "pred": p})
    for d in out:
        d["err"] = d["pred"] / d["meas"] - 1
        if bands is not None:
            m = ev.load_model(d["model"])
            seg = segment(d["machine"], m.cfg, m.w.total_bytes, d["P"] + d["G"])
            lo, hi = band_of(bands, d["figure"], seg, True)
            d["in_band"] = bool(lo <= d["meas"] / d["pred"] - 1 <= hi)  # bounds meas/pred - 1
    return out


def load_rows(path: Path = HELDOUT) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _stats(ds: list[dict]) -> str:
    if not ds:
        return "n=0"
    a = np.abs([d["err"] for d in ds])
    cov = [d["in_band"] for d in ds if "in_band" in d]
    band = f", band holds {100 * np.mean(cov):.0f} %" if cov else ""
    return (f"n={len(a)}: {100 * np.median(a):.1f} / {100 * np.quantile(a, 0.9):.1f} / "
            f"{100 * a.max():.0f} %{band}")


def report(recs: list[dict]) -> list[str]:
    lines = ["| figure | group | runs: median / p90 / max abs error, band coverage |",
             "|---|---|---|"]
    for fig, label in FIGURES:
        fr = [d for d in recs if d["figure"] == fig]
        lines.append(f"| **{label}** | all | {_stats(fr)} |")
        for key in ("source", "machine", "kind", "bucket"):
            for g in sorted({d[key] for d in fr}):
                lines.append(f"| {label} | {key} {g} | {_stats([d for d in fr if d[key] == g])} |")
    lines += ["", "Worst runs (shipped prediction / measured - 1):", ""]
    for fig, label in FIGURES:
        fr = sorted((d for d in recs if d["figure"] == fig), key=lambda d: -abs(d["err"]))[:6]
        for d in fr:
            lines.append(f"- {label}: {d['model'].split('/')[-1]} {d['machine']} p{d['P']} "
                         f"g{d['G']} ({d['kind']}, {d['source']}): measured {d['meas']:.4g}, "
                         f"predicted {d['pred']:.4g}, {100 * d['err']:+.0f} %")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", help="write the report here too")
    ap.add_argument("--rows", help="one JSON line per run and figure here")
    ap.add_argument("--data", default=str(HELDOUT),
                    help="the held-out runs (default bench/results/metal_heldout.jsonl)")
    a = ap.parse_args(argv)
    recs = predictions(load_rows(Path(a.data)))
    text = "\n".join(report(recs))
    print(text)
    if a.md:
        Path(a.md).write_text(text + "\n")
    if a.rows:
        with open(a.rows, "w") as f:
            f.writelines(json.dumps({k: (round(v, 5) if isinstance(v, float) else v)
                                    for k, v in d.items() if k != "case"}) + "\n" for d in recs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
