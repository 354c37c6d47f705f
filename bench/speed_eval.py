"""Decode and prompt speed as sums of per-op costs, against the published runs, judged the way
issue 25 judges them: in-sample, leave-one-source-out (LOSO) and leave-one-family-kind-out
(LOFKO; dense, MoE, MLA, sliding, hybrid, SSM).

Used by ``bench/metal_eval.py --speed [--md FILE] [--loo-rows FILE]``. Each run's per-op amounts
(bytes each decode step reads by kernel path, FLOPs and bytes of each prefill chunk) come from
mlxfit's own functions (``speed.weights_split``, ``speed.kv_read_parts``,
``compute.chunk_flops``, ``compute.chunk_read_bytes``); the time is then a sum of amounts over
fitted efficiencies, so the fits (log(pred/meas), soft-L1, each source's runs sharing one
vote: ``SOURCE_POWER``) work on per-run features. A run whose
harness slept before each trial (``prefill_eval.idle_gpu``: ax-engine's mlx_lm.benchmark
--delay) adds the cold-GPU start (``compute.cold_gpu_seconds``) to its TTFT. The
"shipped" prediction is mlxfit's (``predicted_decode_seconds``, ``predicted_ttft``) with
calibration.toml as it is.

``--loo-rows FILE`` writes one JSON line per run and quantity, a format kept stable for the
bands helper (issue 27):
  {"quantity": "decode_tps" | "prompt_tps", "run": <row index in metal_published.jsonl>,
   "model": str, "source": str (LOSO group), "machine": str, "chip_class": str,
   "family_kind": "dense"|"MoE"|"MLA"|"sliding"|"hybrid"|"SSM", "params_b": float,
   "prompt_tokens": int, "gen_tokens": int, "context": int, "measured": float,
   "predicted": float (shipped), "in_sample": float, "loso": float, "lofko": float}
All speeds in tokens/s; relative error = predicted / measured - 1.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np

from mlxfit.estimate.compute import (
    chunk_flops,
    chunk_read_bytes,
    cold_gpu_seconds,
    cold_reread_seconds,
    decode_matmul_flops,
    prefill_layers,
)
from mlxfit.estimate.speed import (
    experts_touched,
    kv_read_parts,
    unfused_decode_flops,
    unfused_decode_layers,
    weights_split,
)

KINDS = ("dense", "MoE", "MLA", "sliding", "hybrid", "SSM")

# decode constants fitted, with bounds; each eta is a fraction of the bandwidth: at most 1
DEC_FIT = {"eta": (0.3, 1.0), "expert_eta": (0.1, 1.0), "kv_eta": (0.1, 1.0),
           "unfused_eta": (0.05, 1.0), "per_layer_s": (0.0, 5e-4), "per_moe_layer_s": (0.0, 5e-4),
           "gqa_ultra": (0.0, 1.0), "ultra_eta": (0.5, 1.5), "per_unfused_layer_s": (0.0, 5e-4), "unfused_flops_eff": (0.01, 5.0)}
PRE_FIT = {"eff_affine2": (0.05, 1.5), "eff_affine3": (0.05, 1.5), "eff_affine4": (0.05, 1.5),
           "eff_affine5": (0.05, 1.5), "eff_affine6": (0.05, 1.5), "eff_affine8": (0.05, 1.5),
           "expert_eff": (0.02, 2.0), "neural_accel_eff": (0.05, 2.0), "attn_eff": (0.05, 2.0),
           "attn_unfused_eff": (0.01, 2.0), "score_eta": (0.01, 2.0), "scan_eff": (0.001, 2.0),
           "chunk_read_eta": (0.02, 2.0), "per_layer_chunk_s": (0.0, 0.05),
           "per_expert_chunk_s": (0.0, 0.001), "ultra_compute": (0.3, 1.5),
           "cold_gpu_slowdown": (1.0, 5.0), "cold_gpu_lost_s": (0.0, 1.0),
           "cold_read_eta": (0.01, 5.0)}
# A constant is fitted only where at least this many models (formats: runs) carry its feature;
# otherwise it keeps the all-runs value (as decode's ultra_eta always did leaving guruswami out).
MIN_MODELS = 3
# which feature identifies each constant: held at its full-data value when no training run has it
DEC_NEEDS = {"expert_eta": "routed", "kv_eta": "fused", "unfused_eta": "unfused",
             "per_moe_layer_s": "Lm", "gqa_ultra": "fused_g", "ultra_eta": "ultra",
             "per_unfused_layer_s": "Lu", "unfused_flops_eff": "uf"}
PRE_NEEDS = {"expert_eff": "experts", "attn_eff": "attn_fused", "attn_unfused_eff": "attn_unfused",
             "score_eta": "traffic", "scan_eff": "scan", "per_expert_chunk_s": "moe_experts",
             "ultra_compute": "ultra", "neural_accel_eff": "na",
             "cold_gpu_slowdown": "cold", "cold_gpu_lost_s": "cold", "cold_read_eta": "cold"}


# Runs whose prompt speeds stay out of the fit and tables (their decode speeds are kept), by a
# substring of the row's source.
NO_PROMPT_TPS = {
    "mlx032-current": (
        "ax-engine's July 2026 'mlx032-current' runs (homebrew MLX 0.32.0 snapshots, 07-12 and "
        "07-13): every model's mlx_lm.benchmark prefill there stalls at 2048 tokens (Gemma-4 31B "
        "4-bit 208 tok/s, Qwen3.6-27B 4-bit 266, Gemma-4 E2B 4-bit 7,893 and 8,755) against "
        "758 / 930 / 19,874 tok/s for the same models on the same M5 Max in its mlx-lm 0.31.3 "
        "reference run; decode is unchanged (E2B 4-bit 213-221 vs 225 tok/s): Homebrew's MLX "
        "0.32.0 metallib has no NAX kernels (Pushkinist/rMLX#309). The 6-bit "
        "Gemma-4 E2B/E4B rows were taken from these runs"),
}


def no_prompt_tps(row: dict) -> str:
    return next((why for k, why in NO_PROMPT_TPS.items() if k in row.get("source", "")), "")


def family_kind(cfg) -> str:
    if any(a.mla is not None for a in cfg.attention_layers):
        return "MLA"
    if cfg.linear_v_heads:
        return "hybrid"
    if cfg.ssm_heads:
        return "SSM"
    if any(a.cache.name == "rotating" for a in cfg.attention_layers):
        return "sliding"
    return "MoE" if cfg.is_moe else "dense"


_QUANT = re.compile(r"[-_](?:q\d|\d+bit|bf16|fp16|mxfp\d|nvfp\d)(?:[-_].*)?$", re.IGNORECASE)


def model_key(desc: str) -> str:
    """One model, whatever its quantization: the 5 quantizations of one checkpoint identify a
    constant no better than one (they share every shape but the bits)."""
    return _QUANT.sub("", desc.split("/")[-1]).lower()


def source_key(row: dict) -> str:
    """The LOSO group: one repository, file or issue thread (not mlxfit's coarse 'singles')."""
    s = row["source"]
    for cut in (" (", "@"):
        s = s.split(cut)[0]
    return s.replace("https://github.com/", "").replace("github:", "")


# --------------------------------------------------------------------------- features


def decode_features(c, model, ev) -> dict:
    run = ev.run_of(c, c.P + c.G // 2)
    cfg, w = model.cfg, model.w_native
    fused_dims = ev.base_cal().backend("metal").fused_decode_head_dims
    ultra = "Ultra" in c.machine
    dense, routed = weights_split(cfg, w)
    f0, u = kv_read_parts(cfg, run, fused_decode=fused_dims, ultra=ultra, gqa_ultra=0.0)
    f1, _ = kv_read_parts(cfg, run, fused_decode=fused_dims, ultra=ultra, gqa_ultra=1.0)
    return {"dense": dense, "routed": routed, "fused": f0, "fused_g": f1 - f0, "unfused": u,
            "state": 2 * cfg.state_bytes, "L": cfg.num_layers, "Lm": cfg.moe_layers,
            "Lu": unfused_decode_layers(cfg, run, fused_dims),
            "uf": unfused_decode_flops(cfg, run, fused_dims),
            "T": decode_matmul_flops(ev.prefill_chip(c.machine)) or 0.0,
            "bw": ev.bandwidth(c.machine) * 1e9, "ultra": float(ultra), "G": c.G}


def decode_seconds(f: dict, x: dict) -> float:
    bw = f["bw"] * (x["ultra_eta"] if f["ultra"] else 1.0)
    return ((f["dense"] + f["state"]) / (x["eta"] * bw) + f["routed"] / (x["expert_eta"] * bw)
            + (f["fused"] + x["gqa_ultra"] * f["fused_g"]) / (x["kv_eta"] * bw)
            + f["unfused"] / (x["unfused_eta"] * bw)
            + x["fixed_s"] + x["per_layer_s"] * f["L"] + x["per_moe_layer_s"] * f["Lm"]
            + x["per_unfused_layer_s"] * f["Lu"]
            + (f["uf"] / (x["unfused_flops_eff"] * f["T"]) if f["T"] else 0.0))


def decode_tps(f: dict, x: dict) -> float:
    # mlx_lm.benchmark / generate: G tokens over G-1 decode steps
    return f["G"] / ((f["G"] - 1) * decode_seconds(f, x))


def prefill_features(c, model, row, ev, pe) -> dict | None:
    m, chip = pe.machine_and_compute(c.machine, pe.macos_of(row))
    if chip is None:
        return None
    w = pe.weights_of(model, c.desc)
    run = ev.run_of(c)
    s = run.schedule()
    _, _, n = s.chunks()
    tot = {"dense": 0.0, "experts": 0.0, "attn_fused": 0.0, "attn_unfused": 0.0, "scan": 0.0,
           "traffic": 0.0, "read": 0.0}
    for i in range(1, n + 1):
        fl = chunk_flops(model.cfg, w.params, run, i)
        for k in ("dense", "experts", "attn_fused", "attn_unfused", "scan"):
            tot[k] += getattr(fl, k)
        tot["traffic"] += fl.traffic_bytes
        tot["read"] += chunk_read_bytes(model.cfg, w, s.chunk_at(i).size)
    read1 = chunk_read_bytes(model.cfg, w, s.chunk_at(1).size) if n else 0
    # experts touched per MoE layer, summed over the chunks, x MoE layers
    moe_experts = model.cfg.moe_layers * sum(
        experts_touched(model.cfg.num_experts, model.cfg.top_k, s.chunk_at(i).size)
        for i in range(1, n + 1)) if model.cfg.moe_layers else 0.0
    k = prefill_layers(model.cfg)
    # the first decode step (the last prompt token) at the shipped decode constants
    from mlxfit.estimate.speed import predicted_decode_seconds

    step, _ = predicted_decode_seconds(model.cfg, replace(run, ctx=s.prompt, gen=0), w,
                                       m.bandwidth_gbs, ev.base_cal(), m.name)
    # per-layer chunk costs: every layer mlx-lm builds (compute.prefill_seconds)
    return {**tot, "chunks": n, "layers": model.cfg.num_layers,
            "moe_layers": model.cfg.moe_layers,
            "bw": m.bandwidth_gbs * 1e9, "step": step, "fmt": w.params.fmt,
            "T": chip.matmul_flops, "A": chip.gpu_flops, "na": float(chip.neural_accel),
            "ultra": float(chip.ultra), "P": s.prompt, "cold": float(pe.idle_gpu(row)),
            "read1": read1, "moe_experts": moe_experts}


def prefill_seconds(f: dict, x: dict, ultra_eta: float) -> float:
    warm = _warm_prefill_seconds(f, x, ultra_eta)
    if not f["cold"]:
        return warm
    bw = f["bw"] * (ultra_eta if f["ultra"] else 1.0)
    return warm + cold_gpu_seconds(warm, x["cold_gpu_slowdown"], x["cold_gpu_lost_s"],
                                   cold_reread_seconds(f["read1"], bw, x["cold_read_eta"]))


def _warm_prefill_seconds(f: dict, x: dict, ultra_eta: float) -> float:
    ultra = x["ultra_compute"] if f["ultra"] else 1.0
    tensor = f["T"] * (x["neural_accel_eff"] if f["na"] else 1.0) * ultra
    bw = f["bw"] * (ultra_eta if f["ultra"] else 1.0)
    eff = x.get(f"eff_{f['fmt']}", x["eff_affine4"])
    return ((f["dense"] / eff + f["experts"] / (eff * x["expert_eff"])) / tensor
            + f["attn_fused"] / (x["attn_eff"] * tensor)
            + f["attn_unfused"] / (x["attn_unfused_eff"] * tensor)
            + f["traffic"] / (x["score_eta"] * bw)
            + f["scan"] / (x["scan_eff"] * f["A"] * ultra)
            + f["read"] / (x["chunk_read_eta"] * bw)
            + f["chunks"] * (x["per_layer_chunk_s"] * f["layers"]
                             ) + x["per_expert_chunk_s"] * f["moe_experts"] + f["step"])


def prefill_tps(f: dict, x: dict, ultra_eta: float) -> float:
    return f["P"] / prefill_seconds(f, x, ultra_eta)


# --------------------------------------------------------------------------- fitting


# How the fit weighs a source's runs: each run's residual is scaled by n_source ** (-power / 2),
# so a source's total weight grows as n_source ** (1 - power). 1 (the default): one source, one
# vote. A source's runs share its machine, harness and build, so they are not independent draws
# of the runs mlxfit will meet; weighed run by run, the two largest sources (guruswami's M3
# Ultra, 179 prompt runs; weklund's, 147) set the constants, and what transfers to a new source
# is judged by leave-one-source-out. 0 weighs every run alike (rounds 1-4).
SOURCE_POWER = 1.0


def source_weights(rows, power: float) -> np.ndarray:
    """Per-run residual weights n_source ** (-power / 2), scaled to a mean square of 1."""
    n = {}
    for r in rows:
        n[r["src"]] = n.get(r["src"], 0) + 1
    w = np.array([n[r["src"]] ** (-power / 2) for r in rows], float)
    return w / np.sqrt(np.mean(w**2))


def _fit(rows, x0: dict, names: list[str], bounds: dict, pred, lm_fit) -> dict:
    lo = [bounds[k][0] for k in names]
    hi = [bounds[k][1] for k in names]
    scale = [max(abs(x0[k]), 1e-6) for k in names]  # fit in units of the start value
    w = source_weights(rows, SOURCE_POWER)

    def res(v):
        x = {**x0, **{k: a * s for k, a, s in zip(names, v, scale)}}
        return w * np.array([np.log(pred(r["f"], x) / r["meas"]) for r in rows])

    v0 = [min(max(x0[k], lo[i]), hi[i]) / scale[i] for i, k in enumerate(names)]
    v = lm_fit(res, v0, [a / s for a, s in zip(lo, scale)], [b / s for b, s in zip(hi, scale)],
               iters=80, f_scale=0.05)
    return {**x0, **{k: float(a) * s for k, a, s in zip(names, v, scale)}}


def fit(rows, x0, bounds, needs, pred, lm_fit, full: dict | None = None) -> dict:
    """Fit every constant the training ``rows`` identify; the others (their feature absent
    from every row) keep ``full``'s value (the all-runs fit) or ``x0``'s."""
    names = [k for k in bounds if k in x0]
    held = {}
    for k in list(names):
        feat = needs.get(k)
        if k.startswith("eff_"):
            n = sum(1 for r in rows if r["f"].get("fmt") == k[4:])
        else:
            n = (len({model_key(r["c"].desc) for r in rows if r["f"].get(feat)}) if feat
                 else MIN_MODELS)
        if n >= MIN_MODELS:
            continue
        names.remove(k)
        if full is not None:
            held[k] = full[k]
    return _fit(rows, {**x0, **held}, names, bounds, pred, lm_fit)


# (held-out group, its fitted constants) of the last evaluation, for --folds
FOLDS: list[tuple[str, dict]] = []


def held_out(rows, key, x0, bounds, needs, pred, lm_fit, full) -> dict[int, float]:
    out: dict[int, float] = {}
    for g in sorted({key(r) for r in rows}):
        tr = [r for r in rows if key(r) != g]
        te = [r for r in rows if key(r) == g]
        if not tr:
            continue
        x = fit(tr, x0, bounds, needs, pred, lm_fit, full)
        FOLDS.append((g, {k: x[k] for k in bounds if k in x}))
        for r in te:
            out[id(r)] = pred(r["f"], x)
    return out


# --------------------------------------------------------------------------- report


def _stats(e) -> str:
    if not e:
        return "n=0"
    a = np.abs(e)
    return (f"n={len(a)} med {100 * np.median(a):.1f}% p90 {100 * np.quantile(a, 0.9):.1f}% "
            f"max {100 * a.max():.0f}%")


def collect(ev, pe, cases, rows_by_idx):
    dec, pre = [], []
    for c in cases:
        if c.approx or ev.excluded(c):
            continue
        model = ev.load_model(c.desc)
        r = rows_by_idx[c.idx]
        base = {"c": c, "row": r, "kind": family_kind(model.cfg), "src": source_key(r),
                "chip": ev.chip_group(c.machine), "params_b": ev.param_count(c.desc) / 1e9}
        if c.tps is not None:
            dec.append({**base, "f": decode_features(c, model, ev), "meas": float(c.tps),
                        "shipped": ev.predict_tps(c, ev.base_cal())})
        if r.get("prompt_tps") and not no_prompt_tps(r):
            f = prefill_features(c, model, r, ev, pe)
            if f is not None:
                shipped = pe.check_current(c, model, r, ev.base_cal())
                pre.append({**base, "f": f, "meas": float(r["prompt_tps"]), "shipped": shipped})
    return dec, pre


def evaluate(ev, pe, cases, rows_by_idx, lm_fit):
    cal = ev.base_cal()
    d0 = {k: float(getattr(cal.decode, k)) for k in cal.decode.__dataclass_fields__}
    p0 = {k: float(getattr(cal.prefill, k)) for k in cal.prefill.__dataclass_fields__}
    dec, pre = collect(ev, pe, cases, rows_by_idx)
    out = {}
    for q, rows, x0, bounds, needs in (
            ("decode_tps", dec, d0, DEC_FIT, DEC_NEEDS),
            ("prompt_tps", pre, p0, PRE_FIT, PRE_NEEDS)):
        if q == "prompt_tps":
            def pred(f, x):
                return prefill_tps(f, x, d0["ultra_eta"])
        else:
            pred = decode_tps
        full = fit(rows, x0, bounds, needs, pred, lm_fit)
        loso = held_out(rows, lambda r: r["src"], x0, bounds, needs, pred, lm_fit, full)
        lofko = held_out(rows, lambda r: r["kind"], x0, bounds, needs, pred, lm_fit, full)
        for r in rows:
            r["in_sample"] = pred(r["f"], full)
            r["loso"] = loso.get(id(r), r["in_sample"])
            r["lofko"] = lofko.get(id(r), r["in_sample"])
        out[q] = (rows, full)
    return out


def loo_rows(result) -> list[dict]:
    lines = []
    for q, (rows, _) in result.items():
        for r in rows:
            c = r["c"]
            lines.append({"quantity": q, "run": c.idx, "model": c.desc, "source": r["src"],
                          "machine": c.machine, "chip_class": r["chip"],
                          "family_kind": r["kind"], "params_b": round(r["params_b"], 3),
                          "prompt_tokens": c.P, "gen_tokens": c.G, "context": c.P + c.G,
                          "measured": r["meas"],
                          "predicted": None if r["shipped"] is None else round(r["shipped"], 4),
                          "in_sample": round(r["in_sample"], 4), "loso": round(r["loso"], 4),
                          "lofko": round(r["lofko"], 4)})
    return lines


def report(result) -> list[str]:
    L = ["## Speed (issue 25): decode and prompt tok/s from per-op costs", "",
         ("`bench/metal_eval.py --speed`. Errors |pred/meas - 1|. *shipped* = mlxfit with "
         "calibration.toml as it is; *in-sample* = refit on every run; *LOSO* = refit without "
         "the run's source (one repository, file or issue thread); *LOFKO* = refit without "
         "the run's family kind. A constant no training run identifies keeps its all-runs "
         "value. Each fit weighs a run by n_source ** (-power / 2), power = "
         f"{SOURCE_POWER:g} (`SOURCE_POWER`; 1: one vote per source)."), ""]
    for q, (rows, full) in result.items():
        L += [f"### {q}", "", "Fitted on all runs: " + ", ".join(
            f"{k} = {v:.4g}" for k, v in full.items() if k in (DEC_FIT if q == 'decode_tps'
                                                                else PRE_FIT)), ""]

        def errs(rs, col):
            return [r[col] / r["meas"] - 1 for r in rs if r[col] is not None]

        cols = ("shipped", "in_sample", "loso", "lofko")
        for title, key in (("family kind", lambda r: r["kind"]),
                           ("chip class", lambda r: r["chip"]),
                           ("source", lambda r: r["src"])):
            L += [f"| {title} | shipped | in-sample | LOSO | LOFKO |", "|---|---|---|---|---|"]
            groups = sorted({key(r) for r in rows})
            for g in groups + ["**ALL**"]:
                rs = rows if g == "**ALL**" else [r for r in rows if key(r) == g]
                L.append(f"| {g} | " + " | ".join(_stats(errs(rs, k)) for k in cols) + " |")
            L.append("")
        worst = sorted(rows, key=lambda r: -max(abs(r["loso"] / r["meas"] - 1),
                                                abs(r["lofko"] / r["meas"] - 1)))[:8]
        L += ["Worst held-out runs:", ""]
        for r in worst:
            c = r["c"]
            L.append(f"- #{c.idx} {c.desc.split('/')[-1]} {c.machine} p{c.P} g{c.G} ({r['kind']}, "
                     f"{r['src']}): measured {r['meas']:.1f}, LOSO {100 * (r['loso'] / r['meas'] - 1):+.0f}%, "
                     f"LOFKO {100 * (r['lofko'] / r['meas'] - 1):+.0f}%")
        L.append("")
    return L


def write_loo(path: str, result) -> None:
    with open(path, "w") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in loo_rows(result))
