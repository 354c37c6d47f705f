"""Tensor descriptors: what a safetensors header (or a catalog manifest) says about one tensor."""

from __future__ import annotations

from dataclasses import dataclass

# safetensors dtype names -> bytes per element. Sub-byte types do not occur in MLX files
# (MLX packs 4-bit weights into U32), so every size here is whole bytes.
DTYPE_BYTES: dict[str, int] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
    "C64": 8,
}

# mlx.core dtype names (str(mx.bfloat16) == "mlx.core.bfloat16") -> the safetensors names
# mx.save_safetensors writes for them: the one place the two spellings meet.
MLX_TO_SAFETENSORS: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "uint16": "U16",
    "int16": "I16",
    "float16": "F16",
    "bfloat16": "BF16",
    "uint32": "U32",
    "int32": "I32",
    "float32": "F32",
    "uint64": "U64",
    "int64": "I64",
    "float64": "F64",
    "complex64": "C64",
}
SAFETENSORS_TO_MLX: dict[str, str] = {v: k for k, v in MLX_TO_SAFETENSORS.items()}

# The floating dtypes mlx-lm computes activations and caches in (safetensors names), and the
# same as mlx names: the dtypes `measure --random-weights` builds in.
FLOAT_DTYPES = ("F32", "BF16", "F16")
MLX_FLOAT_DTYPES = tuple(SAFETENSORS_TO_MLX[d] for d in FLOAT_DTYPES)


def float_bytes(mlx_dtype: object) -> int | None:
    """Bytes per element of an mlx floating dtype name ("bfloat16" -> 2), None for any other."""
    if mlx_dtype not in MLX_FLOAT_DTYPES:
        return None
    return DTYPE_BYTES[MLX_TO_SAFETENSORS[str(mlx_dtype)]]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: name, safetensors dtype name, shape, and its exact size in bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @staticmethod
    def of(name: str, dtype: str, shape: tuple[int, ...] | list[int]) -> TensorInfo:
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        return TensorInfo(name, dtype, tuple(shape), n)
