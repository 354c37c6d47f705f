"""Ground truth: run mlx-lm's own generation and set its real memory beside mlxfit's prediction.

Two layers:

* ``measure_run(config, ...)`` / ``measure_folder(path, ...)``: build a model from a config dict
  with mlx-lm's own model classes and random weights (cast and quantized the way
  ``mlx_lm.convert`` would), or load a checkpoint folder with ``mlx_lm.utils.load_model``; then
  run ``mlx_lm.generate.generate_step`` itself on random prompt tokens, so the caches, the chunked
  prefill, the ``mx.clear_cache`` calls and the quantize-the-cache hook are exactly mlx-lm's. They
  read MLX's own memory counters around that run and return one record (a dict). On MLX's CPU
  backend those counters are exact byte counts, which is what calibrating mlxfit needs.
* ``measure(model, ctx, ...)``: the Python twin of ``mlxfit measure``. Resolves the model like
  ``fit`` (folder, Hugging Face cache, catalog, Hub), measures it, predicts the same run with the
  backend actually used, and returns a ``Measurement`` comparing them term by term; ``save=True``
  appends the record to ``~/.cache/mlxfit/measurements.jsonl`` (what ``mlxfit calibrate`` reads).

Token accounting (read from ``generate_step``): a prompt of P tokens is prefilled as P-1 tokens in
chunks of ``prefill_step_size``; the last prompt token goes through one single-token step; each of
the G generated tokens is then fed back for one more step. The caches end holding P+G tokens, so a
run "at context ctx" uses P = ctx - G.

mlx and mlx_lm are imported inside the functions: mlxfit itself must import without them.

The code is split by concern: ``run`` (driving mlx-lm, the optional extra), ``cache`` (bytes
held by mlx-lm's caches), ``inputs`` (what is measured and predicted: source, dtype, backend,
refusals), ``mlxfit.records`` (the results file and measured vs predicted terms) and
``mlxfit.render.measure`` (text and JSON). This module holds the twin ``measure()``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from mlxfit._version import __version__
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.estimate.compute import decode_matmul_flops, predicted_ttft
from mlxfit.estimate.memory import Run, run_from, run_machine_fields
from mlxfit.estimate.solve import totals_at
from mlxfit.estimate.speed import predicted_decode_seconds
from mlxfit.json_result import JsonResult
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model.inputs import model_inputs
from mlxfit.model.mlx_extra import require_mlx
from mlxfit.model.parse import parse_config
from mlxfit.model.tensors import MLX_FLOAT_DTYPES
from mlxfit.records import (
    RECORD_SCHEMA,
    TermCheck,
    append_record,
    compare_terms,
    measured_phase,
)
from mlxfit.sources.folder import read_config
from mlxfit.sources.resolve import resolve_model
from mlxfit.sources.source import ModelSource
from mlxfit.units import tokens
from mlxfit.verbs.edges import (
    calibration_for_user,
    calibration_note,
    compute_for,
    machine_for,
    run_on,
)
from mlxfit.verbs.measure.inputs import (
    backend_in_use,
    config_only,
    dtype_from_config,
    dtype_from_tensors,
    refuse_unsupported,
    tensors_of,
)
from mlxfit.verbs.measure.run import (
    Progress,
    build_model,
    check_tokens,
    measure_folder,
    measure_run,
)

# --------------------------------------------------------------------------- the results file


@dataclass(frozen=True)
class Measurement(JsonResult):
    """What ``mlxfit measure`` reports: one real mlx-lm run beside mlxfit's prediction of it."""
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.measure:measurement_to_json"

    model: str
    source_kind: str  # folder | hf-cache | catalog | hub | config
    random_weights: bool
    dtype: str
    backend: str  # the backend MLX ran on, and the one the prediction used
    run: Run
    terms: tuple[TermCheck, ...]
    measured_peak_phase: str
    predicted_peak_phase: str
    calibration: str
    record: dict = field(repr=False, default_factory=dict)
    saved_to: str | None = None
    notes: tuple[str, ...] = ()
    machine: Any = None  # hardware.resolve.Machine the tok/s was predicted for, when known
    warnings: tuple[str, ...] = ()  # what made the run slow (told as it started)

    def term(self, name: str) -> TermCheck:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(name)


