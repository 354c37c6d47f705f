"""mlxfit's Metal predictions against the published mlx-lm runs (bench/results/metal_published.jsonl).

For every run whose model we can describe exactly (config + mlx_lm.convert quantization), the
weights are the exact descriptor bytes (bench/metal_descriptors.py, or the built-in catalog), the
peak is ``mlxfit.core.totals_at`` and the decode speed ``mlxfit.speed.decode_seconds`` with the
machine's bandwidth (``mlxfit.machine.resolve_machine``).

mlx_lm.benchmark semantics (mlx_lm/benchmark.py, generate.py): a warmup generation, then
``--num-trials`` identical generations; "peak_memory" is mx.get_peak_memory()/1e9, never reset,
so it is the peak of one generation; "generation_tps" = G / (time from the first generated token
to the G-th), i.e. G tokens over G-1 decode steps, averaged over trials. So the predicted tok/s is
G / ((G-1) * t_step), with t_step at the mean decode context P + G/2. The caches end at P + G
tokens (Run(ctx=P+G, gen=G)).

Usage:
  /work/devenv/bin/python bench/metal_eval.py              # tables with the shipped calibration
  /work/devenv/bin/python bench/metal_eval.py --fit        # + least-squares refit, LOSO holdout
  /work/devenv/bin/python bench/metal_eval.py --fit --md bench/results/metal_eval.md
  /work/devenv/bin/python bench/metal_eval.py --rows out.jsonl   # one line per evaluated run
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import sys
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from metal_descriptors import load_descriptor  # noqa: E402

from mlxfit.api import activation_bytes  # noqa: E402
from mlxfit.calibration import Calibration, parse_calibration  # noqa: E402
from mlxfit.config import ModelConfig, parse_config  # noqa: E402
from mlxfit.core import totals_at  # noqa: E402
from mlxfit.machine import resolve_machine  # noqa: E402
from mlxfit.memory import Run, decode_phase, prefill_phase  # noqa: E402
from mlxfit.resources import data_path  # noqa: E402
from mlxfit.speed import WeightsRead, decode_seconds, kv_read_term, weights_read_term  # noqa: E402
from mlxfit.tensors import TensorInfo  # noqa: E402
from mlxfit.weights import summarize_weights  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "results" / "metal_published.jsonl"

# --------------------------------------------------------------------------- run -> case


@dataclass
class Case:
    idx: int
    source: str  # guruswami | ax-engine | BENCHMARKS.md | singles
    family: str
    desc: str
    P: int
    G: int
    step: int
    machine: str
    peak: float | None  # GB (1e9)
    tps: float | None
    kv_bits: int | None = None
    qstart: int = 5000
    max_kv: int | None = None
    approx: str = ""  # non-empty: assumption-laden row, reported apart and not fitted
    label: str = ""


@dataclass
class Skipped:
    idx: int
    model: str
    reason: str


NAME_MAP = {
    "Qwen/Qwen3-4B-Instruct-2507": "mlx-community/Qwen3-4B-Instruct-2507-bf16",
    "mlx-community/Meta-Llama-3.1-8B-Instruct-4bit": "mlx-community/Llama-3.1-8B-Instruct-4bit",
    "mlx-community/Qwen3.5-9B-MLX-4bit": "mlx-community/Qwen3.5-9B-4bit",
}
MACHINE = {
    "M3 Ultra (80-core GPU)": "M3 Ultra 80c 512GB",
    "M5 Max": "M5 Max 128GB",
    "M4 Max": "M4 Max 64GB",  # 64 and 128 GB are both the 40-core 546 GB/s bin
    "M3 Pro": "M3 Pro 18GB",
    "M4 Pro (Mac mini)": "M4 Pro 64GB",
    "M2 Ultra": "M2 Ultra 192GB",
}


def _source(r: dict) -> str:
    s = r["source"]
    if s.startswith("github:guruswami"):
        return "guruswami"
    if s.startswith("github:defai-digital"):
        return "ax-engine"
    if "BENCHMARKS.md" in s:
        return "BENCHMARKS.md"
    return "singles"


def _family(r: dict, desc: str) -> str:
    d = desc.lower()
    for key, fam in [
        ("405b", "Llama-3.1-405B"), ("llama-3.2-3b", "Llama-3.2-3B"), ("llama-3.1-8b", "Llama-3.1-8B"),
        ("deepseek-coder", "DeepSeek-Coder-6.7B"), ("deepseek-v3.2", "DeepSeek-V3.2 (MLA)"),
        ("gemma-2", "Gemma-2-9B"), ("gemma-4-26b", "Gemma-4 MoE"), ("gemma-4-e", "Gemma-4 E2B/E4B"),
        ("gemma-4-31b", "Gemma-4-31B"), ("mixtral", "Mixtral-8x7B"), ("mistral", "Mistral-7B"),
        ("qwen2.5", "Qwen2.5"), ("qwen3-30b", "Qwen3-30B-A3B"), ("qwen3-4b", "Qwen3-4B"),
        ("qwen3.5-9b", "Qwen3.5/3.6/3.8 hybrid dense"), ("qwen3.6-27b", "Qwen3.5/3.6/3.8 hybrid dense"),
        ("qwen3.8-27b", "Qwen3.5/3.6/3.8 hybrid dense"), ("35b-a3b", "Qwen3.6-35B-A3B / Next (hybrid MoE)"),
        ("qwen3-coder-next", "Qwen3.6-35B-A3B / Next (hybrid MoE)"), ("glm-4.7", "GLM-4.7-Flash (MLA)"),
    ]:
        if key in d:
            return fam
    return r.get("family") or "?"


def _nk(text: str) -> int:
    m = re.match(r"(\d+)k", text.strip().lower())
    return int(m.group(1)) * 1024


def map_row(i: int, r: dict) -> Case | Skipped:
    model, src = r["model"], _source(r)
    machine = MACHINE.get(r["chip"])
    step = r["prefill_step_size"] or 2048
    if src == "guruswami":
        desc = "local/" + model.split(" (local")[0] + "-" + r["quant"].upper()
    else:
        desc = NAME_MAP.get(model, model)
    if "UD-MLX" in model:
        return Skipped(i, model, "Unsloth dynamic mixed-precision quant: per-layer bits unknown")
    if "granite" in model:
        return Skipped(i, model, "PR #525 pre/post were unmerged/superseded SSM code paths; "
                                 "granite-4.0-h-small config not fully published in the index")
    if model.startswith("4-bit Mistral 7B") and "pre (" in (r["notes"] or ""):
        return Skipped(i, model, "pre-PR #40 mlx-lm materialized the causal mask (code since replaced)")
    if machine is None:
        return Skipped(i, model, f"chip {r['chip']!r} not resolvable")
    P, G = r["prompt_tokens"], r["gen_tokens"]
    approx = ""
    kv_bits, qstart, max_kv = r["kv_bits"], 5000, r["max_kv_size"]
    if P is None:
        t = r["prompt_tokens_text"] or ""
        if "128K" in t:
            P, approx = 131072, ""  # 'full 128K context'
        else:
            P = _nk(t)
    if G is None:
        G = 128 if "1781" in r["source"] else 100  # not stated; peak barely depends on it
    if "1587" in r["source"]:
        approx = "issue #1587: '8k'/'16k' prompt, print unit not visible, QuantizedKVCache from offset 0"
        if kv_bits:
            qstart = 0
    if "1029" in r["source"]:
        approx = "mlx/mlx-lm 0.21.4 (Feb 2025)"
    if model.startswith("4-bit Mistral 7B"):
        desc = "mlx-community/Mistral-7B-Instruct-v0.3-4bit"
        approx = "PR #40 post: repo, gen tokens, versions not stated (v0.3 4-bit, G=100 assumed)"
    if "1480" in r["source"] or "1781" in r["source"]:
        approx = approx or ""
    try:
        load_model(desc)
    except FileNotFoundError:
        return Skipped(i, model, f"no descriptor {desc}")
    tps = r["gen_tps"] if (G or 0) >= 8 and r["gen_tps"] else None
    return Case(i, src, _family(r, desc), desc, P, G, step, machine, r["peak_memory_gb"], tps,
                kv_bits=kv_bits, qstart=qstart, max_kv=max_kv, approx=approx,
                label=f"{desc.split('/')[-1]} p{P} g{G} s{step}")


# --------------------------------------------------------------------------- model, prediction


@dataclass(frozen=True)
class Model:
    cfg: ModelConfig
    w: WeightsRead


@lru_cache(maxsize=None)
def load_model(desc: str) -> Model:
    doc = load_descriptor(desc)
    tensors = [TensorInfo.of(n, d, s) for n, d, s in doc["tensors"]]
    ws = summarize_weights(tensors, doc["config"])
    cfg = parse_config(doc["config"], act_bytes=activation_bytes(tensors), where=desc)
    return Model(cfg, WeightsRead(ws.total_bytes, ws.expert_bytes, ws.embedding_bytes,
                                  ws.tied_embeddings))


@lru_cache(maxsize=None)
def bandwidth(machine: str) -> float:
    return resolve_machine(machine).bandwidth_gbs


def run_of(c: Case, ctx: int | None = None) -> Run:
    return Run(ctx=ctx or c.P + c.G, gen=c.G, prefill_step=c.step, kv_bits=c.kv_bits,
               quantized_kv_start=c.qstart, max_kv_size=c.max_kv, backend="metal")


def predict_peak(c: Case, cal: Calibration) -> tuple[float, Any]:
    m = load_model(c.desc)
    t = totals_at(m.cfg, m.w.total_bytes, run_of(c), cal)
    return t.total / 1e9, t


def step_seconds(c: Case, cal: Calibration) -> float:
    m = load_model(c.desc)
    run = run_of(c, c.P + c.G // 2)
    secs, _ = decode_seconds(m.cfg, run, m.w, bandwidth(c.machine), cal.decode)
    return secs


def predict_tps(c: Case, cal: Calibration) -> float:
    # generation_tps = G tokens / (G-1) decode steps (the first token comes from the prompt step)
    return c.G / ((c.G - 1) * step_seconds(c, cal))


# --------------------------------------------------------------------------- calibration


def base_doc() -> dict:
    return tomllib.loads(data_path("calibration.toml").read_text())


def cal_with(doc: dict, metal: dict | None = None, dec: dict | None = None) -> Calibration:
    d = copy.deepcopy(doc)
    d["backend"]["metal"].update(metal or {})
    d["decode"].update(dec or {})
    return parse_calibration(d, "metal_eval")


# --------------------------------------------------------------------------- statistics


def _q(xs, q):
    return float(np.quantile(np.asarray(xs), q)) if xs else float("nan")


def stats(errs: list[float]) -> dict:
    a = [abs(e) for e in errs]
    return {"n": len(a), "median": _q(a, 0.5), "p90": _q(a, 0.9), "max": max(a) if a else float("nan"),
            "bias": float(np.median(errs)) if errs else float("nan")}


def bucket(P: int) -> str:
    return "<8K" if P < 8192 else ("8K-32K" if P < 32768 else ">=32K")


def table(rows: list[dict], key: str, what: str) -> list[str]:
    """Markdown table of errors grouped by ``key``."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    out = [f"| {key} | n peak | peak median | peak p90 | peak max | peak bias | n tps | tps median | tps p90 | tps bias |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for g in sorted(groups, key=lambda k: (-len(groups[k]), k)) + ["ALL"]:
        rs = rows if g == "ALL" else groups[g]
        pe = [r[f"{what}peak_err"] for r in rs if r.get(f"{what}peak_err") is not None]
        te = [r[f"{what}tps_err"] for r in rs if r.get(f"{what}tps_err") is not None]
        sp, st = stats(pe), stats(te)
        f = lambda x: "" if math.isnan(x) else f"{100 * x:.1f}%"  # noqa: E731
        out.append(f"| {'**ALL**' if g == 'ALL' else g} | {sp['n']} | {f(sp['median'])} | {f(sp['p90'])} | "
                   f"{f(sp['max'])} | {f(sp['bias'])} | {st['n']} | {f(st['median'])} | {f(st['p90'])} | "
                   f"{f(st['bias'])} |")
    return out


