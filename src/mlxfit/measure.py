"""Ground-truth memory measurements of one mlx-lm generation, with random weights.

``measure_run`` builds a model from a config dict with mlx-lm's own model classes, gives it random
weights (cast and quantized the way ``mlx_lm.convert`` would), and runs ``mlx_lm.generate.
generate_step`` itself on random prompt tokens, so the caches, the chunked prefill, the
``mx.clear_cache`` calls and the quantize-the-cache hook are exactly mlx-lm's. It reads MLX's own
memory counters around that run. On MLX's CPU backend those counters are exact byte counts, which
is what the calibration of mlxfit's memory model needs.

Token accounting (read from ``generate_step``): a prompt of P tokens is prefilled as P-1 tokens in
chunks of ``prefill_step_size``; the last prompt token goes through one single-token step; each of
the G generated tokens is then fed back for one more step. The caches end holding P+G tokens, so a
run "at context ctx" uses P = ctx - G.

mlx and mlx_lm are imported inside the functions: mlxfit itself must import without them.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from mlxfit.errors import UsageError

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
    """Run mlx-lm's ``generate_step`` so the caches end at ``ctx`` tokens; return what MLX counted.

    All memory figures are bytes from MLX's counters. ``peak_bytes`` is the peak of the whole
    generation (prefill and decode) measured from a reset right after the weights were loaded and
    evaluated, so it includes the weights. Peaks are read segment by segment (each prefill chunk,
    then the decode phase: the last prompt token's step plus ``gen_tokens`` steps) with a reset
    after each read; the overall peak is the largest segment peak.
    """
    if ctx - gen_tokens < 2:
        raise UsageError(f"ctx ({ctx}) must exceed gen_tokens ({gen_tokens}) by at least 2")
    if gen_tokens < 1 or prefill_step_size < 1:
        raise UsageError("gen_tokens and prefill_step_size must be >= 1")

    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    mx.clear_cache()
    mx.reset_peak_memory()
    active_before_load = mx.get_active_memory()
    t0 = time.perf_counter()
    model = build_model(config, dtype=dtype, seed=seed)
    load_seconds = time.perf_counter() - t0
    load_peak = mx.get_peak_memory()
    mx.clear_cache()
    param_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    n_params = sum(v.size for _, v in tree_flatten(model.parameters()))
    active_after_load = mx.get_active_memory()

    vocab = _text_field(config, "vocab_size")
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
    return {
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
        "load_peak_bytes": load_peak,
        "peak_bytes": peak,
        "prefill_peak_bytes": prefill_peak,
        "decode_peak_bytes": decode_peak,
        "peak_phase": "prefill" if prefill_peak >= decode_peak else "decode",
        "cache_bytes_after_prefill": last["cache_bytes_after"],
        "cache_bytes_end": _total_cache_bytes(prompt_cache),
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
