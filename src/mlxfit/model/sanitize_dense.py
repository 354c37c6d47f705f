"""Dense decoder families (rotary buffers, tied heads, renamed or fused projections): mlx-lm 0.32.2's ``Model.sanitize`` replayed on tensor descriptors, one function per
family, line by line from mlx_lm/models/<family>.py. Checked against mlx-lm's own sanitize on
generated checkpoints (tests/test_sanitize_replay.py, cases in tests/sanitize_cases_dense.py).

Families: lille-130m, internlm2, internlm3, granite, hunyuan_v1_dense, minicpm, nemotron-nas, plamo3, youtu_llm, nanbeige, olmo2, phi3small, seed_oss, apertus, glm, smollm3, talkie, bitnet, baichuan_m1, mimo, gptj, mellum, gpt2, gpt_neox, ministral3, muse_glimmer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlxfit.model.sanitize_ops import Tensors, drop


def _internlm2(ts: Tensors, cfg: dict[str, Any]) -> Tensors:
    """internlm2.py: the precomputed rotary frequencies dropped."""
    return drop(ts, lambda k: "attention.rope.inv_freq" not in k)


SANITIZE: dict[str, Callable[[Tensors, dict[str, Any]], Tensors]] = {
    "internlm2": _internlm2,
}
