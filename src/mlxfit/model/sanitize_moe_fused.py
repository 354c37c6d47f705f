"""Mixture-of-experts families with fused, split or renamed expert tensors: mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_moe_fused.py).

Families: hunyuan, gpt_oss, mimo_v2_flash, minimax, gear, spark2_5, laguna, step3p5, bailing_moe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.model.sanitize_ops import Tensors

SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {}
