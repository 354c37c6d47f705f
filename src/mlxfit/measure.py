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
"""

from __future__ import annotations

import gc
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlxfit.errors import MlxfitError, UsageError

_DTYPES = ("float32", "bfloat16", "float16")


def _text_field(config: dict, key: str) -> Any:
    """A language-model field, looked up at the top level, then under ``text_config``."""
    if key in config:
        return config[key]
    return (config.get("text_config") or {}).get(key)


def build_model(config: dict, dtype: str = "float32", seed: int = 0):
    """An mlx-lm model for ``config`` with random, evaluated weights.

    Floating parameters are cast to ``dtype`` (respecting the model's ``cast_predicate``, as
    ``mlx_lm.convert`` does); a ``quantization`` block in the config is applied the way a converted
    checkpoint would be loaded: per-path entries win, layers whose input dim is not divisible by
    the group size stay in float, and the model's own ``quant_predicate`` (e.g. 8-bit MoE routers)
    applies to the rest.
    """
    import mlx.core as mx
    from mlx import nn
    from mlx.utils import tree_map_with_path
    from mlx_lm.utils import _get_classes

    if dtype not in _DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(_DTYPES)}, not {dtype!r}")
    mx.random.seed(seed)
    model_class, args_class = _get_classes(config=config)
    model = model_class(args_class.from_dict(config))

    target = getattr(mx, dtype)
    cast_predicate = getattr(model, "cast_predicate", lambda _: True)

    def set_dtype(path, value):
        if cast_predicate(path) and mx.issubdtype(value.dtype, mx.floating):
            return value.astype(target)
        return value

    model.update(tree_map_with_path(set_dtype, model.parameters()))

    quant = config.get("quantization")
    if quant:
        group_size = quant.get("group_size", 64)
        model_predicate = getattr(model, "quant_predicate", None)

        def class_predicate(path, module):
            if path in quant:  # per-path override written by convert: dict or False
                return quant[path]
            if not hasattr(module, "to_quantized"):
                return False
            if module.weight.shape[-1] % group_size != 0:
                return False
            if model_predicate is not None:
                return model_predicate(path, module)
            return True

        nn.quantize(
            model,
            group_size=group_size,
            bits=quant.get("bits", 4),
            mode=quant.get("mode", "affine"),
            class_predicate=class_predicate,
        )

    model.eval()
    mx.eval(model.parameters())
    return model


def _state_nbytes(obj) -> int:
    """Bytes of every mx.array reachable from a cache's state (nested tuples, lists, CacheList)."""
    import mlx.core as mx

    if isinstance(obj, mx.array):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sum(_state_nbytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(_state_nbytes(x) for x in obj.values())
    return 0


def cache_nbytes(cache) -> int:
    """Real bytes held by one layer's cache object (any mlx-lm cache class)."""
    if hasattr(cache, "caches"):  # CacheList
        return sum(cache_nbytes(c) for c in cache.caches)
    if hasattr(cache, "cache") and isinstance(cache.cache, list):  # ArraysCache
        return _state_nbytes(cache.cache) + _state_nbytes(
            [getattr(cache, "left_padding", None), getattr(cache, "lengths", None)]
        )
    return _state_nbytes([getattr(cache, "keys", None), getattr(cache, "values", None)])


def describe_cache(cache) -> dict:
    """Class, bytes, token offset and capacity of one layer's cache."""
    d: dict[str, Any] = {"class": type(cache).__name__, "nbytes": cache_nbytes(cache)}
    if hasattr(cache, "caches"):
        d["parts"] = [describe_cache(c) for c in cache.caches]
        return d
    if hasattr(cache, "cache") and isinstance(cache.cache, list):
        d["arrays"] = [
            None
            if a is None
            else {"shape": list(a.shape), "dtype": str(a.dtype), "nbytes": a.nbytes}
            for a in cache.cache
        ]
        return d
    d["offset"] = getattr(cache, "offset", None)
    keys = getattr(cache, "keys", None)
    if keys is not None:
        first = keys[0] if isinstance(keys, (list, tuple)) else keys
        d["capacity"] = first.shape[-2]
        if isinstance(keys, (list, tuple)):
            d["keys"] = [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in keys]
            d["values"] = [{"shape": list(a.shape), "dtype": str(a.dtype)} for a in cache.values]
        else:
            d["keys"] = {"shape": list(keys.shape), "dtype": str(keys.dtype)}
            d["values"] = {"shape": list(cache.values.shape), "dtype": str(cache.values.dtype)}
    else:
        d["capacity"] = 0
    for attr in ("max_size", "keep", "bits", "group_size", "chunk_size"):
        if hasattr(cache, attr):
            d[attr] = getattr(cache, attr)
    return d


def _total_cache_bytes(prompt_cache) -> int:
    return sum(cache_nbytes(c) for c in prompt_cache)


def _environment() -> dict:
    import mlx.core as mx
    import mlx_lm

    try:
        metal = bool(mx.metal.is_available())
    except Exception:  # noqa: BLE001 - older/newer builds without mx.metal
        metal = False
    try:
        info = dict(mx.device_info())
    except Exception:  # noqa: BLE001
        info = {}
    preload = os.environ.get("LD_PRELOAD", "")
    return {
        "mlx_version": mx.__version__,
        "mlx_lm_version": mlx_lm.__version__,
        "backend": "metal" if metal else str(mx.default_device().type).split(".")[-1],
        "device": str(mx.default_device()),
        "device_info": {k: str(v) for k, v in info.items()},
        "blas_preload": preload or None,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


# --------------------------------------------------------------------------- the optional extra

INSTALL_HINT = ('measuring needs mlx and mlx-lm: pip install "mlxfit[measure]" '
                "(mlx[cpu] on Linux, mlx on Apple Silicon)")


class MlxUnavailable(MlxfitError):
    """mlx or mlx-lm cannot be imported: the measure extra is not installed."""


def mlx_missing_reason() -> str | None:
    """None when mlx and mlx-lm import, else why not (one line)."""
    try:
        import mlx.core  # noqa: F401
        import mlx_lm  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: a wheel whose shared library cannot load
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def require_mlx() -> None:
    reason = mlx_missing_reason()
    if reason is not None:
        raise MlxUnavailable(f"{INSTALL_HINT} [{reason}]")


# --------------------------------------------------------------------------- one measured run


def _check_tokens(ctx: int, gen_tokens: int, prefill_step_size: int) -> None:
    if gen_tokens < 1 or prefill_step_size < 1:
        raise UsageError("--gen and --prefill-step-size must be >= 1 (mlx-lm generates at "
                         "least one token)")
    if ctx - gen_tokens < 2:
        raise UsageError(f"--ctx ({ctx}) must exceed --gen ({gen_tokens}) by at least 2")


def _state_cache_bytes(cache) -> int:
    """Bytes of the recurrent (ArraysCache) part of one layer's cache."""
    if hasattr(cache, "caches"):  # CacheList
        return sum(_state_cache_bytes(c) for c in cache.caches)
    if hasattr(cache, "cache") and isinstance(cache.cache, list):
        return cache_nbytes(cache)
    return 0


def _param_summary(model) -> tuple[int, int]:
    from mlx.utils import tree_flatten

    flat = tree_flatten(model.parameters())
    return sum(v.nbytes for _, v in flat), sum(v.size for _, v in flat)


def _measure(
    load: Callable[[], Any],
    config: dict,
    ctx: int,
    *,
    prefill_step_size: int,
    gen_tokens: int,
    kv_bits: int | None,
    kv_group_size: int,
    quantized_kv_start: int,
    max_kv_size: int | None,
    dtype: str,
    seed: int,
) -> dict:
    """Load (``load()`` returns the model), then run generate_step; see ``measure_run``."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step, generation_stream, wired_limit
    from mlx_lm.models.cache import make_prompt_cache

    gc.collect()
    mx.clear_cache()
    # The random key is an 8-byte array: materialize it first, so that the bytes the load adds
    # are exactly the model's parameters (a random build only replaces the key).
    mx.random.seed(seed)
    mx.eval(mx.random.state)
    mx.reset_peak_memory()
    active_before_load = mx.get_active_memory()
    t0 = time.perf_counter()
    model = load()
    mx.eval(model.parameters())
    # Initializers split the key: the new key is a view of the 16-byte split result. Re-seed
    # so the key is one 8-byte array again, as before the load.
    mx.random.seed(seed)
    mx.eval(mx.random.state)
    load_seconds = time.perf_counter() - t0
    load_peak = mx.get_peak_memory()
    gc.collect()
    mx.clear_cache()
    param_bytes, n_params = _param_summary(model)
    active_after_load = mx.get_active_memory()

    vocab = _text_field(config, "vocab_size") or 1000
    prompt_len = ctx - gen_tokens
    mx.random.seed(seed + 1)
    prompt = mx.random.randint(0, int(vocab), (prompt_len,)).astype(mx.uint32)
    mx.eval(prompt)

    # The same call generate_step makes when no cache is passed; passing it lets us inspect it.
    prompt_cache = make_prompt_cache(model, max_kv_size=max_kv_size)

    chunks: list[dict] = []
    marks: dict[str, float] = {}

    def progress(processed: int, total: int) -> None:
        now = time.perf_counter()
        if processed == 0:
            marks["prefill_start"] = now
            mx.reset_peak_memory()
            return
        if processed >= total:  # the (total, total) call after the first generated token
            return
        prev = chunks[-1]["processed"] if chunks else 0
        chunks.append(
            {
                "tokens": processed - prev,
                "processed": processed,
                "peak_bytes": mx.get_peak_memory(),
                "active_after_bytes": mx.get_active_memory(),
                "cache_bytes_after": _total_cache_bytes(prompt_cache),
                "cache_classes_after": [type(c).__name__ for c in prompt_cache],
                "seconds": now - marks.get("last_chunk_end", marks["prefill_start"]),
            }
        )
        marks["last_chunk_end"] = now
        mx.reset_peak_memory()

    mx.reset_peak_memory()
    generated = 0
    with wired_limit(model, [generation_stream]):  # what mlx_lm.generate does (Metal only)
        for _token, _logprobs in generate_step(
            prompt,
            model,
            max_tokens=gen_tokens,
            max_kv_size=max_kv_size,
            prompt_cache=prompt_cache,
            prefill_step_size=prefill_step_size,
            kv_bits=kv_bits,
            kv_group_size=kv_group_size,
            quantized_kv_start=quantized_kv_start,
            prompt_progress_callback=progress,
        ):
            generated += 1
        mx.eval([c.state for c in prompt_cache])
    t_end = time.perf_counter()
    decode_peak = mx.get_peak_memory()

    prefill_tokens = prompt_len - 1
    prefill_seconds = marks["last_chunk_end"] - marks["prefill_start"]
    decode_seconds = t_end - marks["last_chunk_end"]
    decode_steps = gen_tokens + 1  # last prompt token + one step per generated token
    prefill_peak = max(c["peak_bytes"] for c in chunks)
    peak = max(prefill_peak, decode_peak)
    last = chunks[-1]

    layers = [describe_cache(c) for c in prompt_cache]
    env = _environment()
    rec = {
        "config": config,
        "ctx": ctx,
        "prompt_tokens": prompt_len,
        "prefill_tokens": prefill_tokens,
        "gen_tokens": gen_tokens,
        "generated": generated,
        "prefill_step_size": prefill_step_size,
        "kv_bits": kv_bits,
        "kv_group_size": kv_group_size,
        "quantized_kv_start": quantized_kv_start,
        "max_kv_size": max_kv_size,
        "dtype": dtype,
        "seed": seed,
        "model_type": config.get("model_type"),
        "n_params": n_params,
        "param_bytes": param_bytes,
        "active_before_load_bytes": active_before_load,
        "active_after_load_bytes": active_after_load,
        "weights_measured_bytes": active_after_load - active_before_load,
        "load_peak_bytes": load_peak,
        "peak_bytes": peak,
        "prefill_peak_bytes": prefill_peak,
        "decode_peak_bytes": decode_peak,
        "peak_phase": "prefill" if prefill_peak >= decode_peak else "decode",
        "cache_bytes_after_prefill": last["cache_bytes_after"],
        "cache_bytes_end": _total_cache_bytes(prompt_cache),
        "state_bytes_end": sum(_state_cache_bytes(c) for c in prompt_cache),
        "active_end_bytes": mx.get_active_memory(),
        "buffer_cache_end_bytes": mx.get_cache_memory(),
        "chunks": chunks,
        "cache_layers": layers,
        "cache_classes": [d["class"] for d in layers],
        "load_seconds": load_seconds,
        "prefill_seconds": prefill_seconds,
        "decode_seconds": decode_seconds,
        "decode_steps": decode_steps,
        "prefill_tok_s": prefill_tokens / prefill_seconds if prefill_seconds > 0 else None,
        "decode_tok_s": decode_steps / decode_seconds if decode_seconds > 0 else None,
        **env,
    }
    prompt_cache.clear()  # free the caches and the model before the next measurement
    model = None
    gc.collect()
    mx.clear_cache()
    return rec


def measure_run(
    config: dict,
    ctx: int,
    *,
    prefill_step_size: int = 2048,
    gen_tokens: int = 1,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = 5000,
    max_kv_size: int | None = None,
    dtype: str = "float32",
    seed: int = 0,
) -> dict:
    """Build ``config`` with random weights, run mlx-lm's ``generate_step`` so the caches end at
    ``ctx`` tokens; return what MLX counted.

    All memory figures are bytes from MLX's counters. ``peak_bytes`` is the peak of the whole
    generation (prefill and decode) measured from a reset right after the weights were loaded and
    evaluated, so it includes the weights (and the ``active_before_load_bytes`` the process held
    before). Peaks are read segment by segment (each prefill chunk, then the decode phase: the
    last prompt token's step plus ``gen_tokens`` steps) with a reset after each read; the overall
    peak is the largest segment peak. ``weights_measured_bytes`` is what the load added to the
    active memory.
    """
    _check_tokens(ctx, gen_tokens, prefill_step_size)
    if dtype not in _DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(_DTYPES)}, not {dtype!r}")
    rec = _measure(
        lambda: build_model(config, dtype=dtype, seed=seed), config, ctx,
        prefill_step_size=prefill_step_size, gen_tokens=gen_tokens, kv_bits=kv_bits,
        kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
        max_kv_size=max_kv_size, dtype=dtype, seed=seed,
    )
    rec["random_weights"] = True
    return rec


def measure_folder(
    folder: str | Path,
    ctx: int,
    *,
    prefill_step_size: int = 2048,
    gen_tokens: int = 1,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = 5000,
    max_kv_size: int | None = None,
    seed: int = 0,
    dtype_label: str = "checkpoint",
) -> dict:
    """``measure_run`` for a checkpoint folder loaded by ``mlx_lm.utils.load_model`` (real
    weights; the tokenizer is not needed: the prompt is random token ids)."""
    _check_tokens(ctx, gen_tokens, prefill_step_size)
    from mlx_lm.utils import load_config, load_model

    folder = Path(folder)
    config = load_config(folder)
    rec = _measure(
        lambda: load_model(folder)[0], config, ctx,
        prefill_step_size=prefill_step_size, gen_tokens=gen_tokens, kv_bits=kv_bits,
        kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
        max_kv_size=max_kv_size, dtype=dtype_label, seed=seed,
    )
    rec["random_weights"] = False
    return rec


def save_random_model(config: dict, folder: str | Path, *, dtype: str = "float32",
                      seed: int = 0) -> Path:
    """Write ``config`` with random weights as an mlx-lm checkpoint folder (config.json and
    model.safetensors, as ``mlx_lm.convert`` saves them): a tiny model to measure or size."""
    require_mlx()
    from mlx_lm.utils import save_config, save_model

    folder = Path(folder)
    model = build_model(config, dtype=dtype, seed=seed)
    save_model(folder, model, donate_model=True)
    save_config(dict(config), folder / "config.json")
    del model
    gc.collect()
    return folder


# --------------------------------------------------------------------------- measured vs predicted

DEFAULT_RESULTS = Path("~/.cache/mlxfit/measurements.jsonl")
RECORD_SCHEMA = 1
_SAFETENSORS_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16", "uint32": "U32",
                      "uint8": "U8", "int32": "I32", "int8": "I8", "uint16": "U16",
                      "int16": "I16", "int64": "I64", "uint64": "U64", "bool": "BOOL"}
_DTYPE_NAME = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
_ACT_DTYPE = {4: "float32", 2: "bfloat16"}


def results_path() -> Path:
    """Where ``--save`` appends (``DEFAULT_RESULTS``; tests replace the constant)."""
    return Path(DEFAULT_RESULTS).expanduser()


@dataclass(frozen=True)
class TermCheck:
    """One term, measured and predicted (bytes, or tokens/s for the speeds)."""

    name: str
    measured: float | None
    predicted: float | None
    unit: str = "bytes"
    exact: bool = False  # mlxfit claims this term to the byte (weights, KV, state)
    note: str = ""

    @property
    def diff(self) -> float | None:
        if self.measured is None or self.predicted is None:
            return None
        return self.predicted - self.measured

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured; None when either is missing or measured is 0."""
        if self.diff is None or not self.measured:
            return None
        return self.diff / self.measured

    @property
    def matches(self) -> bool | None:
        """For exact terms: equal to the byte."""
        return None if self.diff is None else self.diff == 0


@dataclass(frozen=True)
class Measurement:
    """What ``mlxfit measure`` reports: one real mlx-lm run beside mlxfit's prediction of it."""

    model: str
    source_kind: str  # folder | hf-cache | catalog | hub | config
    random_weights: bool
    dtype: str
    backend: str  # the backend MLX ran on, and the one the prediction used
    run: Any  # mlxfit.memory.Run
    terms: tuple[TermCheck, ...]
    measured_peak_phase: str
    predicted_peak_phase: str
    calibration: str
    record: dict = field(repr=False, default_factory=dict)
    saved_to: str | None = None
    notes: tuple[str, ...] = ()

    def term(self, name: str) -> TermCheck:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(name)


def _tensors_of(model) -> tuple:
    from mlx.utils import tree_flatten

    from mlxfit.tensors import TensorInfo

    out = []
    for name, v in tree_flatten(model.parameters()):
        dt = str(v.dtype).rsplit(".", 1)[-1]
        out.append(TensorInfo.of(name, _SAFETENSORS_DTYPE.get(dt, "F32"), tuple(v.shape)))
    return tuple(out)


def _config_only(spec: str) -> Path | None:
    """A config.json, or a folder holding one and no model*.safetensors: the --random-weights
    source that has no headers."""
    p = Path(spec).expanduser()
    try:
        if p.is_file() and p.name.endswith(".json"):
            return p
        if p.is_dir() and (p / "config.json").is_file() and not any(p.glob("model*.safetensors")):
            return p / "config.json"
    except OSError:
        return None
    return None


def _dtype_from_tensors(tensors) -> str | None:
    from mlxfit.api import activation_bytes

    floats = [t for t in tensors if t.dtype in _DTYPE_NAME]
    if not floats:
        return None
    by_name = {t.name: t for t in tensors}
    for t in tensors:  # the embedding (or its scales): the dtype mlx-lm computes in
        if t.name.endswith(("embed_tokens.weight", "wte.weight")):
            if t.dtype in _DTYPE_NAME:
                return _DTYPE_NAME[t.dtype]
            s = by_name.get(t.name[: -len("weight")] + "scales")
            if s is not None and s.dtype in _DTYPE_NAME:
                return _DTYPE_NAME[s.dtype]
    b = activation_bytes(tensors)
    return _ACT_DTYPE.get(b)


def _dtype_from_config(config: dict) -> str | None:
    v = _text_field(config, "torch_dtype") or _text_field(config, "dtype")
    return v if v in _DTYPES else None


def _backend_in_use() -> str:
    import mlx.core as mx

    try:
        return "metal" if mx.metal.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - builds without mx.metal
        return "cpu"


def refuse_unsupported(cfg, run) -> None:
    """Runs mlx-lm cannot do: the same refusals as ``fit`` (validate_run), plus quantizing an
    MLA latent cache, which mlx-lm 0.32 accepts and then fails on (deepseek_v3's attention calls
    ``swapaxes`` on QuantizedKVCache's packed tuples: AttributeError)."""
    from mlxfit.memory import attn_groups, validate_run

    validate_run(cfg, run)
    # deepseek_v32 keeps its MLA latent in a CacheList, which mlx-lm never quantizes (no
    # to_quantized): only the plain-KVCache MLA families fail.
    if run.kv_bits is not None and run.ctx > run.quantized_kv_start and not cfg.own_cache and any(
        a.mla for a, _ in attn_groups(cfg, run)
    ):
        raise UsageError(
            "--kv-bits: this model's MLA attention caches a compressed latent that mlx-lm "
            "cannot use once quantized (its attention fails on QuantizedKVCache); run without "
            "--kv-bits or keep --quantized-kv-start >= --ctx"
        )


def measure(
    model: str,
    ctx: int,
    *,
    gen: int = 16,
    prefill_step_size: int = 2048,
    kv_bits: int | None = None,
    kv_group_size: int = 64,
    quantized_kv_start: int = 5000,
    max_kv_size: int | None = None,
    random_weights: bool = False,
    dtype: str | None = None,
    revision: str | None = None,
    seed: int = 0,
    machine: str | None = None,
    calibration=None,
    save: bool = False,
    results_file: str | Path | None = None,
) -> Measurement:
    """Run ``model`` with mlx-lm so its caches end at ``ctx`` tokens (``gen`` of them
    generated) and compare MLX's counters with mlxfit's prediction of the same run.

    ``model``: a folder, a Hugging Face cache repo id, or with ``random_weights`` also a catalog
    or Hub id, a config.json, or a folder holding only config.json (nothing is downloaded: the
    model is built from its config by mlx-lm's classes, quantized as the config says, in
    ``dtype``, by default the checkpoint's). The prediction uses the backend MLX ran on (``cpu``
    on Linux) and the calibration ``fit`` uses. ``save``: append the record to ``results_file``
    (default ``~/.cache/mlxfit/measurements.jsonl``), which ``mlxfit calibrate`` reads.
    """
    from mlxfit import api
    from mlxfit.calibration import load_calibration
    from mlxfit.core import totals_at
    from mlxfit.memory import Run
    from mlxfit.sources import ModelSource, read_config, resolve_model
    from mlxfit.speed import decode_seconds

    require_mlx()
    _check_tokens(ctx, gen, prefill_step_size)
    if dtype is not None and dtype not in _DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(_DTYPES)}, not {dtype!r}")
    if dtype is not None and not random_weights:
        raise UsageError("--dtype applies to --random-weights only (a checkpoint has its dtype)")
    notes: list[str] = []

    cfg_file = _config_only(model) if random_weights else None
    src = None
    if cfg_file is None:
        src = resolve_model(model, revision=revision)
        if not random_weights and src.kind not in ("folder", "hf-cache"):
            raise UsageError(f"{model}: no weights on this machine ({src.kind}); pass "
                             "--random-weights to build it from its config (nothing downloaded)")
        config = src.config
    else:
        config = read_config(cfg_file)
    if random_weights:
        wdtype = (dtype or (_dtype_from_tensors(src.tensors) if src else None)
                  or _dtype_from_config(config) or "bfloat16")
    else:
        wdtype = _dtype_from_tensors(src.tensors) or "checkpoint"

    backend = _backend_in_use()
    run = Run(ctx=ctx, gen=gen, prefill_step=prefill_step_size, kv_bits=kv_bits,
              kv_group=kv_group_size, quantized_kv_start=quantized_kv_start,
              max_kv_size=max_kv_size, backend=backend)
    if src is not None:
        inputs = api.model_inputs(src)
        refuse_unsupported(inputs.cfg, run)

    kw = {"prefill_step_size": prefill_step_size, "gen_tokens": gen, "kv_bits": kv_bits,
          "kv_group_size": kv_group_size, "quantized_kv_start": quantized_kv_start,
          "max_kv_size": max_kv_size, "seed": seed}
    if src is None:
        # Refuse before building anything (the activation dtype is the one asked for).
        from mlxfit.config import parse_config

        refuse_unsupported(parse_config(config, act_bytes=4 if wdtype == "float32" else 2,
                                        where=str(cfg_file)), run)
        # No headers: the prediction's weights are the built model's tensors (exact by
        # construction; the other terms are still predicted from the config).
        built = build_model(config, dtype=wdtype, seed=seed)
        tensors = _tensors_of(built)
        del built
        gc.collect()
        where = cfg_file.parent if cfg_file.name == "config.json" else cfg_file
        src = ModelSource(name=str(where), kind="config", location=str(where), config=config,
                          tensors=tensors, files=())
        inputs = api.model_inputs(src)
        refuse_unsupported(inputs.cfg, run)
        notes.append("no safetensors headers: predicted weights are the built model's tensors")
    if random_weights:
        rec = measure_run(config, ctx, dtype=wdtype, **kw)
    else:
        rec = measure_folder(src.location, ctx, dtype_label=wdtype, **kw)

    cal = calibration or load_calibration(api.user_calibration())
    tot = totals_at(inputs.cfg, inputs.weights.total_bytes, run, cal)
    m = None
    try:
        m = api.machine_for(machine)
    except MlxfitError as e:
        notes.append(f"machine unknown ({e}): no decode speed predicted")
    bw = getattr(m, "bandwidth_gbs", None)
    tps = None
    if bw:
        tps = 1.0 / decode_seconds(inputs.cfg, run, inputs.weights, bw, cal.decode)[0]
    if backend == "cpu":
        notes.append("backend cpu: mlxfit predicts decode speed for Apple Silicon's unified "
                     "memory only; tok/s are measured, not predicted")
        tps = None
    elif not bw:
        notes.append("memory bandwidth unknown: no decode speed predicted (pass --machine)")
    if cal.source != "calibration.toml":
        notes.append(f"calibration: {cal.source}")
    notes.extend(inputs.source_notes)

    terms = compare_terms(rec, weights=inputs.weights.total_bytes, kv=tot.kv,
                          state=tot.state, transient=tot.transient, peak=tot.total,
                          decode_tps=tps)
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
                         "tied_embeddings": inputs.weights.tied_embeddings},
        "machine_info": None if m is None else {"name": m.name, "bandwidth_gbs": bw,
                                           "ram_bytes": m.ram_bytes},
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
        backend=backend, run=run, terms=terms, measured_peak_phase=_measured_phase(rec),
        predicted_peak_phase=tot.phase.name, calibration=cal.source, record=rec,
        saved_to=None if saved is None else str(saved), notes=tuple(notes),
    )


