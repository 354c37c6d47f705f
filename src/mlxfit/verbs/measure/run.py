"""Driving mlx-lm: build or load a model, run its own ``generate_step``, and read MLX's counters.

``build_model`` builds a config with mlx-lm's own classes and random weights (cast and quantized
the way ``mlx_lm.convert`` would); ``measure_run`` measures such a model and ``measure_folder`` a
checkpoint folder loaded by ``mlx_lm.utils.load_model``; both go through ``_measure``, which runs
``mlx_lm.generate.generate_step`` on random prompt tokens and returns one record (a dict) of
memory counters, cache descriptions, timings and the environment. ``save_random_model`` writes a
random model as a checkpoint folder. The optional ``measure`` extra is checked by
``mlxfit.model.mlx_extra.require_mlx``; mlx and mlx_lm are imported inside the functions only.
"""

from __future__ import annotations

import gc
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlxfit.errors import UsageError
from mlxfit.estimate.memory import check_ctx
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.model.mlx_extra import require_mlx
from mlxfit.model.oracle import mlx_lm_classes
from mlxfit.model.tensors import MLX_FLOAT_DTYPES
from mlxfit.verbs.measure.cache import describe_cache, state_cache_bytes, total_cache_bytes

# on_progress(stage, done, total): what the CLI shows while mlx-lm runs (never timed).
Progress = Callable[[str, int, int], None]


def text_field(config: dict, key: str) -> Any:
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
    # mlx / mlx-lm are optional (the measure extra): imported to measure only
    import mlx.core as mx
    from mlx import nn
    from mlx.utils import tree_map_with_path

    if dtype not in MLX_FLOAT_DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(MLX_FLOAT_DTYPES)}, not {dtype!r}")
    mx.random.seed(seed)
    model_class, args_class = mlx_lm_classes(config)
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


def _environment() -> dict:
    # mlx / mlx-lm are optional (the measure extra): imported to measure only
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

# --------------------------------------------------------------------------- one measured run


def check_tokens(ctx: int, gen_tokens: int, prefill_step_size: int) -> None:
    check_ctx(ctx)  # "--ctx 0" is worded as fit words it
    if gen_tokens < 1 or prefill_step_size < 1:
        raise UsageError("gen and prefill_step_size must be >= 1 (mlx-lm generates at "
                         "least one token)", param="gen" if gen_tokens < 1 else
                         "prefill_step_size", also=("prefill_step_size",) if gen_tokens < 1
                         else ("gen",))
    if ctx - gen_tokens < 2:
        raise UsageError(f"ctx ({ctx}) must exceed gen ({gen_tokens}) by at least 2",
                         param="ctx", also=("gen",))


def _param_summary(model) -> tuple[int, int]:
    # mlx / mlx-lm are optional (the measure extra): imported to measure only
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
    on_progress: Progress | None = None,
) -> dict:
    """Load (``load()`` returns the model), then run generate_step; see ``measure_run``.
    ``on_progress(stage, done, total)``: "load" (0, 0) before the load, "prefill" (tokens
    processed, prompt tokens) after each chunk, "decode" (steps, steps) after each token."""
    tell = on_progress or (lambda stage, done, total: None)
    # mlx / mlx-lm are optional (the measure extra): imported to measure only
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
    tell("load", 0, 0)
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

    vocab = text_field(config, "vocab_size") or 1000
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
            tell("prefill", processed, total)  # before the clock starts: never timed
            marks["prefill_start"] = time.perf_counter()
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
                "cache_bytes_after": total_cache_bytes(prompt_cache),
                "cache_classes_after": [type(c).__name__ for c in prompt_cache],
                "seconds": now - marks.get("last_chunk_end", marks["prefill_start"]),
            }
        )
        # The display is told between the chunk's clock and the next one's, so its time is
        # in neither; the arrays it reads are MLX's counters only (no allocation).
        tell("prefill", processed, total)
        marks["last_chunk_end"] = time.perf_counter() if on_progress else now
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
            tell("decode", generated, gen_tokens)
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
        "cache_bytes_end": total_cache_bytes(prompt_cache),
        "state_bytes_end": sum(state_cache_bytes(c) for c in prompt_cache),
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
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE,
    gen_tokens: int = 1,
    kv_bits: int | None = None,
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: int | None = None,
    dtype: str = "float32",
    seed: int = 0,
    on_progress: Progress | None = None,
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
    check_tokens(ctx, gen_tokens, prefill_step_size)
    if dtype not in MLX_FLOAT_DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(MLX_FLOAT_DTYPES)}, not {dtype!r}")
    rec = _measure(
        lambda: build_model(config, dtype=dtype, seed=seed), config, ctx,
        prefill_step_size=prefill_step_size, gen_tokens=gen_tokens, kv_bits=kv_bits,
        kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
        max_kv_size=max_kv_size, dtype=dtype, seed=seed, on_progress=on_progress,
    )
    rec["random_weights"] = True
    return rec


def measure_folder(
    folder: str | Path,
    ctx: int,
    *,
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE,
    gen_tokens: int = 1,
    kv_bits: int | None = None,
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: int | None = None,
    seed: int = 0,
    dtype_label: str = "checkpoint",
    on_progress: Progress | None = None,
) -> dict:
    """``measure_run`` for a checkpoint folder loaded by ``mlx_lm.utils.load_model`` (real
    weights; the tokenizer is not needed: the prompt is random token ids)."""
    check_tokens(ctx, gen_tokens, prefill_step_size)
    # mlx / mlx-lm are optional (the measure extra): imported to measure only
    from mlx_lm.utils import load_config, load_model

    folder = Path(folder)
    config = load_config(folder)
    rec = _measure(
        lambda: load_model(folder)[0], config, ctx,
        prefill_step_size=prefill_step_size, gen_tokens=gen_tokens, kv_bits=kv_bits,
        kv_group_size=kv_group_size, quantized_kv_start=quantized_kv_start,
        max_kv_size=max_kv_size, dtype=dtype_label, seed=seed, on_progress=on_progress,
    )
    rec["random_weights"] = False
    return rec


def save_random_model(config: dict, folder: str | Path, *, dtype: str = "float32",
                      seed: int = 0) -> Path:
    """Write ``config`` with random weights as an mlx-lm checkpoint folder (config.json and
    model.safetensors, as ``mlx_lm.convert`` saves them): a tiny model to measure or size."""
    require_mlx()
    # mlx / mlx-lm are optional (the measure extra): imported to measure only
    from mlx_lm.utils import save_config, save_model

    folder = Path(folder)
    model = build_model(config, dtype=dtype, seed=seed)
    save_model(folder, model, donate_model=True)
    save_config(dict(config), folder / "config.json")
    del model
    gc.collect()
    return folder
