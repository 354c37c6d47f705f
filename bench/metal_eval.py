"""mlxfit's Metal predictions against the published mlx-lm runs (bench/results/metal_published.jsonl).

For every run whose model we can describe exactly (config + mlx_lm.convert quantization), the
weights are the exact descriptor bytes (bench/metal_descriptors.py, or the built-in catalog), the
peak is ``mlxfit.estimate.solve.totals_at`` and the decode speed
``mlxfit.estimate.speed.predicted_decode_seconds`` with the machine's bandwidth
(``mlxfit.hardware.resolve.resolve_machine``).

mlx_lm.benchmark semantics (mlx_lm/benchmark.py, generate.py): a warmup generation, then
``--num-trials`` identical generations; "peak_memory" is mx.get_peak_memory()/1e9, never reset,
so it is the peak of one generation; "generation_tps" = G / (time from the first generated token
to the G-th), i.e. G tokens over G-1 decode steps, averaged over trials. So the predicted tok/s is
G / ((G-1) * t_step), with t_step at the mean decode context P + G/2. The caches end at P + G
tokens (Run(ctx=P+G, gen=G)).

Columns: "original" = calibration.toml before this evaluation (BENCHMARKS.md-only fit, old
formulas); "current" = whatever calibration.toml + src/ say now (mlxfit's own prediction);
F0/S0 = old formulas refit here; F2/S4 = the proposed formulas (emulated here; see "formula
variants" below), refit here.

Usage:
  /work/devenv/bin/python bench/metal_eval.py              # tables: original vs current
  /work/devenv/bin/python bench/metal_eval.py --fit        # + least-squares refit, LOSO holdout
  /work/devenv/bin/python bench/metal_eval.py --fit --md bench/results/metal_eval.md
  /work/devenv/bin/python bench/metal_eval.py --rows out.jsonl   # one line per evaluated run
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import re
import sys
from dataclasses import dataclass, replace
from functools import cache, lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))

from metal_descriptors import load_descriptor

from mlxfit.calibration.constants import Calibration, parse_calibration
from mlxfit.estimate.compute import decode_matmul_flops
from mlxfit.estimate.kernels import arch_gen
from mlxfit.estimate.memory import (
    Run,
    decode_phase,
    floor_scale,
    gated_delta_token_elems,
    prefill_phase,
)
from mlxfit.estimate.solve import totals_at
from mlxfit.estimate.speed import kv_read_term, predicted_decode_seconds, weights_read_term
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.model.config import ModelConfig
from mlxfit.model.inputs import WeightsRead, activation_bytes
from mlxfit.model.parse import parse_config
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import summarize_weights
from mlxfit.resources import data_path

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
    mlx: str = ""  # the run's MLX version (which attention kernels it had)


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
    "M3 Max": "M3 Max 40-core 64GB",  # 64 GB ships only with the 40-core bin
    "M4 Pro (Mac mini)": "M4 Pro 64GB",
    "M2 Ultra": "M2 Ultra 192GB",
    # issue 18: the base and Pro chips of PrismML-Eng/Bonsai-demo's community benchmarks
    "M3 (10-core GPU)": "M3 10-core 16GB",
    "M4 (10-core GPU)": "M4 10-core 24GB",
    "M4 Pro (20-core GPU)": "M4 Pro 20-core 64GB",
    "M1 Pro (16-core GPU)": "M1 Pro 16-core 32GB",
    # issue 25's added sources (weklund-agent/mlx_transformers_benchmark, itsmostafa,
    # john-rocky): settings.json / README state the GPU cores and memory
    "M4 Pro (20-core GPU, 64GB)": "M4 Pro 20-core 64GB",
    "M4 Max (40-core GPU, 128GB)": "M4 Max 128GB",
}


def _source(r: dict) -> str:
    s = r["source"]
    if s.startswith("github:guruswami"):
        return "guruswami"
    if s.startswith("github:defai-digital"):
        return "ax-engine"
    if "BENCHMARKS.md" in s:
        return "BENCHMARKS.md"
    if "community-benchmarks/ternary-bonsai" in s:
        return "Bonsai-demo"  # one community repo: 4 contributors' base and Pro Macs
    return "singles"


def _family(r: dict, desc: str) -> str:
    d = desc.lower()
    for key, fam in [
        ("ternary-bonsai-27b", "Qwen3.5/3.6/3.8 hybrid dense"), ("ternary-bonsai", "Qwen3 2-bit (Ternary-Bonsai)"),
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


def _default_step(r: dict) -> int:
    """mlx-lm's generate_step default: 512 before mlx-lm 0.22 (mlx-examples llms/mlx_lm), 2048
    since."""
    v = re.match(r"0\.(\d+)", r.get("mlx_lm_version") or "")
    return 512 if v and int(v.group(1)) < 22 else 2048


def map_row(i: int, r: dict) -> Case | Skipped:
    model, src = r["model"], _source(r)
    machine = MACHINE.get(r["chip"])
    step = r["prefill_step_size"] or _default_step(r)
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
        approx = (f"mlx-lm {r['mlx_lm_version']} (before 2025-03): older kernels"
                  if "chigkim" in r["source"] else "mlx/mlx-lm 0.21.4 (Feb 2025)")
    if model.startswith("4-bit Mistral 7B"):
        desc = "mlx-community/Mistral-7B-Instruct-v0.3-4bit"
        approx = "PR #40 post: repo, gen tokens, versions not stated (v0.3 4-bit, G=100 assumed)"
    if "1480" in r["source"] or "1781" in r["source"]:
        approx = approx or ""
    try:
        load_model(desc)
    except FileNotFoundError:
        return Skipped(i, model, f"no descriptor {desc}")
    tps = r["gen_tps"] if (G or 0) >= 8 and r["gen_tps"] and not no_tps(desc) else None
    return Case(i, src, _family(r, desc), desc, P, G, step, machine, r["peak_memory_gb"], tps,
                kv_bits=kv_bits, qstart=qstart, max_kv=max_kv, approx=approx,
                label=f"{desc.split('/')[-1]} p{P} g{G} s{step}",
                mlx=_mlx_of(r))


# Runs whose decode speed stays out of the tok/s fit and tables (their peaks are kept).
NO_TPS = {"Ternary-Bonsai": "2-bit packs: the decode model's efficiencies are fitted on 4-8 bit "
                            "kernels, and the M3 Air run throttles (trials fall 11.0 -> 5.8 tok/s)"}


def no_tps(desc: str) -> str:
    return next((why for k, why in NO_TPS.items() if k in desc), "")


def _mlx_of(r: dict) -> str:
    """The run's MLX version; when only mlx-lm's is published, its major.minor (mlx-lm's
    releases track MLX's minor: 0.31.3 ran on an MLX 0.31, before the 0.32.2 NAX kernel).
    '' (the reference MLX) when neither is published."""
    v = str(r.get("mlx_version") or "").split(" ")[0].split(".dev")[0]
    if v:
        return v
    lm = str(r.get("mlx_lm_version") or "").split(".")
    return ".".join(lm[:2]) if len(lm) >= 2 else ""


# --------------------------------------------------------------------------- model, prediction


@dataclass(frozen=True)
class Model:
    cfg: ModelConfig
    w: WeightsRead  # without per-layer lookup tables subtracted (tps_form applies that itself)
    w_native: WeightsRead  # as mlxfit.verbs.fit builds it (lookup_bytes where this mlxfit has the field)


@cache
def load_model(desc: str) -> Model:
    doc = load_descriptor(desc)
    tensors = [TensorInfo.of(n, d, s) for n, d, s in doc["tensors"]]
    ws = summarize_weights(tensors, doc["config"])
    cfg = parse_config(doc["config"], act_bytes=activation_bytes(tensors), where=desc)
    w = WeightsRead(ws.total_bytes, ws.expert_bytes, ws.embedding_bytes, ws.tied_embeddings)
    w_native = w
    if "lookup_bytes" in inspect.signature(WeightsRead).parameters:
        w_native = replace(w, lookup_bytes=sum(t.nbytes for t in tensors
                                               if "embed_tokens_per_layer" in t.name))
    return Model(cfg, w, w_native)


@cache
def bandwidth(machine: str) -> float:
    return resolve_machine(machine).bandwidth_gbs


def run_of(c: Case, ctx: int | None = None) -> Run:
    return Run(ctx=ctx or c.P + c.G, gen=c.G, prefill_step_size=c.step, kv_bits=c.kv_bits,
               quantized_kv_start=c.qstart, max_kv_size=c.max_kv, backend="metal",
               gpu_class=gpu_class_of(c.machine),  # issue 18: the machine's commit rule
               gpu_tier=resolve_machine(c.machine).gpu_tier,  # and its drain class
               # and its attention kernels (M5 + macOS 26: every published M5 run is on 26.4+)
               gpu_gen=arch_gen(resolve_machine(c.machine).gpu_arch), macos_major=26,
               mlx_version=c.mlx)


def predict_peak(c: Case, cal: Calibration) -> tuple[float, Any]:
    m = load_model(c.desc)
    t = totals_at(m.cfg, m.w.total_bytes, run_of(c), cal)
    return t.total / 1e9, t


def prefill_chip(machine: str):
    """The machine's compute figures (macOS 26), as prefill_eval gives them."""
    import prefill_eval  # bench helper beside this file (it imports this module)

    return prefill_eval.machine_and_compute(machine, 26)[1]


def step_seconds(c: Case, cal: Calibration) -> float:
    """mlxfit's own decode step (``speed.predicted_decode_seconds``: the Ultra factor from the
    machine name, the fused head dims of the metal backend, the chip's matmul peak)."""
    m = load_model(c.desc)
    run = run_of(c, c.P + c.G // 2)
    return predicted_decode_seconds(m.cfg, run, m.w_native, bandwidth(c.machine), cal, c.machine,
                                    matmul_flops=decode_matmul_flops(prefill_chip(c.machine)))[0]


def predict_tps(c: Case, cal: Calibration) -> float:
    # generation_tps = G tokens / (G-1) decode steps (the first token comes from the prompt step)
    return c.G / ((c.G - 1) * step_seconds(c, cal))


# --------------------------------------------------------------------------- calibration


def base_doc() -> dict:
    return tomllib.loads(data_path("calibration.toml").read_text())


# Constants added to mlxfit after this evaluation's formulas were first written (F2/S4 made
# native). Their neutral values switch the native terms off; extra keys are ignored by older code.
def _neutral_metal(m: dict) -> dict:
    return {"softcap_score_arrays": m["score_arrays"], "quantized_score_arrays": m["score_arrays"],
            "act_floor": 0.0, "act_floor_small": 0.0, "act_floor_m5": 0.0,
            "act_floor_tokens": 1.0, "act_linear": 0.0}


NEUTRAL_DECODE = {"kv_unfused": 1.0, "gqa_ultra": 0.0, "ultra_eta": 1.0}

# calibration.toml before this evaluation (fitted to BENCHMARKS.md's M4 Max rows only): the
# "original" column, and the start point of every fit (so fits do not depend on the current file).
ORIGINAL_METAL = {"act_hidden": 18.2, "act_ffn": 5.0, "act_q": 16.6, "act_moe": 3.9, "act_kv": 0.0,
                  "score_arrays": 1.0, "growth_copy_layers": 1.0, "base_bytes": 0.0}
ORIGINAL_DECODE = {"eta": 0.912, "fixed_s": 0.0, "per_layer_s": 63.6e-6, "per_moe_layer_s": 42.6e-6}


def cal_with(doc: dict, metal: dict | None = None, dec: dict | None = None,
             neutral: bool = False) -> Calibration:
    """The calibration ``doc`` with overrides. ``neutral``: the native F2/S4 terms (if this mlxfit
    has them) are switched off, so that peak_form/tps_form can apply them without counting twice.
    Keys missing from an older calibration.toml get their neutral values."""
    d = copy.deepcopy(doc)
    m = d["backend"]["metal"]
    m.update(metal or {})
    for k, v in _neutral_metal(m).items():
        if neutral or k not in m:
            m[k] = v
    for k, v in NEUTRAL_DECODE.items():
        if neutral or k not in d["decode"]:
            d["decode"][k] = v
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
        f = lambda x: "" if math.isnan(x) else f"{100 * x:.1f}%"
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


MEM_BOUNDS = {"act_hidden": (0, 80), "act_ffn": (0, 30), "act_q": (0, 80), "act_moe": (0, 30),
              "act_kv": (0, 8), "score_arrays": (0.5, 4), "growth_copy_layers": (0, 8),
              "base_bytes": (0, 2e9), "mla_score_arrays": (0, 4), "mla_kv_arrays": (0, 4)}
SCALE = {"base_bytes": 1e8}


# --------------------------------------------------------------------------- formula variants
#
# Variants of the transient and speed formulas, evaluated here without touching src/: the peak
# is recombined from mlxfit.estimate.memory's own candidate phases (decode, last two prefill chunks) and
# their terms, the speed from mlxfit.estimate.speed's byte terms.
#   floor      transient activations >= floor * min(1, chunk / c0)   (Metal command-buffer floor)
#   softcap    x score arrays for hand-written softcapped attention (cfg.scores_always: Gemma 2)
#   act_linear float32 per-token copies of a gated-delta layer's value width (Qwen3.5/3.6/Next)
# Speed:
#   lookup     per-layer-input embedding tables (Gemma 3n/4 E-series) are row lookups, not read
#   kv_unfused KV read multiplier (and +per-layer cost) when decode attention is unfused (Gemma 2)
#   gqa_ultra  KV read multiplier 1 + g*gqa on Ultra chips when gqa > 4 (sdpa_vector_2pass)
#   ultra_eta  bandwidth efficiency multiplier for Ultra (two-die) chips


def _linear_width(cfg: ModelConfig) -> int:
    return cfg.linear_v_heads * cfg.linear_v_dim


def _linear_bytes_per_token(cfg: ModelConfig, ex: dict) -> float:
    """The gated-delta feature act_linear multiplies: issue 26's ("lin_mech") is what one layer
    writes per token on the kernel path (memory.gated_delta_token_elems, the shipped term);
    before it, float32 copies of the value width Hv x Dv."""
    if ex.get("lin_mech"):
        return gated_delta_token_elems(cfg) * cfg.act_bytes
    return _linear_width(cfg) * 4


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
        ph = prefill_phase(cfg, run, be, n, m.w.total_bytes)
        t = {x.name: x.bytes for x in ph.terms}
        chunk = ph.terms[0].inputs["chunk"]
        A = t["activations"]
        if ex.get("cb"):  # issue 18: the command-buffer mechanism instead of the floor
            A = cb_activations(c, cfg, m.w.total_bytes, run, ph, n, A, ex)
        if ex.get("floor"):
            # the shipped floor: per drain class (F2k) and scaled to the chip's commit rule
            fl = ex.get(f"floor_{drain_class(c.machine)}", ex["floor"])
            scale, _ = floor_scale(cfg, chunk, be, run, m.w.total_bytes)
            A = max(A, fl * 1e9 * min(1.0, chunk / ex.get("c0", 1.0)) * scale)
        S = t["attention_scores"] * (ex.get("softcap", 1.0) if cfg.scores_always else 1.0)
        lin = ex.get("act_linear", 0.0) * chunk * _linear_bytes_per_token(cfg, ex)
        tr = A + S + lin + sum(v for k, v in t.items() if k not in ("activations", "attention_scores"))
        best = max(best, ph.kv_bytes + tr)
    return (m.w.total_bytes + best) / 1e9


# --------------------------------------------------------------------------- issue 18: command buffers
#
# The Metal transient as MLX's scheduler makes it (mlxfit.estimate.command_buffers): inputs of ops
# whose command buffer is pending, the commit rule of the chip's GPU class, and a drain (how many
# committed buffers are still pending) fitted per chip class.


@cache
def gpu_class_of(machine: str) -> str:
    return resolve_machine(machine).gpu_class


def chip_class(machine: str) -> str:
    """'d' Ultra, 'm5' (an 's' GPU with neural accelerators), 's' Pro/Max, 'g' base."""
    if "Ultra" in machine:
        return "d"
    if machine.startswith("M5"):
        return "m5"
    return "s" if ("Max" in machine or "Pro" in machine) else "g"


def chip_group(machine: str) -> str:
    """The accuracy tables' chip class (issue 18): Ultra, Max, M5 Max, Pro, base."""
    if "Ultra" in machine:
        return "Ultra"
    if machine.startswith("M5"):
        return "M5 (Max)"
    return "Max" if "Max" in machine else ("Pro" if "Pro" in machine else "base")


@cache
def drain_class(machine: str) -> str:
    """The drain classes of issue 18: 'big' (Max and Ultra GPUs), 'small' (base and Pro), 'm5'
    (mlxfit.estimate.command_buffers.drain_class, from the machine's SKU)."""
    from mlxfit.estimate.command_buffers import drain_class as rule

    m = resolve_machine(machine)
    return rule(m.gpu_class, arch_gen(m.gpu_arch), m.gpu_tier)


def cb_inflight_for(machine: str, ex: dict) -> float:
    return ex.get(f"cb_inflight_{drain_class(machine)}", ex.get("cb_inflight", 0.0))


def cb_activations(c: Case, cfg: ModelConfig, weights: int, run: Run, ph, n: int, A: float,
                   ex: dict) -> float:
    from mlxfit.estimate import command_buffers as cbm

    s = run.schedule()
    chunk = s.chunk_size(n)
    groups = cfg.attn_groups_computed_in_prefill
    keys = s.keys_seen(groups[0][0], n) if groups else 0
    letter = "s" if chip_class(c.machine) == "m5" else chip_class(c.machine)
    ops, mb = cbm.commit_rule(letter)
    held = cbm.held_bytes(cbm.buffer_sizes(cfg, weights, chunk, keys, ops, mb),
                          cb_inflight_for(c.machine, ex))
    return A + held if ex.get("cb_sum") else max(A, held)


def _lookup_bytes(desc: str) -> int:
    doc = load_descriptor(desc)
    total = 0
    for name, dt, shape in doc["tensors"]:
        if ".embed_tokens_per_layer." in name:
            total += TensorInfo.of(name, dt, shape).nbytes
    return total


_lookup_cache: dict[str, int] = {}


@lru_cache(maxsize=1)
def _neutral_decode():
    return cal_with(base_doc(), neutral=True).decode


def _kv_read_plain(cfg: ModelConfig, run: Run) -> int:
    """KV bytes read per decode step, without the (possibly native) unfused/GQA multipliers."""
    if "cal" in inspect.signature(kv_read_term).parameters:
        fused = cal_with(base_doc(), neutral=True).backend("metal").fused_decode_head_dims
        return kv_read_term(cfg, run, _neutral_decode(), fused_decode=fused).bytes
    return kv_read_term(cfg, run).bytes


_feats: dict[tuple, dict] = {}


def speed_feats(c: Case) -> dict:
    key = (c.desc, c.P, c.G, c.machine)
    if key not in _feats:
        _feats[key] = _speed_feats(c)
    return _feats[key]


def _speed_feats(c: Case) -> dict:
    m = load_model(c.desc)
    run = run_of(c, c.P + c.G // 2)
    if c.desc not in _lookup_cache:
        _lookup_cache[c.desc] = _lookup_bytes(c.desc)
    a = m.cfg.attention_layers
    gqa = max((x.q_heads // max(x.kv_heads, 1) for x in a if not x.mla), default=1)
    unfused = m.cfg.scores_always or any(
        x.head_dim not in (64, 96, 128, 256) and not x.mla for x in a)
    return {"w": weights_read_term(m.cfg, m.w).bytes, "kv": _kv_read_plain(m.cfg, run),
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
    eta = dec["eta"] * (ex.get("ultra_eta", 1.0) if f["ultra"] else 1.0)
    secs = (w + kvf * f["kv"]) / (eta * f["bw"]) + dec["fixed_s"] + dec["per_layer_s"] * f["L"] \
        + dec["per_moe_layer_s"] * f["Lm"] + (ex.get("unfused_layer_s", 0.0) * f["La"] if f["unfused"] else 0)
    return c.G / ((c.G - 1) * secs)


def fit_peak_form(cases: list[Case], doc: dict, params: list[str], ex0: dict, ex_params: list[str],
                  bounds: dict, start: dict | None = None) -> tuple[dict, dict]:
    """``start``: start values by name (a warm start from an earlier fit; issue 26's LOO)."""
    cs = [c for c in cases if c.peak is not None]
    m0 = {**doc["backend"]["metal"], **ORIGINAL_METAL, **(start or {})}
    ex0 = {**ex0, **{k: v for k, v in (start or {}).items() if k in ex0}}
    present = {drain_class(c.machine) for c in cs}
    ex_params = [p for p in ex_params if CLASS_PARAMS.get(p, next(iter(present))) in present]
    ex0 = {k: v for k, v in ex0.items() if CLASS_PARAMS.get(k, next(iter(present))) in present}
    names = params + ex_params
    x0 = [(m0[p] if p in params else ex0.get(p, 0.0)) / SCALE.get(p, 1) for p in names]
    lo = [bounds[p][0] / SCALE.get(p, 1) for p in names]
    hi = [bounds[p][1] / SCALE.get(p, 1) for p in names]

    def split(x):
        vals = {p: float(v) * SCALE.get(p, 1) for p, v in zip(names, x)}
        return {p: vals[p] for p in params}, {**ex0, **{p: vals[p] for p in ex_params}}

    def fun(x):
        metal, ex = split(x)
        cal = cal_with(doc, metal, neutral=True)
        return np.array([(peak_form(c, cal, ex) - c.peak) / c.peak for c in cs])

    x = lm_fit(fun, x0, lo, hi)
    return split(x)


def fit_speed_form(cases: list[Case], ex: dict, dec_params=("eta", "per_layer_s", "per_moe_layer_s"),
                   ex_params=()) -> tuple[dict, dict]:
    """Relative-error least squares of the step time; nonlinear in the ex parameters."""
    cs = [c for c in cases if c.tps is not None]
    names = list(dec_params) + list(ex_params)
    x0 = {"eta": 0.85, "fixed_s": 0.0, "per_layer_s": 60e-6, "per_moe_layer_s": 40e-6,
          "kv_unfused": 2.0, "gqa_ultra": 0.1, "unfused_layer_s": 40e-6, "ultra_eta": 1.0}
    sc = {"per_layer_s": 1e-6, "per_moe_layer_s": 1e-6, "fixed_s": 1e-3, "unfused_layer_s": 1e-6}
    bnd = {"eta": (0.3, 1.2), "fixed_s": (0, 0.01), "per_layer_s": (0, 500e-6),
           "per_moe_layer_s": (0, 500e-6), "kv_unfused": (1, 5), "gqa_ultra": (0, 1),
           "unfused_layer_s": (0, 500e-6), "ultra_eta": (0.5, 1.5)}

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


EXCLUDE_FIT = {
    "DeepSeek-V3.2": "not fitted: mlxfit had no deepseek_v32 family when the constants were fitted "
                     "(it was sized as plain attention); weights exact",
    "Qwen3.5-9B-4bit": "ax-engine's Qwen3.5-9B-MLX-4bit peaks sit 0.91 GB above the text-model weights "
                       "at p128 (= the repo's bf16 vision tower): that run loaded it",
}
GEN_MARK = "<!-- everything below is generated by: python bench/metal_eval.py --fit --md bench/results/metal_eval.md -->"
SOURCES = ["guruswami", "ax-engine", "BENCHMARKS.md", "singles", "Bonsai-demo"]
P7 = ["act_hidden", "act_ffn", "act_q", "act_moe", "score_arrays", "growth_copy_layers", "base_bytes"]
FORM_BOUNDS = {**MEM_BOUNDS, "floor": (0, 3), "c0": (1, 4096), "softcap": (1, 4), "act_linear": (0, 200),
               "floor_small": (0, 3), "floor_m5": (0, 3),
               "cb_inflight": (0, 11), "cb_inflight_small": (0, 11), "cb_inflight_m5": (0, 11)}
# The per-class parameters (issue 18) and the drain class each belongs to: a fit whose runs have
# none of that class leaves the parameter out (the class then takes the shared value).
CLASS_PARAMS = {"floor_small": "small", "floor_m5": "m5", "cb_inflight_small": "small",
                "cb_inflight_m5": "m5"}
MEM_FORMS = {  # name: (calibration constants fitted, extra formula parameters, their start values)
    "F0": (P7, [], {}),
    "F2": (P7, ["floor", "c0", "softcap", "act_linear"],
           {"floor": 0.6, "c0": 500.0, "softcap": 2.0, "act_linear": 20.0}),
    # issue 18 (cb_* below): the command-buffer mechanism, one drain for every chip ...
    "F3": (P7, ["cb_inflight", "softcap", "act_linear"],
           {"cb": 1.0, "cb_inflight": 8.0, "softcap": 2.0, "act_linear": 20.0}),
    # ... and a drain per chip class: Max/Ultra (cb_inflight), base/Pro, M5
    "F3k": (P7, ["cb_inflight", "cb_inflight_small", "cb_inflight_m5", "softcap", "act_linear"],
            {"cb": 1.0, "cb_inflight": 8.0, "cb_inflight_small": 8.0, "cb_inflight_m5": 8.0,
             "softcap": 2.0, "act_linear": 20.0}),
    # the shipped floor with a level per chip class: Max/Ultra (floor), base/Pro, M5
    "F2k": (P7, ["floor", "c0", "floor_small", "floor_m5", "softcap", "act_linear"],
            {"floor": 0.6, "c0": 500.0, "floor_small": 0.6, "floor_m5": 0.6, "softcap": 2.0,
             "act_linear": 20.0}),
}
# Issue 26's forms, fitted by --loo-rows only (through peak_fast; --fit keeps MEM_FORMS).
LOO_MEM_FORMS = {
    **MEM_FORMS,
    # issue 26 (shipped): F2k with the gated-delta term sized by what one layer writes per token
    # (q/k/v/z projections, conv, norms: memory.gated_delta_token_elems); act_linear = layers' worth
    "F2kg": (P7, ["floor", "c0", "floor_small", "floor_m5", "softcap", "act_linear"],
             {"floor": 0.6, "c0": 500.0, "floor_small": 0.6, "floor_m5": 0.6, "softcap": 2.0,
              "act_linear": 5.0, "lin_mech": 1.0}),
    # issue 26: F3k with F2kg's gated-delta term
    "F3kg": (P7, ["cb_inflight", "cb_inflight_small", "cb_inflight_m5", "softcap", "act_linear"],
             {"cb": 1.0, "cb_inflight": 8.0, "cb_inflight_small": 8.0, "cb_inflight_m5": 8.0,
              "softcap": 2.0, "act_linear": 5.0, "lin_mech": 1.0}),
}
DEC4 = ("eta", "fixed_s", "per_layer_s", "per_moe_layer_s")
SPD_FORMS = {  # name: (extra formula parameters fitted, fixed switches)
    "S0": ((), {}),
    "S4": (("kv_unfused", "gqa_ultra", "ultra_eta"), {"lookup": 1}),
}


def excluded(c: Case) -> str:
    return next((why for k, why in EXCLUDE_FIT.items() if k in c.desc), "")


def errs(rows, fn, kind):
    out = []
    for c in rows:
        meas = c.peak if kind == "peak" else c.tps
        if meas is not None:
            out.append((fn(c) - meas) / meas)
    return out


def fmt_stats(e) -> str:
    if not e:
        return "n=0"
    a = np.abs(e)
    return (f"n={len(e)} median {100 * np.median(a):.2f}% p90 {100 * np.quantile(a, .9):.2f}% "
            f"max {100 * a.max():.1f}% bias {100 * np.median(e):+.2f}%")


def grouped_table(cases, fns: dict, kind: str, key) -> list[str]:
    groups: dict[str, list[Case]] = {}
    for c in cases:
        groups.setdefault(key(c), []).append(c)
    names = list(fns)
    hdr = "| group | n | " + " | ".join(f"{n} med | {n} p90" + (f" | {n} max" if kind == "peak" else "")
                                        for n in names) + " |"
    ncol = 2 + len(names) * (3 if kind == "peak" else 2)
    out = [hdr, "|---|" + "---:|" * (ncol - 1)]
    order = sorted(groups, key=lambda g: (-len(groups[g]), g)) + ["**ALL**"]
    for g in order:
        rows = cases if g == "**ALL**" else groups[g]
        cells = []
        n = 0
        for name in names:
            e = errs(rows, fns[name], kind)
            n = len(e)
            if not e:
                cells += [""] * (3 if kind == "peak" else 2)
                continue
            a = np.abs(e)
            cells += [f"{100 * np.median(a):.1f}%", f"{100 * np.quantile(a, .9):.1f}%"]
            if kind == "peak":
                cells.append(f"{100 * a.max():.1f}%")
        if n:
            out.append(f"| {g} | {n} | " + " | ".join(cells) + " |")
    return out


def _peak_of(c: Case, cal: Calibration, ex: dict) -> float:
    return peak_form(c, cal, ex)


def _tps_of(c: Case, dec: dict, ex: dict) -> float:
    return tps_form(c, dec, ex)


def fit_all(fitset, doc, skip=()):
    mem = {name: fit_peak_form(fitset, doc, p, ex0, ep, FORM_BOUNDS)
           for name, (p, ep, ex0) in MEM_FORMS.items() if name not in skip}
    spd = {name: fit_speed_form(fitset, sw, DEC4, ep) for name, (ep, sw) in SPD_FORMS.items()}
    return mem, spd


# --------------------------------------------------------------------------- issue 18: accuracy tables
#
# Per chip class and per family kind, in-sample (the shipped calibration, "current") and
# leave-one-source-out (each form refitted without the held-out source), plus the issue's
# small-model check: models under 4B parameters at prompts under 4K, median signed error.

LOSO_ERRS: dict[tuple[str, str], list[tuple[Case, float]]] = {}
SMALL_PARAMS, SMALL_PROMPT = 4e9, 4096


def family_kind(c: Case) -> str:
    cfg = load_model(c.desc).cfg
    if any(a.mla is not None for a in cfg.attention_layers):
        return "MLA"
    if cfg.linear_v_heads or cfg.ssm_heads:
        return "hybrid"
    if any(a.cache.name == "rotating" for a in cfg.attention_layers):
        return "sliding"
    return "MoE" if cfg.is_moe else "dense"


@cache
def param_count(desc: str) -> int:
    doc = load_descriptor(desc)
    tensors = [TensorInfo.of(n, d, s) for n, d, s in doc["tensors"]]
    return summarize_weights(tensors, doc["config"]).param_count


def _cells(e: list[float]) -> str:
    if not e:
        return "| | | | |"
    a = np.abs(e)
    return (f"| {len(e)} | {100 * np.median(a):.1f}% | {100 * np.quantile(a, .9):.1f}% | "
            f"{100 * a.max():.1f}% |")


def _grouped(pairs: list[tuple[Case, float]], key) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for c, e in pairs:
        out.setdefault(key(c), []).append(e)
    return out


def issue18_tables(fitset: list[Case], fns_peak: dict) -> list[str]:
    """Markdown: peak and tok/s accuracy by chip class and family kind, in-sample and LOSO."""
    L = ["## Accuracy by chip class and family kind (issue 18)", "",
         ("In-sample = the shipped calibration (`current`); LOSO = the form refitted with the "
          "run's source held out (peak F2 = shipped formulas, F2k = its floor per chip class, "
          "F3/F3k = the command-buffer "
          "mechanism; tok/s S4u = shipped decode formula). Errors |pred-meas|/meas."), ""]
    cur = fns_peak["current"]
    ins = [(c, (cur(c) - c.peak) / c.peak) for c in fitset if c.peak is not None]
    tps_ins = [(c, (predict_tps(c, cal_with(base_doc())) - c.tps) / c.tps)
               for c in fitset if c.tps is not None]
    for title, key in (("chip class", lambda c: chip_group(c.machine)),
                       ("family kind", family_kind)):
        cols = [("peak in-sample", ins)] + [
            (f"peak LOSO {k[1]}", v) for k, v in LOSO_ERRS.items() if k[0] == "peak"
            and k[1] in ("F2", "F2k", "F3", "F3k")] + [
            ("tok/s in-sample", tps_ins)] + [
            (f"tok/s LOSO {k[1]}", v) for k, v in LOSO_ERRS.items() if k == ("tps", "S4u")]
        L += [f"### By {title}", "",
              "| " + title + " | " + " | ".join(f"{n} n | med | p90 | max" for n, _ in cols) + " |",
              "|---|" + "---:|" * (4 * len(cols))]
        groups = sorted({key(c) for c in fitset})
        for g in groups + ["**ALL**"]:
            row = f"| {g} "
            for _, pairs in cols:
                gp = pairs if g == "**ALL**" else _grouped(pairs, key).get(g, [])
                e = [x for _, x in gp] if g == "**ALL**" else gp
                row += _cells(e)[:-1]
            L.append(row + "|")
        L.append("")
    L += ["### Small models (< 4B parameters) at prompts < 4K: median signed peak error", "",
          ("(One published run is of a model under 4B parameters: Ternary-Bonsai-1.7B at 512 "
           "tokens on an M3; the second line of each pair takes every model under 5.2B: also "
           "Qwen3-4B, Ternary-Bonsai-4B, Gemma-4 E2B.)"), ""]
    for name, pairs in [("in-sample current", ins)] + [
            (f"LOSO {k[1]}", v) for k, v in LOSO_ERRS.items() if k[0] == "peak"]:
        for label, limit in (("< 4B", SMALL_PARAMS), ("< 5.2B", 5.2e9)):
            e = [x for c, x in pairs if param_count(c.desc) < limit and c.P < SMALL_PROMPT]
            L.append(f"- {name}, {label}: n={len(e)} median signed "
                     + (f"{100 * np.median(e):+.2f}%" if e else "n/a"))
    L.append("")
    return L


# --------------------------------------------------------------------------- issue 26: peak LOO rows
#
# Per run: the shipped prediction, and each peak form's in-sample, leave-one-source-out (LOSO) and
# leave-one-family-kind-out (LOFKO) predictions; every fold refits all the form's constants on the
# other runs, warm-started from the form's full-data fit. One JSON line per run ("metric": "peak").

# before and after issue 26's gated-delta term, and the command-buffer mechanism with a drain per
# chip class in place of the floor (issue 18's F3k, with the same gated-delta term: F3kg)
LOO_PEAK_FORMS = ("F2k", "F2kg", "F3kg")
SHIPPED_PEAK_FORM = "F2kg"


# peak_form is linear in P7's constants within each candidate phase (each term is a constant times
# a byte count that does not depend on it), so a phase is kept as a basis: its terms with every P7
# constant at 0, and each term's slope in each constant. The floor, the softcap, act_linear and the
# max over phases are applied as peak_form applies them. ~100x faster than peak_form in a fit;
# peak_basis_check compares the two.
TERM_GROUPS = ("activations", "attention_scores", "other")


@dataclass(frozen=True)
class PhaseBasis:
    kv: float
    prefill: bool
    n: int  # the prefill chunk's index (0: decode)
    chunk: int
    scale: float  # floor_scale: the chip's commit rule over the fitted one
    terms: dict[str, np.ndarray]  # group -> [value at 0, slope per P7 constant...]


def _phase_groups(ph) -> dict[str, float]:
    t = {x.name: float(x.bytes) for x in ph.terms}
    return {"activations": t.pop("activations", 0.0),
            "attention_scores": t.pop("attention_scores", 0.0), "other": sum(t.values())}


_BASES: dict[int, tuple[PhaseBasis, ...]] = {}


def peak_basis(c: Case) -> tuple[PhaseBasis, ...]:
    if c.idx not in _BASES:
        _BASES[c.idx] = _peak_basis(c)
    return _BASES[c.idx]


def _peak_basis(c: Case) -> tuple[PhaseBasis, ...]:
    m = load_model(c.desc)
    cfg, run = m.cfg, run_of(c)
    _, _, total = run.schedule().chunks()
    doc = base_doc()
    zero = {p: 0.0 for p in P7}
    cals = [cal_with(doc, zero, neutral=True)] + [
        cal_with(doc, {**zero, p: SCALE.get(p, 1.0)}, neutral=True) for p in P7]
    ns = [None] + [n for n in sorted({total, total - 1}) if n >= 1]
    out = []
    for n in ns:
        phases = [decode_phase(cfg, run, cal.backend("metal")) if n is None else
                  prefill_phase(cfg, run, cal.backend("metal"), n, m.w.total_bytes)
                  for cal in cals]
        groups = [_phase_groups(ph) for ph in phases]
        terms = {g: np.array([groups[0][g]] + [(gk[g] - groups[0][g]) / SCALE.get(p, 1.0)
                                               for p, gk in zip(P7, groups[1:])])
                 for g in TERM_GROUPS}
        chunk = phases[0].terms[0].inputs.get("chunk", 1) if n is not None else 1
        scale = (floor_scale(cfg, chunk, cals[0].backend("metal"), run, m.w.total_bytes)[0]
                 if n is not None else 1.0)
        out.append(PhaseBasis(float(phases[0].kv_bytes), n is not None, n or 0, chunk, scale,
                              terms))
    return tuple(out)


_RUNS: dict[int, Run] = {}


def _run_of_case(c: Case) -> Run:
    if c.idx not in _RUNS:
        _RUNS[c.idx] = run_of(c)
    return _RUNS[c.idx]


def peak_fast(c: Case, metal: dict, ex: dict) -> float:
    """peak_form(c, cal_with(doc, metal, neutral=True), ex) from the case's basis."""
    m = load_model(c.desc)
    x = np.array([1.0] + [metal[p] for p in P7])
    softcap = ex.get("softcap", 1.0) if m.cfg.scores_always else 1.0
    best = -math.inf
    for ph in peak_basis(c):
        A, S, O = (float(ph.terms[g] @ x) for g in TERM_GROUPS)
        if not ph.prefill:
            best = max(best, ph.kv + A + S + O)
            continue
        A = int(A)
        if ex.get("cb"):  # the command-buffer mechanism (F3, F3k)
            A = cb_activations(c, m.cfg, m.w.total_bytes, _run_of_case(c), None, ph.n, A, ex)
        if ex.get("floor"):
            fl = ex.get(f"floor_{drain_class(c.machine)}", ex["floor"])
            A = max(A, fl * 1e9 * min(1.0, ph.chunk / ex.get("c0", 1.0)) * ph.scale)
        lin = ex.get("act_linear", 0.0) * ph.chunk * _linear_bytes_per_token(m.cfg, ex)
        best = max(best, ph.kv + A + S * softcap + lin + O)
    return (m.w.total_bytes + best) / 1e9


def fit_peak_fast(cases: list[Case], form: str, start: dict | None = None) -> tuple[dict, dict]:
    """fit_peak_form through peak_fast."""
    params, ex_params, ex0 = LOO_MEM_FORMS[form]
    cs = [c for c in cases if c.peak is not None]
    # A class's floor is fitted only where that class has runs without gated-delta layers: on a
    # hybrid at a fixed chunk the floor and the gated-delta term are both constant in the
    # context, so hybrid runs alone trade one for the other (holding ax-engine out left the M5
    # floor to Qwen3.6 ladders, which put it at 0.05 GB and the M5 small models at -16 %).
    present = {drain_class(c.machine) for c in cs if family_kind(c) != "hybrid"}
    ex_params = [p for p in ex_params if CLASS_PARAMS.get(p, next(iter(present))) in present]
    ex0 = {k: v for k, v in ex0.items() if CLASS_PARAMS.get(k, next(iter(present))) in present}
    m0 = {**base_doc()["backend"]["metal"], **ORIGINAL_METAL, **(start or {})}
    ex0 = {**ex0, **{k: v for k, v in (start or {}).items() if k in ex0}}
    names = params + ex_params
    x0 = [(m0[p] if p in params else ex0.get(p, 0.0)) / SCALE.get(p, 1) for p in names]
    lo = [FORM_BOUNDS[p][0] / SCALE.get(p, 1) for p in names]
    hi = [FORM_BOUNDS[p][1] / SCALE.get(p, 1) for p in names]
    meas = np.array([c.peak for c in cs])

    def split(x):
        vals = {p: float(v) * SCALE.get(p, 1) for p, v in zip(names, x)}
        return {p: vals[p] for p in params}, {**ex0, **{p: vals[p] for p in ex_params}}

    def fun(x):
        metal, ex = split(x)
        return np.array([peak_fast(c, metal, ex) for c in cs]) / meas - 1

    return split(lm_fit(fun, x0, lo, hi, iters=200))


def peak_basis_check(cases: list[Case], doc: dict, fitted: tuple[dict, dict]) -> float:
    """Largest |peak_fast - peak_form| / measured over the cases at the fitted constants."""
    metal, ex = fitted
    cal = cal_with(doc, metal, neutral=True)
    return max(abs(peak_fast(c, metal, ex) - peak_form(c, cal, ex)) / c.peak
               for c in cases if c.peak is not None)


def _fit_peak_named(cases: list[Case], doc: dict, form: str, start: dict | None = None):
    return fit_peak_fast(cases, form, start)


def _peak_fn(doc: dict, fitted: tuple[dict, dict]):
    metal, ex = fitted
    return partial(peak_fast, metal=metal, ex=ex)


def peak_loo_predictions(fitset: list[Case], doc: dict, form: str,
                         log=print) -> dict[int, dict[str, float]]:
    """{case idx: {"in_sample", "loso", "lofko"}} for one peak form."""
    cs = [c for c in fitset if c.peak is not None]
    full = _fit_peak_named(cs, doc, form)
    log(f"  {form} full fit: " + ", ".join(f"{k} = {v:.4g}" for k, v in {**full[0],
                                                                          **full[1]}.items())
        + f"; basis vs peak_form max {100 * peak_basis_check(cs, doc, full):.4f} %",
        file=sys.stderr)
    start = {**full[0], **full[1]}
    fn = _peak_fn(doc, full)
    out = {c.idx: {"in_sample": fn(c)} for c in cs}
    for kind, key in (("loso", lambda c: c.source), ("lofko", family_kind)):
        for g in sorted({key(c) for c in cs}):
            held = [c for c in cs if key(c) == g]
            train = [c for c in cs if key(c) != g]
            # A constant no training run depends on keeps the form's own start value: a warm
            # start from the full fit would carry the held-out runs' value into the fold.
            fitted = LOO_MEM_FORMS[form][0] + LOO_MEM_FORMS[form][1]
            blind = [p for p in start if p in fitted and not _identified(train, full, p)]
            warm = {p: v for p, v in start.items() if p not in blind}
            log(f"  {form} {kind}: holding out {g} ({len(held)} runs)"
                + (f"; not identified: {', '.join(blind)}" if blind else ""), file=sys.stderr)
            fn = _peak_fn(doc, _fit_peak_named(train, doc, form, warm))
            for c in held:
                out[c.idx][kind] = fn(c)
    return out


def _identified(cases: list[Case], fitted: tuple[dict, dict], name: str) -> bool:
    """Whether some run's predicted peak moves with the constant ``name`` (taken to its upper
    bound: a constant under a max, such as act_q beside the floor, moves nothing near 0)."""
    metal, ex = fitted
    v = FORM_BOUNDS[name][1] if name in FORM_BOUNDS else 2 * {**metal, **ex}[name] + 1
    bumped = ({**metal, name: v}, ex) if name in metal else (metal, {**ex, name: v})
    return any(abs(peak_fast(c, *bumped) - peak_fast(c, metal, ex)) > 1e-9 for c in cases)


def peak_loo_rows(fitset: list[Case], doc: dict, forms=LOO_PEAK_FORMS) -> list[dict]:
    cal0 = cal_with(doc)
    preds = {f: peak_loo_predictions(fitset, doc, f) for f in forms}
    rows = []
    for c in fitset:
        if c.peak is None:
            continue
        shipped = preds.get(SHIPPED_PEAK_FORM, preds[forms[-1]])[c.idx]
        rows.append({"metric": "peak", "idx": c.idx, "label": c.label, "desc": c.desc,
                     "source": c.source, "chip_class": chip_group(c.machine),
                     "machine": c.machine, "family_kind": family_kind(c), "family": c.family,
                     "params_b": round(param_count(c.desc) / 1e9, 2), "prompt": c.P,
                     "context": c.P + c.G, "prefill_step": c.step, "measured": c.peak,
                     "predicted": predict_peak(c, cal0)[0], **shipped,
                     "forms": {f: preds[f][c.idx] for f in forms}})
    return rows


def peak_loo_summary(rows: list[dict], forms=LOO_PEAK_FORMS) -> list[str]:
    """Markdown: in-sample / LOSO / LOFKO |error| median, p90, max per form, by chip class and
    family kind; the worst held-out runs; the Qwen3.5/3.6 hybrid rows."""
    def err(r, form, kind):
        return (r["forms"][form][kind] - r["measured"]) / r["measured"]

    def cell(rs, form, kind):
        a = np.abs([err(r, form, kind) for r in rs])
        return (f"{100 * np.median(a):.2f} / {100 * np.quantile(a, .9):.2f} / "
                f"{100 * a.max():.1f} %") if len(a) else ""

    L = ["| segment | runs | " + " | ".join(f"{f} {k}" for f in forms
                                            for k in ("in-sample", "LOSO", "LOFKO")) + " |",
         "|---|---:|" + "---|" * (3 * len(forms))]
    segs = [("all", rows)]
    for key in ("chip_class", "family_kind"):
        for g in sorted({r[key] for r in rows}):
            segs.append((g, [r for r in rows if r[key] == g]))
    for name, rs in segs:
        L.append(f"| {name} | {len(rs)} | " + " | ".join(
            cell(rs, f, k) for f in forms for k in ("in_sample", "loso", "lofko")) + " |")
    last = SHIPPED_PEAK_FORM if SHIPPED_PEAK_FORM in forms else forms[-1]
    L += ["", f"Worst held-out runs ({last}):", ""]
    for kind in ("loso", "lofko"):
        worst = sorted(rows, key=lambda r: -abs(err(r, last, kind)))[:5]
        L += [f"- {kind.upper()}: " + "; ".join(
            f"{r['label']} on {r['machine']} {100 * err(r, last, kind):+.1f} %" for r in worst)]
    return L


def peak_loo_main(path: str, fitset: list[Case], doc: dict) -> None:
    """--loo-rows: the peak rows (one JSON line per run) to ``path``, the summary to stdout."""
    rows = peak_loo_rows(fitset, doc)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print("\n".join(peak_loo_summary(rows)))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true", help="refit, leave-one-source-out, report")
    ap.add_argument("--md", help="write the markdown report here")
    ap.add_argument("--rows", help="write one JSON line per evaluated run (shipped calibration)")
    ap.add_argument("--loo-rows", help="one JSON line per run here: with --speed, each run and "
                                       "speed quantity with its in-sample, LOSO and LOFKO "
                                       "predictions (format: bench/speed_eval.py's docstring); "
                                       "without it, each peak form refitted leaving each "
                                       "source and each family kind out (issue 26)")
    ap.add_argument("--prefill", action="store_true",
                    help="prompt tok/s only: fit [prefill], in-sample and leave-one-source-out "
                         "by chip family (with --md: its own section of the report)")
    ap.add_argument("--speed", action="store_true",
                    help="decode and prompt tok/s (issue 25): per-op fit, in-sample, "
                         "leave-one-source-out and leave-one-family-kind-out")
    ap.add_argument("--source-power", type=float, default=None,
                    help="with --speed: weigh each run by n_source ** (-power / 2) in the fits "
                         "(default bench/speed_eval.SOURCE_POWER = 1, one vote per source; "
                         "0: every run alike)")
    a = ap.parse_args(argv)
    if a.source_power is not None:
        import speed_eval

        speed_eval.SOURCE_POWER = a.source_power
    cases, skipped = load_cases()
    doc = base_doc()
    cal0 = cal_with(doc)
    if a.speed or a.prefill:  # --prefill: the prompt-speed half is --speed's now
        return speed_main(cases, a.md, a.loo_rows)
    main_cases = [c for c in cases if not c.approx]
    if a.loo_rows:
        peak_loo_main(a.loo_rows, [c for c in main_cases if not excluded(c)], doc)
        return 0
    if a.rows:
        with open(a.rows, "w") as f:
            f.writelines(json.dumps(d) + "\n" for d in evaluate(cases, cal0))
    cal_orig = cal_with(doc, ORIGINAL_METAL, ORIGINAL_DECODE, neutral=True)
    fns_peak = {"original": lambda c: peak_form(c, cal_orig, {}),
                "current": lambda c: predict_peak(c, cal0)[0]}
    fns_tps = {"original": lambda c: tps_form(c, ORIGINAL_DECODE, {}),
               "current": lambda c: predict_tps(c, cal0)}
    L: list[str] = []
    fitset = [c for c in main_cases if not excluded(c)]
    if a.fit:
        mem, spd = fit_all(fitset, doc)
        for name, (metal, ex) in mem.items():
            cal = cal_with(doc, metal, neutral=True)
            fns_peak[name] = partial(_peak_of, cal=cal, ex=ex)
        for name, (dec, ex) in spd.items():
            fns_tps[name] = partial(_tps_of, dec=dec, ex=ex)
        L += ["## Fitted constants (all main runs except the excluded ones)", ""]
        for name, (metal, ex) in mem.items():
            L.append(f"- peak {name}: " + ", ".join(f"{k} = {v:.4g}" for k, v in {**metal, **ex}.items()))
        for name, (dec, ex) in spd.items():
            L.append(f"- decode {name}: " + ", ".join(f"{k} = {v:.4g}" for k, v in {**dec, **ex}.items()))
        ultra = spd["S4"][1]["ultra_eta"]
        L += ["", "## Leave-one-source-out holdout", "",
              ("Each source is held out in turn, every constant refitted on the others. `S4u`: S4 with "
               f"ultra_eta fixed at the full-data value {ultra:.3f} (a per-chip constant measured once; "
               "only guruswami has an Ultra chip, so S4 cannot learn it when guruswami is held out)."), "",
              "| form | held-out source | peak | tps |", "|---|---|---|---|"]
        pooled: dict[str, list] = {}
        for s in SOURCES:
            tr = [c for c in fitset if c.source != s]
            te = [c for c in fitset if c.source == s]
            m2, s2 = fit_all(tr, doc, skip=("F0",))  # F0 (the old formulas): in-sample only
            s2["S4u"] = fit_speed_form(tr, {"lookup": 1, "ultra_eta": ultra}, DEC4,
                                       ("kv_unfused", "gqa_ultra"))
            for mn, (metal, ex) in m2.items():
                cal = cal_with(doc, metal, neutral=True)
                pe = errs(te, partial(_peak_of, cal=cal, ex=ex), "peak")
                pooled.setdefault("peak " + mn, []).extend(pe)
                LOSO_ERRS.setdefault(("peak", mn), []).extend(
                    zip([c for c in te if c.peak is not None], pe))
                L.append(f"| peak {mn} | {s} | {fmt_stats(pe)} | |")
            for sn, (dec, sx) in s2.items():
                te_ = errs(te, partial(_tps_of, dec=dec, ex=sx), "tps")
                pooled.setdefault("tps " + sn, []).extend(te_)
                LOSO_ERRS.setdefault(("tps", sn), []).extend(
                    zip([c for c in te if c.tps is not None], te_))
                L.append(f"| tps {sn} | {s} | | {fmt_stats(te_)} |")
        for k, e in pooled.items():
            L.append(f"| {k} | **pooled** | " + (f"{fmt_stats(e)} | |" if k.startswith("peak")
                                                   else f"| {fmt_stats(e)} |"))
        L.append("")
        L += issue18_tables(fitset, {n: f for n, f in fns_peak.items()})
    for kind, fns in (("peak", fns_peak), ("tps", fns_tps)):
        n_k = sum(1 for c in fitset if (c.peak if kind == "peak" else c.tps) is not None)
        L += [f"## {kind}: in-sample errors |pred-meas|/meas ({n_k} main runs, excluded ones below)",
              ""]
        for title, key in (("by family", lambda c: c.family), ("by prompt length", lambda c: bucket(c.P)),
                           ("by source", lambda c: c.source),
                           ("by machine", lambda c: c.machine)):
            L += [f"### {kind} {title}", "", *grouped_table(fitset, fns, kind, key), ""]
    L += ["## Runs excluded from the fit and from the tables above", ""]
    for c in main_cases:
        if excluded(c):
            e = [f"{n} {100 * (f(c) - c.peak) / c.peak:+.1f}%" for n, f in fns_peak.items()] if c.peak else []
            t = [f"{n} {100 * (f(c) - c.tps) / c.tps:+.1f}%" for n, f in fns_tps.items()] if c.tps else []
            L.append(f"- #{c.idx} {c.label}: {excluded(c)}. Peak err " + ", ".join(e)
                     + ("; tok/s err " + ", ".join(t) if t else ""))
    L += ["", "## Assumption-laden runs (not in any table or fit)", ""]
    for c in cases:
        if c.approx:
            e = ([f"{n} {100 * (f(c) - c.peak) / c.peak:+.1f}%" for n, f in fns_peak.items()]
                 if c.peak else ["no peak published"])
            L.append(f"- #{c.idx} {c.label} meas {c.peak} GB: {c.approx}; peak err " + ", ".join(e))
    L += ["", "## Skipped runs", ""] + [f"- #{s.idx} {s.model}: {s.reason}" for s in skipped]
    text = "\n".join(L)
    print(text)
    if a.md:
        md = Path(a.md)
        head = ""
        if md.exists() and GEN_MARK in md.read_text():
            head = md.read_text().split(GEN_MARK)[0]
        md.write_text(head + GEN_MARK + "\n\n" + text + "\n")
    return 0


@cache
def base_cal() -> Calibration:
    """calibration.toml as shipped (mlxfit's own prediction)."""
    return cal_with(base_doc())


SPEED_MARK = "<!-- speed section: python bench/metal_eval.py --speed --md bench/results/metal_eval.md -->"
SPEED_END = "<!-- end of speed section -->"


def speed_main(cases: list[Case], md: str | None, loo: str | None) -> int:
    import prefill_eval  # bench/prefill_eval.py: the prefill features' machine and weights
    import speed_eval  # bench/speed_eval.py: the per-op speed evaluation (issue 25)

    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    result = speed_eval.evaluate(sys.modules[__name__], prefill_eval, cases, dict(enumerate(rows)),
                                 lm_fit)
    text = "\n".join(speed_eval.report(result))
    print(text)
    if loo:
        speed_eval.write_loo(loo, result)
    if md:
        path = Path(md)
        old = path.read_text() if path.exists() else ""
        block = f"{SPEED_MARK}\n\n{text}\n{SPEED_END}\n"
        if SPEED_MARK in old and SPEED_END in old:
            head, rest = old.split(SPEED_MARK, 1)
            new = head + block + rest.split(SPEED_END, 1)[1].lstrip("\n")
        else:
            new = old + "\n" + block
        path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
