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
