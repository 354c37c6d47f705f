"""Prompt tok/s helpers for ``bench/speed_eval.py`` (``bench/metal_eval.py --speed``): the
machine and chip compute of a published run, its weights with their matmul parameters, and
mlxfit's own prediction (``mlxfit.estimate.compute.predicted_ttft``) to pin the evaluation's
per-op sum to it.

prompt tok/s (mlx_lm.benchmark, mlx_lm.generate) = P / (prefill chunks + the first decode step).
The per-op fit, in-sample, leave-one-source-out and leave-one-family-kind-out tables that this
file's report used to make (with ``chunk_read_passes``) are speed_eval's now.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from mlxfit.estimate.compute import predicted_ttft
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.model.inputs import MatmulParams, WeightsRead
from mlxfit.model.tensors import TensorInfo
from mlxfit.model.weights import summarize_weights
from mlxfit.verbs.edges import compute_for


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



# Harnesses that sleep before each timed trial, so its prefill starts on an idle GPU
# (compute.cold_gpu_seconds), by a substring of the row's source. ax-engine's
# scripts/bench_mlx_inference_stack.py runs `mlx_lm.benchmark --delay <cooldown>` (every run of
# it in metal_published.jsonl records a cooldown of 5-20 s in its JSON), and its --gpu-wake help
# measures the effect: an M5 Max p128 prefill from idle 326 ms, 208 ms after a wake-up run.
IDLE_GPU = {
    "defai-digital/ax-engine": "mlx_lm.benchmark --delay 5-20 (the harness's cooldown)",
}
# ... except these runs of it, recorded with a cooldown of 0
IDLE_GPU_NOT = ("2026-07-12-mlx032-current-peer",)


def idle_gpu(row: dict) -> bool:
    src = row.get("source", "")
    return any(k in src for k in IDLE_GPU) and not any(k in src for k in IDLE_GPU_NOT)


def check_current(c, model, row, cal) -> float | None:
    """mlxfit's own prediction (predicted_ttft, cold GPU where the harness slept), to pin
    ``seconds`` to it."""
    m, chip = machine_and_compute(c.machine, macos_of(row))
    if chip is None:
        return None
    from metal_eval import run_of

    p = predicted_ttft(model.cfg, run_of(c), weights_of(model, c.desc), m.bandwidth_gbs, chip,
                       cal, m.name, cold_gpu=idle_gpu(row))
    return None if p is None else p.prefill_tps


__all__ = ["check_current", "idle_gpu", "machine_and_compute", "macos_of", "weights_of"]