def _version() -> str:
    from mlxfit import __version__

    return __version__


def _measured_phase(rec: dict) -> str:
    if rec["peak_phase"] == "decode":
        return "decode"
    i = max(range(len(rec["chunks"])), key=lambda j: rec["chunks"][j]["peak_bytes"])
    return f"prefill chunk {i + 1} ({rec['chunks'][i]['tokens']} tokens)"


def measured_terms(rec: dict) -> dict:
    """Weights, caches, transient and peak of a record, all counted from the process's memory
    before the load (so that peak = weights + kv + state + transient, as predicted)."""
    base = rec.get("active_before_load_bytes", 0) or 0
    weights = rec.get("weights_measured_bytes", rec["active_after_load_bytes"] - base)
    peak = rec["peak_bytes"] - base
    state = rec.get("state_bytes_end")
    if state is None:  # older records: ArraysCache layers from the layer descriptions
        state = sum(_described_state(d) for d in rec.get("cache_layers", []))
    caches = rec["cache_bytes_end"]
    return {"weights": weights, "kv": caches - state, "state": state,
            "transient": peak - weights - caches, "peak": peak}


def _described_state(d: dict) -> int:
    if "parts" in d:
        return sum(_described_state(p) for p in d["parts"])
    return d["nbytes"] if "arrays" in d else 0