def evaluate(cases: list[Case], cal: Calibration, prefix: str = "") -> list[dict]:
    out = []
    for c in cases:
        d: dict[str, Any] = {"idx": c.idx, "source": c.source, "family": c.family, "desc": c.desc,
                             "P": c.P, "G": c.G, "step": c.step, "machine": c.machine,
                             "bucket": bucket(c.P), "label": c.label, "approx": c.approx}
        if c.peak is not None:
            pk, t = predict_peak(c, cal)
            d.update({f"{prefix}peak_pred": pk, "peak_meas": c.peak,
                      f"{prefix}peak_err": (pk - c.peak) / c.peak,
                      "weights_gb": t.weights / 1e9, "kv_gb": t.kv / 1e9, "state_gb": t.state / 1e9,
                      f"{prefix}transient_gb": t.transient / 1e9, f"{prefix}phase": t.phase.name,
                      f"{prefix}terms": {x.name: round(x.bytes / 1e9, 4) for x in t.phase.terms},
                      "meas_transient_gb": c.peak - (t.weights + t.kv + t.state) / 1e9})
        if c.tps is not None:
            tp = predict_tps(c, cal)
            d.update({f"{prefix}tps_pred": tp, "tps_meas": c.tps, f"{prefix}tps_err": (tp - c.tps) / c.tps})
        out.append(d)
    return out


