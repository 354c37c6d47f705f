"""Presentation only: each verb's result as Rich text and as JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from mlxfit.estimate.memory import Run

# The version of every verb's --json object (fit, matrix, pick, cluster, measure, calibrate).
SCHEMA_VERSION = 1


def run_to_json(run: Run) -> dict[str, Any]:
    """The run object of schema 1. Its prefill key keeps the name schema 1 was published with
    ("prefill_step"), although the code calls it prefill_step_size end to end, as mlx-lm
    does: renaming a key is a new schema version, not a refactor."""
    d = asdict(run)
    return {("prefill_step" if k == "prefill_step_size" else k): v for k, v in d.items()}


def seconds_to_json(s: float | None) -> float | None:
    """Seconds (time to first token) as every verb's JSON gives them: three decimals."""
    return round(s, 3) if s is not None else None


def tps_to_json(tps: float | None) -> float | None:
    """Tokens per second as every verb's JSON gives them: two decimals (so a matrix row and
    `fit --json` on that SKU compare equal), or None where no speed is predicted."""
    return round(tps, 2) if tps is not None else None
