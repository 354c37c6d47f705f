"""Prompt tok/s: mlxfit's prefill model against the published prompt speeds (metal_published.jsonl).

Used by ``bench/metal_eval.py --prefill`` (the one eval script). Every run's chunk FLOPs are
``mlxfit.estimate.compute.chunk_flops`` summed over its schedule, the chip's peaks
``mlxfit.verbs.edges.compute_for``; the time is then linear in the reciprocal efficiencies, so
the least-squares fit (on log(pred/meas), soft-L1) works on per-run features. The prediction
the tables report for "current" is ``mlxfit.estimate.compute.predicted_ttft`` itself.

prompt tok/s (mlx_lm.benchmark, mlx_lm.generate) = P / (prefill chunks + the first decode step).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np

from mlxfit.estimate.compute import chunk_flops, format_efficiency, predicted_ttft, prefill_layers
from mlxfit.estimate.speed import predicted_decode_seconds
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.hardware.skus import load_sku_table
from mlxfit.model.inputs import MatmulParams, WeightsRead
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import summarize_weights
from mlxfit.verbs.edges import compute_for

# Constants fitted, with bounds. eff_bf16 / mxfp / nvfp have no (or one) published run: they
# keep their calibration.toml values.
FIT = {"eff_affine2": (0.05, 1.5), "eff_affine3": (0.05, 1.5), "eff_affine4": (0.05, 1.5),
       "eff_affine5": (0.05, 1.5), "eff_affine6": (0.05, 1.5), "eff_affine8": (0.05, 1.5),
       "expert_eff": (0.02, 2.0), "neural_accel_eff": (0.05, 2.0), "attn_eff": (0.05, 2.0),
       "attn_unfused_eff": (0.01, 2.0), "score_passes": (0.0, 12.0), "scan_eff": (0.001, 2.0),
       "chunk_read_passes": (0.5, 40.0), "per_layer_chunk_s": (0.0, 0.05), "per_moe_layer_chunk_s": (0.0, 0.05), "ultra_compute": (0.3, 1.5)}
# A constant the fit can learn only from one source (the M3 Ultra is guruswami's alone): held at
# its full-data value when that source is left out, like decode's ultra_eta.
HELD = ("ultra_compute",)
FIXED = ("chunk_read_passes", "per_layer_chunk_s", "per_moe_layer_chunk_s")


@cache
def machine_and_compute(name: str, macos: int):
    m = resolve_machine(name, macos_major=macos)
    return m, compute_for(m)


@cache
def params_of(desc: str) -> MatmulParams:
    from metal_descriptors import load_descriptor  # bench helper on sys.path (metal_eval)

    doc = load_descriptor(desc)
    tensors = [TensorInfo.of(n, d, s) for n, d, s in doc["tensors"]]
    return MatmulParams.of(summarize_weights(tensors, doc["config"]))


def macos_of(row: dict) -> int:
    v = (row.get("macos") or "26").split(".")[0]
    return int(v) if v.isdigit() else 26


def weights_of(model, desc: str) -> WeightsRead:
    return replace(model.w_native, params=params_of(desc))


def features(c, model, row: dict, cal) -> dict | None:
    """Per-run sums the time is linear in (None when the chip has no compute figure)."""
    m, chip = machine_and_compute(c.machine, macos_of(row))
    if chip is None:
        return None
    w = weights_of(model, c.desc)
    from metal_eval import run_of  # the run the memory/decode evaluation uses

    run = run_of(c)
    s = run.schedule()
    _, _, n = s.chunks()
    tot = {"dense": 0.0, "experts": 0.0, "attn_fused": 0.0, "attn_unfused": 0.0, "scan": 0.0,
           "score_bytes": 0.0}
    for i in range(1, n + 1):
        f = chunk_flops(model.cfg, w.params, run, i)
        for k in tot:
            tot[k] += getattr(f, k)
    chunk_read = (w.total_bytes - (0 if w.tied_embeddings else w.embedding_bytes)
                  - w.lookup_bytes)
    step, _ = predicted_decode_seconds(model.cfg, replace(run, ctx=s.prompt, gen=0), w,
                                       m.bandwidth_gbs, cal, m.name)
    k = prefill_layers(model.cfg)
    return {**tot, "chunks": n, "layers": k,
            "moe_layers": sum(1 for ly in model.cfg.layers[:k] if ly.moe),
            "read_s": chunk_read / (cal.decode.eta * m.bandwidth_gbs * 1e9), "step": step,
            "stream": cal.decode.eta * m.bandwidth_gbs * 1e9,
            "fmt": w.params.fmt, "T": chip.matmul_flops, "A": chip.gpu_flops,
            "na": chip.neural_accel, "ultra": chip.ultra, "P": s.prompt}


def seconds(f: dict, x: dict) -> float:
    """The ttft of ``predicted_ttft`` from the features and constants ``x`` (a dict)."""
    ultra = x["ultra_compute"] if f["ultra"] else 1.0
    tensor = f["T"] * (x["neural_accel_eff"] if f["na"] else 1.0) * ultra
    alu = f["A"] * ultra
    eff = x.get(f"eff_{f['fmt']}", x["eff_affine4"])
    return ((f["dense"] / eff + f["experts"] / (eff * x["expert_eff"])) / tensor
            + f["attn_fused"] / (x["attn_eff"] * tensor)
            + f["attn_unfused"] / (x["attn_unfused_eff"] * tensor)
            + f["score_bytes"] * x["score_passes"] / f["stream"]
            + f["scan"] / (x["scan_eff"] * alu)
            + f["chunks"] * (x["chunk_read_passes"] * f["read_s"] + x["per_layer_chunk_s"] * f["layers"]
                             + x["per_moe_layer_chunk_s"] * f["moe_layers"]) + f["step"])


def tps(f: dict, x: dict) -> float:
    return f["P"] / seconds(f, x)


def fit(rows: list[tuple], x0: dict, names: list[str], lm_fit) -> dict:
    """Least squares on log(pred/meas) over (case, features, measured tps) rows."""
    lo = [FIT[k][0] for k in names]
    hi = [FIT[k][1] for k in names]

    def res(v):
        x = {**x0, **dict(zip(names, v))}
        return np.array([np.log(tps(f, x) / meas) for _, f, meas in rows])

    v = lm_fit(res, [min(max(x0[k], lo[i]), hi[i]) for i, k in enumerate(names)], lo, hi,
               iters=80, f_scale=0.1)
    return {**x0, **dict(zip(names, (float(a) for a in v)))}


def family_of(machine: str) -> str:
    return machine.split()[0]


def stats(e: list[float]) -> str:
    if not e:
        return "n=0"
    a = np.abs(e)
    return (f"n={len(a)} median {100 * np.median(a):.1f}% p90 {100 * np.quantile(a, 0.9):.1f}% "
            f"bias {100 * np.median(e):+.1f}%")


def report(cases, rows_by_idx, cal, load_model, lm_fit, sources) -> tuple[list[str], dict]:
    """The markdown lines of the prefill evaluation and the full-data constants."""
    x0 = {k: float(getattr(cal.prefill, k)) for k in cal.prefill.__dataclass_fields__}
    data, aside = [], []
    for c in cases:
        r = rows_by_idx[c.idx]
        if not r.get("prompt_tps"):
            continue
        f = features(c, load_model(c.desc), r, cal)
        if f is not None:
            (aside if c.approx else data).append((c, f, float(r["prompt_tps"])))
    fmts = {f["fmt"] for _, f, _ in data}
    names = [k for k in FIT if not k.startswith("eff_") or k[4:] in fmts]
    if not any(f["na"] for _, f, _ in data):
        names.remove("neural_accel_eff")
    full = fit(data, x0, names, lm_fit)
    L = ["## Prefill (prompt tok/s): `bench/metal_eval.py --prefill`", "",
         f"{len(data)} published runs with a prompt speed (assumption-laden rows left out). "
         "Error = |pred - meas| / meas of prompt tok/s; prediction = "
         "`mlxfit.estimate.compute.predicted_ttft`.", "",
         "Fitted constants (all runs): " + ", ".join(f"{k} = {full[k]:.4g}" for k in names), ""]

    def by(key, fn):
        groups: dict[str, list[float]] = {}
        for c, f, meas in data:
            groups.setdefault(key(c), []).append((fn(c, f) - meas) / meas)
        return groups

    cur = {k: float(getattr(cal.prefill, k)) for k in x0}
    insample = by(lambda c: family_of(c.machine), lambda c, f: tps(f, full))
    current = by(lambda c: family_of(c.machine), lambda c, f: tps(f, cur))
    # leave-one-source-out: every constant refitted on the other sources; "fixed held" also
    # holds the per-chunk costs, which only short prompts (< 1K tokens: ax-engine's alone)
    # can identify
    def loso(held_keys: tuple[str, ...]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for s in sources:
            tr = [d for d in data if d[0].source != s]
            te = [d for d in data if d[0].source == s]
            if not te or not tr:
                continue
            held = {k: full[k] for k in held_keys}
            x = fit(tr, {**x0, **held}, [k for k in names if k not in held_keys], lm_fit)
            for c, f, meas in te:
                out.setdefault(family_of(c.machine), []).append((tps(f, x) - meas) / meas)
        return out

    lo, lo_fixed = loso(HELD), loso(HELD + FIXED)
    L += ["| chip family | in-sample (refit) | calibration.toml now | leave-one-source-out | "
          "... per-chunk costs held |", "|---|---|---|---|---|"]
    for fam in sorted(insample) + ["ALL"]:
        pick = (lambda g: [e for v in g.values() for e in v]) if fam == "ALL" \
            else (lambda g, fam=fam: g.get(fam, []))
        L.append(f"| {fam} | {stats(pick(insample))} | {stats(pick(current))} | "
                 f"{stats(pick(lo))} | {stats(pick(lo_fixed))} |")
    by_src = by(lambda c: c.source, lambda c, f: tps(f, full))
    L += ["", "| source | in-sample |", "|---|---|"]
    L += [f"| {s} | {stats(e)} |" for s, e in sorted(by_src.items())]
    def span(c) -> str:
        return ("< 1K" if c.P < 1024 else "1K-8K" if c.P < 8192 else "8K-32K" if c.P < 32768
                else ">= 32K")
    by_len = by(span, lambda c, f: tps(f, full))
    L += ["", "| prompt tokens | in-sample |", "|---|---|"]
    L += [f"| {k} | {stats(by_len[k])} |" for k in ("< 1K", "1K-8K", "8K-32K", ">= 32K")
          if k in by_len]
    by_fmt = by(lambda c: load_fmt(c, data), lambda c, f: tps(f, full))
    L += ["", "| weight format | in-sample |", "|---|---|"]
    L += [f"| {s} | {stats(e)} |" for s, e in sorted(by_fmt.items())]
    L += ["", "Assumption-laden runs, never fitted (an out-of-sample check with the constants "
          "above):", "", "| runs | chip | why set aside | error |", "|---|---|---|---|"]
    groups: dict[tuple[str, str], list[float]] = {}
    for c, f, meas in aside:
        groups.setdefault((c.machine, c.approx), []).append((tps(f, full) - meas) / meas)
    L += [f"| {len(e)} | {m} | {why} | {stats(e)} |" for (m, why), e in sorted(groups.items())]
    fitted = {machine_and_compute(c.machine, 26)[0].chip for c, _, _ in data}
    checked = {machine_and_compute(c.machine, 26)[0].chip for c, _, _ in aside} - fitted
    none = [ch for ch in load_sku_table()["chips"] if ch not in fitted | checked]
    L += ["", f"Chips with a fitted published prefill run: {', '.join(sorted(fitted))}. "
          f"Out-of-sample only: {', '.join(sorted(checked))}. No published prefill run at all: "
          f"{', '.join(none)}; their prompt speeds rest on the SKU table's compute figures and "
          "the efficiencies fitted on the chips above.", ""]
    return L, full


def load_fmt(c, data) -> str:
    return next(f["fmt"] for cc, f, _ in data if cc is c)


def check_current(c, model, row, cal) -> float | None:
    """mlxfit's own prediction (predicted_ttft), to pin ``seconds`` to it."""
    m, chip = machine_and_compute(c.machine, macos_of(row))
    if chip is None:
        return None
    from metal_eval import run_of

    p = predicted_ttft(model.cfg, run_of(c), weights_of(model, c.desc), m.bandwidth_gbs, chip,
                       cal, m.name)
    return None if p is None else p.prefill_tps


__all__ = ["check_current", "format_efficiency", "report"]
