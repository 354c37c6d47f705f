"""How a fit is run, as its report and JSON show it: the result type of the serving terms
(``estimate.serving.summary``), carried by ``FitResult.serving``; apart from serving.py so the
pure core's result can name it without importing the serving arithmetic built on top of it."""

from __future__ import annotations

from dataclasses import dataclass

from mlxfit.estimate.batched import BatchedStep


@dataclass(frozen=True)
class ServingSummary:
    """How a fit is run, as the report and JSON show it (render.fit.serving_to_json): the
    mlx-lm command, the serving set-up (``mode`` None for a plain generate run, whose other
    set-up fields are then not shown) and the batched decode estimate, when there is one."""

    command: str
    mode: str | None = None  # "mlx_lm.server" | "mlx_lm.generate"; None: no serving set-up
    parallel: int = 1
    prefill_batch: int = 1
    prompt_cache: int = 0
    prompt_cache_default: bool = False
    batched: bool = False
    draft_model: str | None = None
    num_draft_tokens: int | None = None
    prefill_step_size: int | None = None
    batched_decode: BatchedStep | None = None  # sequences > 1 on a machine with a bandwidth
