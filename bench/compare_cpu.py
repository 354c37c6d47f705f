"""Predicted vs measured on MLX's CPU backend, from bench/results/cpu_measurements.jsonl.

    python bench/compare_cpu.py [--file F] [--all]

For each measured run: KV/state bytes (must be exact), and the predicted peak
(measured weights + predicted caches + transient, backend cpu) against mx.get_peak_memory().
Prints per-family rows and the median / p90 / max relative error of the peak.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.memory import Run
from mlxfit.estimate.solve import totals_at
from mlxfit.model.parse import parse_config

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def predict(rec: dict, cal) -> tuple[int, int, int]:
    cfg = parse_config(rec["config"], act_bytes=DTYPE_BYTES[rec["dtype"]])
    run = Run(ctx=rec["ctx"], gen=rec.get("gen_tokens", 0) or 0,
              prefill_step_size=rec["prefill_step_size"], kv_bits=rec.get("kv_bits"),
              kv_group_size=rec.get("kv_group_size", 64),
              quantized_kv_start=rec.get("quantized_kv_start", 5000),
              max_kv_size=rec.get("max_kv_size"), backend="cpu")
    t = totals_at(cfg, rec["param_bytes"], run, cal)
    return t.kv + t.state, t.total, t.transient


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", default=str(Path(__file__).parent / "results" / "cpu_measurements.jsonl"))
    ap.add_argument("--all", action="store_true", help="print every row")
    args = ap.parse_args()
    cal = load_calibration()
    errs, kv_bad = [], 0
    with open(args.file) as fh:
        rows = [json.loads(line) for line in fh]
    print(f"{'run':58s} {'kv ok':>5s} {'meas GB':>8s} {'pred GB':>8s} {'err %':>6s}")
    for rec in rows:
        if rec.get("error"):
            continue  # mlx-lm itself failed on this run (kept in the file as a fact)
        try:
            kv, total, _ = predict(rec, cal)
        except Exception as e:  # noqa: BLE001 - a benchmark reports, it does not stop
            print(f"{rec['name'][:58]:58s} ERROR {e}")
            continue
        ok = kv == rec["cache_bytes_end"]
        kv_bad += not ok
        err = (total - rec["peak_bytes"]) / rec["peak_bytes"] * 100
        errs.append(abs(err))
        if args.all or not ok or abs(err) > 8:
            print(f"{rec['name'][:58]:58s} {'yes' if ok else 'NO':>5s} "
                  f"{rec['peak_bytes'] / 1e9:8.4f} {total / 1e9:8.4f} {err:+6.1f}"
                  + ("" if ok else f"  kv pred {kv} meas {rec['cache_bytes_end']}"))
    errs.sort()
    p90 = errs[int(0.9 * (len(errs) - 1))]
    print(f"\n{len(errs)} runs: KV exact in {len(errs) - kv_bad}; peak |error| median "
          f"{statistics.median(errs):.1f} %, p90 {p90:.1f} %, max {errs[-1]:.1f} %")


if __name__ == "__main__":
    main()
