"""`mlxfit measure`'s progress on a terminal: one line on stderr, redrawn in place (stage,
prefill chunks done / total, decode steps, elapsed), gone when the run ends. Nothing at all
when stderr is not a terminal; warnings are printed either way, as they come."""

from __future__ import annotations

import math
import time
from typing import Any

from mlxfit.mlx_lm_defaults import DEFAULT_PREFILL_STEP_SIZE


class _Now:
    """The line as of now: Live redraws it 4 times a second, so the clock moves within a chunk
    (one chunk can take minutes on MLX's CPU backend)."""

    def __init__(self, line: ProgressLine):
        self.line = line

    def __rich__(self) -> str:
        return self.line.text(*self.line.state) if self.line.state else ""


class ProgressLine:
    def __init__(self, console: Any, prefill_step_size: int | None = None):
        self.console = console
        self.step = prefill_step_size
        self.live: Any = None
        self.t0 = time.monotonic()
        self.state: tuple[str, int, int] | None = None

    def __enter__(self) -> ProgressLine:  # noqa: PYI034 (typing.Self needs Python 3.11)
        if self.console.is_terminal:
            from rich.live import Live  # rich is heavy: only a terminal run shows progress

            self.live = Live(_Now(self), console=self.console, transient=True,
                             refresh_per_second=4)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
            self.live = None

    def text(self, stage: str, done: int, total: int) -> str:
        secs = time.monotonic() - self.t0
        if stage == "load":
            what = "loading the model (building it, with --random-weights)"
        elif stage == "prefill":
            step = self.step or DEFAULT_PREFILL_STEP_SIZE
            what = (f"prefill {done:,} of {total:,} prompt tokens (chunk "
                    f"{math.ceil(done / step)} of {math.ceil(total / step)})")
        else:
            what = f"decode {done:,} of {total:,} tokens"
        return f"measure: {what}, {secs:,.0f} s"

    def update(self, stage: str, done: int, total: int) -> None:
        self.state = (stage, done, total)
        if self.live is not None:  # drawn now, then redrawn with the clock moving
            self.live.refresh()

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}", soft_wrap=True, highlight=False)