def slow_on_cpu(backend: str, config: dict, wdtype: str, params: int | None) -> str:
    """Why this run will be slow on MLX's CPU backend, or "". Measured on mlxfit's 2-core x86
    CI box (shared, mlx 0.32.4): a random-weights Qwen3-0.6B 4-bit build had not finished a
    256-token prompt after 120 s; its bf16 build took 117 s for 512 tokens (float32: over 150
    s, so float32 is no cure); a 4.2M-parameter float32 model, 4 s for 1,200 tokens."""
    if backend != "cpu":
        return ""
    q = config.get("quantization") or config.get("quantization_config")
    if q:
        bits = q.get("bits") if isinstance(q, dict) else None
        return (f"MLX's CPU backend runs quantized{f' ({bits}-bit)' if bits else ''} matmuls "
                "very slowly: a 0.6B 4-bit model had not finished a 256-token prompt after 2 "
                "minutes on a 2-core x86 machine; measure on Apple Silicon (Metal), or add "
                "--unquantized (with --random-weights: the same model built without its "
                "quantization)")
    if wdtype in ("bfloat16", "float16") and params is not None and params >= 10**8:
        return (f"MLX's CPU backend is slow at this size ({params / 1e9:.2f}B parameters, "
                f"{wdtype}): a 0.6B model took about 2 minutes for a 512-token prompt on a "
                "2-core x86 machine; a smaller --ctx, or Apple Silicon (Metal)")
    return ""


def check_fits_here(inputs, run, cal, machine, force: bool) -> None:
    """Refuse a run whose predicted peak exceeds this machine's usable memory: it would swap
    or be killed (SIGSEGV, SIGKILL) before printing anything."""
    if machine is None or force:
        return
    peak = totals_at(inputs.cfg, inputs.weights.total_bytes, run, cal).total
    if peak > machine.usable_bytes:
        raise UsageError(f"the run needs {peak / 1e9:,.2f} GB at its peak (predicted), more "
                         f"than the {machine.usable_bytes / 1e9:,.2f} GB this machine "
                         f"({machine.name}) can give it: it would swap or be killed; a smaller "
                         "model or ctx, or force to run it anyway", also=("ctx", "force"))


def predict(inputs, run, cal, machine=None) -> tuple[Any, float | None]:
    """What ``measure`` compares a run with, computed without mlx: (estimate.solve.Totals of
    ``run``, predicted decode tok/s on ``machine``). ``inputs``: model.inputs.ModelInputs;
    ``machine``: a ``verbs.edges.machine_for`` result or None. No tok/s without a machine bandwidth or on the cpu
    backend (the decode model is Apple Silicon's unified memory)."""
    tot = totals_at(inputs.cfg, inputs.weights.total_bytes, run, cal)
    bw = getattr(machine, "bandwidth_gbs", None)
    tps = None
    if bw and run.backend != "cpu":
        tps = 1.0 / predicted_decode_seconds(
            inputs.cfg, run, inputs.weights, bw, cal, machine.name,
            matmul_flops=decode_matmul_flops(compute_for(machine)))[0]
    return tot, tps


def predict_prefill(inputs, run, cal, machine=None) -> float | None:
    """Predicted tok/s of the chunked prefill alone (the P-1 prompt tokens over the chunks'
    seconds, as ``measure`` times them; estimate/compute.predicted_ttft's prefill_seconds
    term); None without a compute figure for ``machine`` or on the cpu backend."""
    chip = compute_for(machine) if machine is not None else None
    if chip is None or run.backend == "cpu" or not machine.bandwidth_gbs:
        return None
    p = predicted_ttft(inputs.cfg, run, inputs.weights, machine.bandwidth_gbs, chip, cal,
                       machine.name)
    if p is None:
        return None
    secs = next(t.seconds for t in p.terms if t.name == "prefill_seconds")
    tokens = run.schedule().prefill_tokens
    return tokens / secs if secs > 0 and tokens > 0 else None


