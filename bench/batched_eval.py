"""mlxfit's batched predictions against published `mlx_lm.benchmark -b N` runs
(bench/results/batched_published.jsonl; sources and quotes in each row, summary in
bench/results/batched_published.md).

mlx_lm.benchmark -b N > 1 runs ``batch_generate`` (BatchGenerator: prefill batch 8, decode
batch 32, no prompt cache): "peak_memory" is mx.get_peak_memory() / 1e9 of one trial, and
"generation_tps" is the generated tokens of all sequences over the decode time, i.e. the
aggregate rate. Prediction: the peak is ``mlxfit.fit(model, P + G, gen=G, parallel=N,
prompt_cache=0)`` (N = 1: a plain fit), the aggregate tok/s is N over
``estimate.batched.batched_step`` at the mean decode context P + G/2 (b = 1: the single
stream's G / (G - 1) steps, as metal_eval.py does). "scaling" compares the predicted
aggregate(N) / aggregate(1) with the measured one of the same source, which cancels an
mlx-lm version's single-stream speed.

Usage: PYTHONPATH=src python bench/batched_eval.py [--rows]
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import tempfile
from pathlib import Path

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.batched import batched_step
from mlxfit.estimate.solve import run_at
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.model.inputs import model_inputs
from mlxfit.model.tensors import DTYPE_BYTES
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.edges import compute_for

DATA = Path(__file__).resolve().parent / "results" / "batched_published.jsonl"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from metal_descriptors import _path as descriptor_path
from metal_descriptors import load_descriptor


def model_ref(name: str) -> str:
    """The catalog id, or (a model only bench/results/metal_descriptors has) a folder holding its
    config.json and one sparse safetensors file whose header lists every tensor: mlxfit reads
    only config and headers, so the prediction sees exactly the descriptor's tensors."""
    if not descriptor_path(name).exists():
        return name
    doc = load_descriptor(name)
    d = Path(tempfile.gettempdir()) / "mlxfit-batched-eval" / name.replace("/", "__")
    st = d / "model.safetensors"
    if not st.exists():
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(doc["config"]))
        header, off = {}, 0
        for n, dt, shape in doc["tensors"]:
            size = DTYPE_BYTES[dt]
            for x in shape:
                size *= x
            header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + size]}
            off += size
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        with open(st, "wb") as f:
            f.write(struct.pack("<Q", len(blob)) + blob)
            f.truncate(8 + len(blob) + off)  # sparse: no tensor data is written or read
    return str(d)


def predict(row: dict, cal) -> dict:
    p, g, n = row["prompt_tokens"], row["gen_tokens"], row["batch_size"]
    machine = f"{row['chip']} {row['ram_gb']}GB"
    model = model_ref(row["eval_model"])
    kw = {"parallel": n, "prompt_cache": 0} if n > 1 else {}
    r = mlxfit.fit(model, p + g, gen=g, machine=machine,
                   prefill_step_size=row.get("prefill_step_size") or 2048, **kw)
    inp = model_inputs(resolve_model(model))
    m = resolve_machine(machine)
    step = batched_step(inp.cfg, run_at(r.run, p + g // 2), inp.weights, m.bandwidth_gbs, cal,
                        m.name, n, compute=compute_for(m))
    tps = step.aggregate_tps * (g / (g - 1) if n == 1 else 1.0)
    return {"peak_gb": r.total_bytes / 1e9, "tps": tps, "bound": step.bound}


def pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    cal = load_calibration()
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    done = []
    for row in rows:
        if not row.get("eval_model"):
            print(f"skip {row['model']} b={row['batch_size']}: {row['notes']}")
            continue
        done.append((row, predict(row, cal)))
    single = {(r["source"], r["model"]): pr["tps"] / r["gen_tps"]
              for r, pr in done if r["batch_size"] == 1}
    peak_err, tps_err, scale_err = [], [], []
    for row, pr in done:
        pe, te = pct(pr["peak_gb"], row["peak_memory_gb"]), pct(pr["tps"], row["gen_tps"])
        peak_err.append(abs(pe))
        tps_err.append(abs(te))
        ratio = single.get((row["source"], row["model"]))
        se = None
        if row["batch_size"] > 1 and ratio:
            se = pct(pr["tps"] / ratio, row["gen_tps"])
            scale_err.append(abs(se))
        if args.rows or row["batch_size"] > 1:
            print(f"{row['model']} b={row['batch_size']} on {row['chip']} {row['ram_gb']}GB: "
                  f"peak {pr['peak_gb']:.2f} vs {row['peak_memory_gb']:.2f} GB ({pe:+.1f} %), "
                  f"aggregate {pr['tps']:.1f} vs {row['gen_tps']:.1f} tok/s ({te:+.1f} %, "
                  f"{pr['bound']}-bound)"
                  + (f", scaling vs b=1 {se:+.1f} %" if se is not None else ""))
    for name, errs in (("peak", peak_err), ("aggregate tok/s", tps_err),
                       ("aggregate scaling vs b=1", scale_err)):
        if errs:
            print(f"{name}: |error| median {statistics.median(errs):.1f} %, "
                  f"max {max(errs):.1f} % over {len(errs)} rows")


if __name__ == "__main__":
    main()
