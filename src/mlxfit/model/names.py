"""A model's name without its quantization: what the quant variants of one model share."""

from __future__ import annotations

import re

# One "-" or "_" separated token of a quantization suffix: 4bit, 8-bits, bf16, mxfp4, Q8, DWQ...
# compiled on first use (re caches it): start-up
_QUANT_TOKEN = (
    r"(?i)^(?:\d+(?:\.\d+)?-?bits?|bf16|fp16|f16|f32|fp32|float16|bfloat16|mlx|dwq|awq"
    r"|gptq|mxfp4|nvfp4|mxfp8|fp8|q\d+(?:_[a-z0-9]+)?|mixed|\d+_\d+|quantized)$"
)


def base_name(name: str) -> str:
    """The name without its organization and its trailing quantization tokens, as written:
    'mlx-community/Qwen3-4B-Instruct-2507-8bit' -> 'Qwen3-4B-Instruct-2507',
    'mlx-community/gpt-oss-20b-MXFP4-Q8' -> 'gpt-oss-20b'."""
    parts = re.split(r"([-_])", name.rsplit("/", 1)[-1])  # tokens, with their separators
    while len(parts) > 1 and re.match(_QUANT_TOKEN, parts[-1]):
        del parts[-2:]
    # "...-8bit" after stripping can leave "mixed_3_6" style pieces; the loop handles those.
    return "".join(parts)


def quant_family(name: str) -> str:
    """``base_name`` folded for comparing (lower case, "-" for "_"): two repo ids name the same
    model in another quantization when their families are equal:
    'mlx-community/Qwen3-30B-A3B-Instruct-2507-8bit' -> 'qwen3-30b-a3b-instruct-2507'."""
    return base_name(name).replace("_", "-").lower()