# --------------------------------------------------------------------------- fitting


def lm_fit(fun, x0, lo, hi, iters=60, loss="soft_l1", f_scale=0.03):
    """Small bounded Levenberg-Marquardt on residual vector fun(x) (finite-difference Jacobian,
    soft-L1 robust loss as IRLS weights). Returns x."""
    x = np.array(x0, float)
    lo, hi = np.array(lo, float), np.array(hi, float)
    lam = 1e-2

    def cost(r):
        if loss == "soft_l1":
            z = (r / f_scale) ** 2
            return float(np.sum(2 * f_scale**2 * (np.sqrt(1 + z) - 1)))
        return float(np.sum(r**2))

    r = fun(x)
    c0 = cost(r)
    for _ in range(iters):
        J = np.zeros((len(r), len(x)))
        for j in range(len(x)):
            h = 1e-4 * max(abs(x[j]), 1e-3)
            xp = x.copy()
            xp[j] = min(x[j] + h, hi[j]) if x[j] + h <= hi[j] else x[j] - h
            J[:, j] = (fun(xp) - r) / (xp[j] - x[j])
        w = 1 / np.sqrt(1 + (r / f_scale) ** 2) if loss == "soft_l1" else np.ones_like(r)
        Jw, rw = J * w[:, None], r * w
        A, g = Jw.T @ Jw, Jw.T @ rw
        improved = False
        for _ in range(12):
            dx = -np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), g)
            xn = np.clip(x + dx, lo, hi)
            rn = fun(xn)
            cn = cost(rn)
            if cn < c0:
                x, r, c0, lam, improved = xn, rn, cn, lam / 3, True
                break
            lam *= 4
        if not improved or np.max(np.abs(dx)) < 1e-7:
            break
    return x


