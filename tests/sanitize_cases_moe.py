"""Checkpoint layouts for the moe families' sanitize replays (model/sanitize_moe.py), each
written by undoing mlx-lm's sanitize on the model's own parameters; see tests/sanitize_oracle.py.
Together a family's cases must run every line of its mlx-lm sanitize (or name the line in
UNREACHABLE with why no checkpoint mlx-lm loads reaches it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sanitize_oracle import Layout

Case = tuple[dict[str, Any], Layout]

CASES: dict[str, Callable[[], list[Case]]] = {}
# family -> {source text of a sanitize line: why no layout mlx-lm loads runs it}
UNREACHABLE: dict[str, dict[str, str]] = {}