def compare_terms(rec: dict, *, weights: int, kv: int, state: int, transient: int, peak: int,
                  decode_tps: float | None) -> tuple[TermCheck, ...]:
    mt = measured_terms(rec)
    terms = [
        TermCheck("weights", mt["weights"], weights, exact=True,
                  note="active memory added by the load"),
        TermCheck("kv_cache", mt["kv"], kv, exact=True, note="bytes of the caches' arrays"),
    ]
    if mt["state"] or state:
        terms.append(TermCheck("recurrent_state", mt["state"], state, exact=True,
                               note="ArraysCache arrays"))
    terms += [
        TermCheck("transient", mt["transient"], transient,
                  note="peak - weights - final caches"),
        TermCheck("peak", mt["peak"], peak, note="mx.get_peak_memory() over the generation"),
        TermCheck("prefill_tok_s", rec.get("prefill_tok_s"), None, unit="tok/s",
                  note="not predicted"),
        TermCheck("decode_tok_s", rec.get("decode_tok_s"), decode_tps, unit="tok/s",
                  note=f"{rec.get('decode_steps')} steps at the end of the context"),
    ]
    return tuple(terms)


def append_record(rec: dict, results_file: str | Path | None = None) -> Path:
    """Append one record as a JSON line (default: ``~/.cache/mlxfit/measurements.jsonl``)."""
    path = Path(results_file).expanduser() if results_file is not None else results_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, default=str) + "\n")
    except OSError as e:
        raise MlxfitError(f"{path}: cannot append the measurement ({e.strerror or e})") from None
    return path


def measurement_to_json(m: Measurement) -> dict:
    """The ``--json`` object: the comparison, then the full record."""

    def num(x):
        return None if x is None else (round(x, 3) if isinstance(x, float) else x)

    return {
        "schema_version": 1,
        "model": m.model,
        "source_kind": m.source_kind,
        "random_weights": m.random_weights,
        "dtype": m.dtype,
        "backend": m.backend,
        "calibration": m.calibration,
        "run": {"ctx": m.run.ctx, "gen": m.run.gen, "prefill_step_size": m.run.prefill_step,
                "kv_bits": m.run.kv_bits, "kv_group_size": m.run.kv_group,
                "quantized_kv_start": m.run.quantized_kv_start,
                "max_kv_size": m.run.max_kv_size},
        "peak_phase": {"measured": m.measured_peak_phase, "predicted": m.predicted_peak_phase},
        "terms": [
            {"name": t.name, "unit": t.unit, "measured": num(t.measured),
             "predicted": num(t.predicted), "error": num(t.error), "exact": t.exact}
            for t in m.terms
        ],
        "notes": list(m.notes),
        "saved_to": m.saved_to,
        "record": m.record,
    }
