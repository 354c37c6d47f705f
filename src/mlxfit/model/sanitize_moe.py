"""Mixture-of-experts families whose sanitize stacks per-expert tensors: mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_moe.py).

Families: deepseek, qwen2_moe, olmoe, phixtral, phimoe, Klear, granitemoe, dots1, solar_open, afmoe, ernie4_5_moe, exaone_moe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.model.sanitize_ops import Tensors

SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {}
