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

``--compute``: the [batched] compute_eff that the published single-stream prefill rates
imply (bench/results/metal_published.jsonl, prompts of 1024+ tokens, through metal_eval.py's
row mapping): achieved FLOP/s = prompt_tps x ``batched.flops_per_token`` at half the prompt,
over GPU cores x core GFLOPS. Prefill matmuls are the large-batch end of the same kernels.

Usage: PYTHONPATH=src python bench/batched_eval.py [--rows] [--compute]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.batched import batched_step
from mlxfit.estimate.solve import run_at
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.model.inputs import model_inputs
from mlxfit.sources.resolve import resolve_model

DATA = Path(__file__).resolve().parent / "results" / "batched_published.jsonl"


def predict(row: dict, cal) -> dict:
    p, g, n = row["prompt_tokens"], row["gen_tokens"], row["batch_size"]
    machine = f"{row['chip']} {row['ram_gb']}GB"
    model = row["eval_model"]
    kw = {"parallel": n, "prompt_cache": 0} if n > 1 else {}
    r = mlxfit.fit(model, p + g, gen=g, machine=machine,
                   prefill_step_size=row.get("prefill_step_size") or 2048, **kw)
    inp = model_inputs(resolve_model(model))
    m = resolve_machine(machine)
    step = batched_step(inp.cfg, run_at(r.run, p + g // 2), inp.weights, m.bandwidth_gbs, cal,
                        m.name, n, chip=m.chip, gpu_cores=m.gpu_cores)
    tps = step.aggregate_tps * (g / (g - 1) if n == 1 else 1.0)
    return {"peak_gb": r.total_bytes / 1e9, "tps": tps, "bound": step.bound}


def pct(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def implied_compute_eff(cal) -> None:
    import sys  # bench-only: reuse metal_eval's published-row mapping

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import metal_eval
    from metal_descriptors import load_descriptor

    from mlxfit.estimate.batched import flops_per_token
    from mlxfit.estimate.memory import Run
    from mlxfit.model.inputs import WeightsRead
    from mlxfit.model.tensors import TensorInfo
    from mlxfit.model.weights import summarize_weights

    by_chip: dict[str, list[float]] = {}
    for i, line in enumerate(metal_eval.DATA.read_text().splitlines()):
        r = json.loads(line)
        if not r.get("prompt_tps") or not r.get("prompt_tokens") or r["prompt_tokens"] < 1024:
            continue
        c = metal_eval.map_row(i, r)
        if not isinstance(c, metal_eval.Case):
            continue
        doc = load_descriptor(c.desc)
        tensors = [TensorInfo.of(n, d, sh) for n, d, sh in doc["tensors"]]
        ws = summarize_weights(tensors, doc["config"])
        w = WeightsRead(ws.total_bytes, ws.expert_bytes, ws.embedding_bytes,
                        ws.tied_embeddings, param_count=ws.param_count)
        cfg = metal_eval.load_model(c.desc).cfg
        m = resolve_machine(c.machine)
        peak = (m.gpu_cores or 0) * (cal.batched.core_gflops(m.chip) or 0) * 1e9
        if not peak:
            continue
        f = flops_per_token(cfg, Run(ctx=max(1, c.P // 2)), w)
        by_chip.setdefault(m.chip, []).append(r["prompt_tps"] * f / peak)
    allv = [v for chip, vs in by_chip.items() if not chip.startswith("M5") for v in vs]
    for chip, vs in sorted(by_chip.items()):
        print(f"{chip}: implied compute_eff median {statistics.median(vs):.2f} "
              f"(min {min(vs):.2f}, max {max(vs):.2f}, {len(vs)} prefill rows)")
    print(f"M1-M4: median {statistics.median(allv):.2f} over {len(allv)} rows")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--compute", action="store_true", help="compute_eff implied by prefill")
    args = ap.parse_args()
    cal = load_calibration()
    if args.compute:
        implied_compute_eff(cal)
        return
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