MEM_PARAMS = ["act_hidden", "act_ffn", "act_q", "act_moe", "score_arrays", "growth_copy_layers",
              "base_bytes"]
MEM_BOUNDS = {"act_hidden": (0, 80), "act_ffn": (0, 30), "act_q": (0, 80), "act_moe": (0, 30),
              "act_kv": (0, 8), "score_arrays": (0.5, 4), "growth_copy_layers": (0, 8),
              "base_bytes": (0, 2e9), "mla_score_arrays": (0, 4), "mla_kv_arrays": (0, 4)}
SCALE = {"base_bytes": 1e8}


def fit_memory(cases: list[Case], doc: dict, params: list[str], fixed: dict | None = None) -> dict:
    fixed = fixed or {}
    m0 = doc["backend"]["metal"]
    x0 = [m0[p] / SCALE.get(p, 1) for p in params]
    lo = [MEM_BOUNDS[p][0] / SCALE.get(p, 1) for p in params]
    hi = [MEM_BOUNDS[p][1] / SCALE.get(p, 1) for p in params]
    cs = [c for c in cases if c.peak is not None]

    def fun(x):
        cal = cal_with(doc, {**fixed, **{p: float(v) * SCALE.get(p, 1) for p, v in zip(params, x)}})
        return np.array([(predict_peak(c, cal)[0] - c.peak) / c.peak for c in cs])

    x = lm_fit(fun, x0, lo, hi)
    return {**fixed, **{p: float(v) * SCALE.get(p, 1) for p, v in zip(params, x)}}


