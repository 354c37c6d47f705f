"""What ``measure`` measures and predicts: the config-only source, the weights' dtype, the backend.

Helpers of the twin ``mlxfit.measure``: ``config_only`` recognizes a config.json (or a
folder with no safetensors) for ``--random-weights``, ``tensors_of`` lists a built model's
tensors when there are no safetensors headers, ``dtype_from_tensors`` / ``dtype_from_config``
pick the dtype to build in, ``backend_in_use`` names the backend MLX runs on, and
``refuse_unsupported`` refuses the runs mlx-lm cannot do before anything is built. mlx is
imported inside the functions only.
"""

from __future__ import annotations

from pathlib import Path

from mlxfit.errors import UsageError
from mlxfit.estimate.memory import attn_groups, validate_run
from mlxfit.model.inputs import activation_bytes
from mlxfit.model.tensors import (
    FLOAT_DTYPES,
    MLX_FLOAT_DTYPES,
    MLX_TO_SAFETENSORS,
    SAFETENSORS_TO_MLX,
    TensorInfo,
)
from mlxfit.verbs.measure.run import text_field

_ACT_DTYPE = {4: "float32", 2: "bfloat16"}  # a 2-byte width from the weights builds in bfloat16


def tensors_of(model) -> tuple:
    from mlx.utils import tree_flatten  # mlx is optional: imported only to measure

    out = []
    for name, v in tree_flatten(model.parameters()):
        dt = str(v.dtype).rsplit(".", 1)[-1]
        out.append(TensorInfo.of(name, MLX_TO_SAFETENSORS.get(dt, "F32"), tuple(v.shape)))
    return tuple(out)


def config_only(spec: str) -> Path | None:
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


def dtype_from_tensors(tensors) -> str | None:
    floats = [t for t in tensors if t.dtype in FLOAT_DTYPES]
    if not floats:
        return None
    by_name = {t.name: t for t in tensors}
    for t in tensors:  # the embedding (or its scales): the dtype mlx-lm computes in
        if t.name.endswith(("embed_tokens.weight", "wte.weight")):
            if t.dtype in FLOAT_DTYPES:
                return SAFETENSORS_TO_MLX[t.dtype]
            s = by_name.get(t.name[: -len("weight")] + "scales")
            if s is not None and s.dtype in FLOAT_DTYPES:
                return SAFETENSORS_TO_MLX[s.dtype]
    b = activation_bytes(tensors)
    return _ACT_DTYPE.get(b)


def dtype_from_config(config: dict) -> str | None:
    v = text_field(config, "torch_dtype") or text_field(config, "dtype")
    return v if v in MLX_FLOAT_DTYPES else None


def backend_in_use() -> str:
    import mlx.core as mx  # mlx is optional: imported only to measure

    try:
        return "metal" if mx.metal.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - builds without mx.metal
        return "cpu"


def refuse_unsupported(cfg, run) -> None:
    """Runs mlx-lm cannot do: the same refusals as ``fit`` (validate_run), plus quantizing an
    MLA latent cache, which mlx-lm 0.32 accepts and then fails on (deepseek_v3's attention calls
    ``swapaxes`` on QuantizedKVCache's packed tuples: AttributeError)."""
    validate_run(cfg, run)
    # deepseek_v32 keeps its MLA latent in a CacheList, which mlx-lm never quantizes (no
    # to_quantized): only the plain-KVCache MLA families fail.
    if run.kv_quantized and not cfg.own_cache and any(
        a.mla for a, _ in attn_groups(cfg, run)
    ):
        raise UsageError(
            "kv_bits: this model's MLA attention caches a compressed latent that mlx-lm "
            "cannot use once quantized (its attention fails on QuantizedKVCache); run without "
            "kv_bits or keep quantized_kv_start above ctx", param="kv_bits",
            also=("quantized_kv_start", "ctx"),
        )
