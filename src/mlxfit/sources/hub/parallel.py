"""The parallel reads of one fetch, on daemon threads: the first failure cancels the rest, the
whole fetch has a wall-clock deadline, and Ctrl-C returns at once. Daemon threads, not a
``ThreadPoolExecutor``: the interpreter joins an executor's threads at exit, so a request held
open by a slow server kept the process alive long after SIGINT (issue 13); a daemon thread
still mid-request when mlxfit answers is simply dropped with the process."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from mlxfit.errors import Cancelled, MlxfitError

Job = tuple[Any, Callable[[], Any]]

# After a failure, how long the others get to stop: a read in flight ends at its next chunk.
JOIN_GRACE_SECONDS = 2.0


def run_parallel(jobs: Sequence[Job], workers: int, cancelled: threading.Event,
                 deadline: float, too_slow: Callable[[], MlxfitError],
                 on_done: Callable[[Any], None] | None = None) -> list[tuple[Any, Any]]:
    """(key, result) of every job, in completion order, on up to ``workers`` threads. The
    first exception is raised once the running jobs have stopped (they see ``cancelled`` at
    their next read or retry; never waited for past ``deadline``, a ``time.monotonic()``).
    Past ``deadline``, ``too_slow()`` is raised; on KeyboardInterrupt nothing is waited for."""
    todo: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    done: queue.SimpleQueue[tuple[Any, bool, Any]] = queue.SimpleQueue()

    def work() -> None:
        while not cancelled.is_set():
            try:
                key, fn = todo.get_nowait()
            except queue.Empty:
                return
            try:
                done.put((key, True, fn()))
            except BaseException as e:  # noqa: BLE001 (handed to the caller's thread)
                done.put((key, False, e))

    threads = [threading.Thread(target=work, daemon=True, name="mlxfit-hub")
               for _ in range(max(1, min(workers, len(jobs))))]
    for t in threads:
        t.start()
    out: list[tuple[Any, Any]] = []
    try:
        while len(out) < len(jobs):
            left = deadline - time.monotonic()
            if left <= 0:
                raise too_slow()
            try:
                key, ok, value = done.get(timeout=min(left, 0.25))  # Ctrl-C lands within this
            except queue.Empty:
                continue
            if not ok:
                if isinstance(value, Cancelled):
                    continue  # the failure that cancelled it comes on its own
                raise value
            out.append((key, value))
            if on_done is not None:
                on_done(key)
    except KeyboardInterrupt:
        cancelled.set()
        raise
    except BaseException:
        cancelled.set()
        # Running jobs stop at their next read or retry: wait for that (nothing should touch
        # the network once we have answered), but never long for a server holding one open.
        grace = min(deadline, time.monotonic() + JOIN_GRACE_SECONDS)
        for t in threads:
            t.join(max(0.0, grace - time.monotonic()))
        raise
    cancelled.set()
    return out