def fit_decode(cases: list[Case], doc: dict, params=("eta", "fixed_s", "per_layer_s", "per_moe_layer_s"),
               per_chip: bool = False) -> dict:
    """Linear least squares on relative step-time error: t = B/(eta*BW) + fixed + a*L + b*Lmoe."""
    cs = [c for c in cases if c.tps is not None]
    rows, y = [], []
    chips = sorted({c.machine for c in cs})
    for c in cs:
        m = load_model(c.desc)
        run = run_of(c, c.P + c.G // 2)
        byts = weights_read_term(m.cfg, m.w).bytes + kv_read_term(m.cfg, run).bytes
        t_meas = c.G / ((c.G - 1) * c.tps)
        L = m.cfg.num_layers
        Lm = sum(1 for ly in m.cfg.layers if ly.moe)
        bw = bandwidth(c.machine) * 1e9
        feats = {"eta": byts / bw, "fixed_s": 1.0, "per_layer_s": L, "per_moe_layer_s": Lm}
        row = [feats[p] for p in params]
        if per_chip:
            row = [feats["eta"] * (c.machine == ch) for ch in chips] + row[1:]
        rows.append(np.array(row) / t_meas)
        y.append(1.0)
    A, b = np.array(rows), np.array(y)
    sol = _nnls(A, b)
    out: dict[str, Any] = {}
    if per_chip:
        out["eta_by_chip"] = {ch: 1 / sol[k] for k, ch in enumerate(chips)}
        rest = sol[len(chips):]
        out.update(dict(zip(params[1:], rest)))
        out["eta"] = float(np.median(list(out["eta_by_chip"].values())))
    else:
        out = dict(zip(params, sol))
        out["eta"] = 1 / out["eta"]
    for p in ("fixed_s", "per_layer_s", "per_moe_layer_s"):
        out.setdefault(p, doc["decode"][p] if p not in params else 0.0)
    return {k: float(v) if not isinstance(v, dict) else v for k, v in out.items()}


def _nnls(A, b, iters=500):
    """Non-negative least squares by projected coordinate descent (small problems)."""
    x = np.linalg.lstsq(A, b, rcond=None)[0]
    x = np.maximum(x, 0)
    AtA, Atb = A.T @ A, A.T @ b
    for _ in range(iters):
        for j in range(len(x)):
            if AtA[j, j] <= 0:
                continue
            x[j] = max(0.0, x[j] + (Atb[j] - AtA[j] @ x) / AtA[j, j])
    return x


# --------------------------------------------------------------------------- formula variants
#
# Variants of the transient and speed formulas, evaluated here without touching src/: the peak
# is recombined from mlxfit.memory's own candidate phases (decode, last two prefill chunks) and
# their terms, the speed from mlxfit.speed's byte terms.
#   floor      transient activations >= floor * min(1, chunk / c0)   (Metal command-buffer floor)
#   softcap    x score arrays for hand-written softcapped attention (cfg.scores_always: Gemma 2)
#   act_linear float32 per-token copies of a gated-delta layer's value width (Qwen3.5/3.6/Next)
# Speed:
#   lookup     per-layer-input embedding tables (Gemma 3n/4 E-series) are row lookups, not read
#   kv_unfused KV read multiplier (and +per-layer cost) when decode attention is unfused (Gemma 2)
#   gqa_ultra  KV read multiplier 1 + g*gqa on Ultra chips when gqa > 4 (sdpa_vector_2pass)


def _linear_width(cfg: ModelConfig) -> int:
    return cfg.linear_v_heads * cfg.linear_v_dim


def peak_form(c: Case, cal: Calibration, ex: dict) -> float:
    m = load_model(c.desc)
    cfg, run = m.cfg, run_of(c)
    be = cal.backend("metal")
    _, _, total = run.schedule().chunks()
    d = decode_phase(cfg, run, be)
    best = d.total_over_weights
    for n in {total, total - 1}:
        if n < 1:
            continue
        ph = prefill_phase(cfg, run, be, n)
        t = {x.name: x.bytes for x in ph.terms}
        chunk = ph.terms[0].inputs["chunk"]
        A = t["activations"]
        if ex.get("floor"):
            A = max(A, ex["floor"] * 1e9 * min(1.0, chunk / ex.get("c0", 1.0)))
        S = t["attention_scores"] * (ex.get("softcap", 1.0) if cfg.scores_always else 1.0)
        lin = ex.get("act_linear", 0.0) * chunk * _linear_width(cfg) * 4
        tr = A + S + lin + sum(v for k, v in t.items() if k not in ("activations", "attention_scores"))
        best = max(best, ph.kv_bytes + tr)
    return (m.w.total_bytes + best) / 1e9


def _lookup_bytes(desc: str) -> int:
    doc = load_descriptor(desc)
    total = 0
    for name, dt, shape in doc["tensors"]:
        if ".embed_tokens_per_layer." in name:
            total += TensorInfo.of(name, dt, shape).nbytes
    return total


_lookup_cache: dict[str, int] = {}


def speed_feats(c: Case) -> dict:
    m = load_model(c.desc)
    run = run_of(c, c.P + c.G // 2)
    if c.desc not in _lookup_cache:
        _lookup_cache[c.desc] = _lookup_bytes(c.desc)
    a = m.cfg.attention_layers
    gqa = max((x.q_heads // max(x.kv_heads, 1) for x in a if not x.mla), default=1)
    unfused = m.cfg.scores_always or any(
        x.head_dim not in (64, 96, 128, 256) and not x.mla for x in a)
    return {"w": weights_read_term(m.cfg, m.w).bytes, "kv": kv_read_term(m.cfg, run).bytes,
            "lookup": _lookup_cache[c.desc], "L": m.cfg.num_layers,
            "Lm": sum(1 for ly in m.cfg.layers if ly.moe), "bw": bandwidth(c.machine) * 1e9,
            "ultra": "Ultra" in c.machine, "gqa": gqa, "unfused": unfused,
            "La": len(a)}


def tps_form(c: Case, dec: dict, ex: dict) -> float:
    f = speed_feats(c)
    w = f["w"] - (f["lookup"] if ex.get("lookup") else 0)
    kvf = 1.0
    if ex.get("kv_unfused") and f["unfused"]:
        kvf *= ex["kv_unfused"]
    if ex.get("gqa_ultra") and f["ultra"] and f["gqa"] > 4:
        kvf *= 1 + ex["gqa_ultra"] * f["gqa"]
    secs = (w + kvf * f["kv"]) / (dec["eta"] * f["bw"]) + dec["fixed_s"] + dec["per_layer_s"] * f["L"] \
        + dec["per_moe_layer_s"] * f["Lm"] + (ex.get("unfused_layer_s", 0.0) * f["La"] if f["unfused"] else 0)
    return c.G / ((c.G - 1) * secs)


def fit_peak_form(cases: list[Case], doc: dict, params: list[str], ex0: dict, ex_params: list[str],
                  bounds: dict) -> tuple[dict, dict]:
    cs = [c for c in cases if c.peak is not None]
    m0 = doc["backend"]["metal"]
    names = params + ex_params
    x0 = [(m0[p] if p in params else ex0.get(p, 0.0)) / SCALE.get(p, 1) for p in names]
    lo = [bounds[p][0] / SCALE.get(p, 1) for p in names]
    hi = [bounds[p][1] / SCALE.get(p, 1) for p in names]

    def split(x):
        vals = {p: float(v) * SCALE.get(p, 1) for p, v in zip(names, x)}
        return {p: vals[p] for p in params}, {**ex0, **{p: vals[p] for p in ex_params}}

    def fun(x):
        metal, ex = split(x)
        cal = cal_with(doc, metal)
        return np.array([(peak_form(c, cal, ex) - c.peak) / c.peak for c in cs])

    x = lm_fit(fun, x0, lo, hi)
    return split(x)


def fit_speed_form(cases: list[Case], ex: dict, dec_params=("eta", "per_layer_s", "per_moe_layer_s"),
                   ex_params=()) -> tuple[dict, dict]:
    """Relative-error least squares of the step time; nonlinear in the ex parameters."""
    cs = [c for c in cases if c.tps is not None]
    names = list(dec_params) + list(ex_params)
    x0 = {"eta": 0.85, "fixed_s": 0.0, "per_layer_s": 60e-6, "per_moe_layer_s": 40e-6,
          "kv_unfused": 2.0, "gqa_ultra": 0.1, "unfused_layer_s": 40e-6}
    sc = {"per_layer_s": 1e-6, "per_moe_layer_s": 1e-6, "fixed_s": 1e-3, "unfused_layer_s": 1e-6}
    bnd = {"eta": (0.3, 1.2), "fixed_s": (0, 0.01), "per_layer_s": (0, 500e-6),
           "per_moe_layer_s": (0, 500e-6), "kv_unfused": (1, 5), "gqa_ultra": (0, 1),
           "unfused_layer_s": (0, 500e-6)}

    def split(x):
        v = {p: float(a) * sc.get(p, 1) for p, a in zip(names, x)}
        dec = {"eta": 0.912, "fixed_s": 0.0, "per_layer_s": 0.0, "per_moe_layer_s": 0.0}
        dec.update({p: v[p] for p in dec_params})
        return dec, {**ex, **{p: v[p] for p in ex_params}}

    def fun(x):
        dec, e = split(x)
        return np.array([(tps_form(c, dec, e) - c.tps) / c.tps for c in cs])

    x = lm_fit(fun, [x0[p] / sc.get(p, 1) for p in names], [bnd[p][0] / sc.get(p, 1) for p in names],
               [bnd[p][1] / sc.get(p, 1) for p in names])
    return split(x)


# --------------------------------------------------------------------------- main


def load_cases() -> tuple[list[Case], list[Skipped]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    cases, skipped = [], []
    for i, r in enumerate(rows):
        c = map_row(i, r)
        (cases if isinstance(c, Case) else skipped).append(c)
    return cases, skipped


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--md")
    ap.add_argument("--rows")
    a = ap.parse_args(argv)
    cases, skipped = load_cases()
    doc = base_doc()
    cal = cal_with(doc)
    main_cases = [c for c in cases if not c.approx]
    res = evaluate(main_cases, cal)
    lines = ["## Shipped calibration", "", "### By family", *table(res, "family", ""), "",
             "### By prompt length", *table(res, "bucket", ""), "", "### By source",
             *table(res, "source", ""), ""]
    print("\n".join(lines))
    if a.rows:
        with open(a.rows, "w") as f:
            for d in res + evaluate([c for c in cases if c.approx], cal):
                f.write(json.dumps(d) + "\n")
    print(f"{len(cases)} runs evaluated ({len(main_cases)} main), {len(skipped)} skipped")
    for s in skipped:
        print(f"  skipped #{s.idx} {s.model}: {s.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