def measure(
    model: str,
    ctx: int,
    *,
    gen: int = 16,
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: int | None = None,
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: int | None = None,
    random_weights: bool = False,
    dtype: str | None = None,
    revision: str | None = None,
    seed: int = 0,
    machine: str | None = None,
    calibration=None,
    save: bool = False,
    results_file: str | Path | None = None,
    on_progress: Progress | None = None,
    on_warning: Callable[[str], None] | None = None,
    force: bool = False,
    unquantized: bool = False,
) -> Measurement:
    """Run ``model`` with mlx-lm so its caches end at ``ctx`` tokens (``gen`` of them
    generated) and compare MLX's counters with mlxfit's prediction of the same run.

    ``model``: a folder, a Hugging Face cache repo id, or with ``random_weights`` also a catalog
    or Hub id, a config.json, or a folder holding only config.json (nothing is downloaded: the
    model is built from its config by mlx-lm's classes, quantized as the config says, in
    ``dtype``, by default the checkpoint's). The prediction uses the backend MLX ran on (``cpu``
    on Linux) and the calibration ``fit`` uses. ``save``: append the record to ``results_file``
    (default ``~/.cache/mlxfit/measurements.jsonl``), which ``mlxfit calibrate`` reads.

    Before anything is built, the predicted peak is checked against this machine's memory
    (refused when over, unless ``force``). ``on_warning(text)`` hears at once what makes the
    run slow (bf16 or quantized weights on MLX's CPU backend); ``on_progress(stage, done,
    total)`` each stage, prefill chunk and decode step (see ``measure.run.Progress``).
    """
    # Every parameter is checked before mlx is asked for or the model resolved. The run's
    # backend is the one MLX runs on, known once mlx is imported.
    ctx, gen, prefill_step_size = (tokens(v, name) for v, name in (  # "32k" -> 32768
        (ctx, "ctx"), (gen, "gen"), (prefill_step_size, "prefill_step_size")))
    check_tokens(ctx, gen, prefill_step_size)
    run = run_from(ctx=ctx, gen=gen, prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                   kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
                   max_kv_size=max_kv_size)
    if dtype is not None and dtype not in MLX_FLOAT_DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(MLX_FLOAT_DTYPES)}, not {dtype!r}",
                         param="dtype")
    if dtype is not None and not random_weights:
        raise UsageError("dtype applies to random_weights only (a checkpoint has its dtype)",
                         param="dtype", also=("random_weights",))
    if unquantized and not random_weights:
        raise UsageError("unquantized applies to random_weights only (a checkpoint's weights "
                         "are what they are)", param="unquantized", also=("random_weights",))
    require_mlx()
    notes: list[str] = []

    cfg_file = config_only(model) if random_weights else None
    src = name = None
    if cfg_file is None:
        src = resolve_model(model, revision=revision)
        if not random_weights and src.kind not in ("folder", "hf-cache"):
            raise UsageError(f"{model}: no weights on this machine ({src.kind}); pass "
                             "random_weights to build it from its config (nothing downloaded)",
                             also=("random_weights",))
        config = src.config
    else:
        config = read_config(cfg_file)
    if unquantized:
        # The same model without its quantization (MLX's CPU backend runs quantized matmuls
        # very slowly): built from the config alone, predicted from the built tensors.
        stripped = {k: v for k, v in config.items()
                    if k not in ("quantization", "quantization_config")}
        if stripped != config:
            notes.append("--unquantized: built without the config's quantization")
        config = stripped
        if src is not None:
            cfg_file, name = Path(src.name) / "config.json", f"{src.name} (unquantized)"
            src = None
    if random_weights:
        wdtype = (dtype or (dtype_from_tensors(src.tensors) if src else None)
                  or dtype_from_config(config) or "bfloat16")
    else:
        wdtype = dtype_from_tensors(src.tensors) or "checkpoint"

    backend = backend_in_use()
    run = replace(run, backend=backend)
    cal = calibration_for_user(calibration)
    m = None
    try:
        m = machine_for(machine)
    except MlxfitError as e:
        notes.append(f"machine unknown ({e}): no decode speed predicted, its memory not checked")
    run = run_on(run, m)  # the Metal transient and kernels of this Mac's GPU, as fit has them
    warnings: list[str] = []
    params = None
    if src is not None:
        inputs = model_inputs(src)
        refuse_unsupported(inputs.cfg, run)
        check_fits_here(inputs, run, cal, m, force)
        params = int(inputs.weights_detail.param_count or 0)
    slow = slow_on_cpu(backend, config, wdtype, params)
    if slow:  # said now, before minutes of silence, and kept in the report
        warnings.append(slow)
        if on_warning is not None:
            on_warning(slow)

    kw = {"prefill_step_size": prefill_step_size, "gen_tokens": gen, "kv_bits": kv_bits,
          "kv_group_size": kv_group_size, "quantized_kv_start": quantized_kv_start,
          "max_kv_size": max_kv_size, "seed": seed, "on_progress": on_progress}
    if src is None:
        # Refuse before building anything (the activation dtype is the one asked for).
        refuse_unsupported(parse_config(config, act_bytes=4 if wdtype == "float32" else 2,
                                        where=str(cfg_file)), run)
        # No headers: the prediction's weights are the built model's tensors (exact by
        # construction; the other terms are still predicted from the config).
        built = build_model(config, dtype=wdtype, seed=seed)
        tensors = tensors_of(built)
        del built
        gc.collect()
        where = cfg_file.parent if cfg_file.name == "config.json" else cfg_file
        src = ModelSource(name=name or str(where), kind="config", location=str(where),
                          config=config,
                          tensors=tensors, files=())
        inputs = model_inputs(src)
        refuse_unsupported(inputs.cfg, run)
        notes.append("no safetensors headers: predicted weights are the built model's tensors")
    if random_weights:
        rec = measure_run(config, ctx, dtype=wdtype, **kw)
    else:
        rec = measure_folder(src.location, ctx, dtype_label=wdtype, **kw)

    bw = m.bandwidth_gbs if m is not None else None
    tot, tps = predict(inputs, run, cal, m)
    if backend == "cpu":
        notes.append("backend cpu: mlxfit predicts decode speed for Apple Silicon's unified "
                     "memory only; tok/s are measured, not predicted")
    elif not bw:
        notes.append("memory bandwidth unknown: no decode speed predicted (pass --machine)")
    notes.extend(calibration_note(cal))
    notes.extend(inputs.source_notes)

    terms = compare_terms(rec, weights=inputs.weights.total_bytes, kv=tot.kv,
                          state=tot.state, transient=tot.transient, peak=tot.total,
                          decode_tps=tps, prefill_tps=predict_prefill(inputs, run, cal, m))
    rec.update({
        "schema": RECORD_SCHEMA,
        "mlxfit_version": _version(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": {"model": model, "name": inputs.name, "kind": src.kind,
                   "location": src.location, "revision": src.revision},
        "random_weights": random_weights,
        "act_bytes": inputs.cfg.act_bytes,
        "weights_read": {"total_bytes": inputs.weights.total_bytes,
                         "expert_bytes": inputs.weights.expert_bytes,
                         "embedding_bytes": inputs.weights.embedding_bytes,
                         "tied_embeddings": inputs.weights.tied_embeddings,
                         "lookup_bytes": inputs.weights.lookup_bytes},
        "machine_info": None if m is None else {"name": m.name, "bandwidth_gbs": bw,
                                           "ram_bytes": m.ram_bytes, **run_machine_fields(run)},
        "predicted": {"backend": backend, "calibration": cal.source,
                      "weights_bytes": inputs.weights.total_bytes, "kv_bytes": tot.kv,
                      "state_bytes": tot.state, "transient_bytes": tot.transient,
                      "peak_bytes": tot.total, "peak_phase": tot.phase.name,
                      "decode_tps": tps},
    })
    saved = None
    if save:
        saved = append_record(rec, results_file)
    return Measurement(
        model=inputs.name, source_kind=src.kind, random_weights=random_weights, dtype=wdtype,
        backend=backend, run=run, terms=terms, measured_peak_phase=measured_phase(rec),
        predicted_peak_phase=tot.phase.name, calibration=cal.source, record=rec,
        saved_to=None if saved is None else str(saved), notes=tuple(notes), machine=m,
        warnings=tuple(warnings),
    )


def _version() -> str:
    return __version__




