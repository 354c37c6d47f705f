"""The `serve-plan` twin: how many concurrent requests mlx_lm.server can hold at a context on
this Mac, at what throughput, with which flags.

Every row is ``verbs.fit.fit_served`` with ``Serving(parallel=N, prompt_cache=k)``: the plan
at N is exactly ``mlxfit.fit(model, ctx, parallel=N, prompt_cache=k)`` (a test pins it), and
its speed is the same batched step ``fit`` reports (``estimate.batched.batched_step``).
What mlx_lm.server does is in docs/serving.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from mlxfit.calibration.constants import Calibration
from mlxfit.errors import UsageError
from mlxfit.estimate.batched import seq_cache_bytes
from mlxfit.estimate.memory import run_from
from mlxfit.estimate.serving import (
    SERVER_PROMPT_CONCURRENCY,
    Serving,
    batch_blockers,
    command_line,
)
from mlxfit.estimate.solve import FitResult, largest_true
from mlxfit.hardware.resolve import Machine
from mlxfit.json_result import JsonResult
from mlxfit.mlx_lm_defaults import DEFAULT_PREFILL_STEP_SIZE
from mlxfit.model.inputs import model_arrays, model_inputs
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.edges import (
    calibration_for_user,
    check_machine_params,
    machine_for,
    this_machine_warnings,
)
from mlxfit.verbs.fit import fit_served, planned_serving

# The largest concurrency searched without --users: far beyond where a Mac's aggregate
# throughput saturates, and mlx_lm.server's --decode-concurrency default is 32.
MAX_CONCURRENCY = 512

WARN_BYTES_CAP = (
    "--prompt-cache-bytes is enforced only when a request joins a running batch (the server "
    "trims the cache to the cap minus the batch's own caches); a finished request's cache is "
    "inserted without a trim, and requests served one at a time (a draft model, --kv-bits, a "
    "request with images or a seed) never trim by bytes. --prompt-cache-size is always "
    "enforced, so this plan sizes the cache by that count")
WARN_SEQUENTIAL = (
    "mlx_lm.server stops batching for a request with a seed or images and for the whole "
    "server with --draft-model or --kv-bits: requests are then served one at a time, and the "
    "throughput below does not apply")
WARN_CONTEXT = (
    "every figure assumes each request ends within --ctx tokens (prompt + generated): a "
    "longer conversation grows its cache beyond the plan (the server has no per-request "
    "context limit; --max-tokens caps only the generated part)")


@dataclass(frozen=True)
class PlanRow:
    concurrency: int
    total_bytes: int
    fits: bool
    aggregate_tps: float | None
    per_user_tps: float | None
    bound: str | None
    verdict: str = "fits"  # FitResult.verdict at this concurrency (issue 27)


@dataclass(frozen=True)
class ServePlan(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.serve_plan:serve_plan_to_json"
    model: str
    machine_name: str
    usable_bytes: int
    ctx: int
    users: int | None
    concurrency: int  # the plan's --decode-concurrency (0: not even one request fits)
    max_concurrency: int  # the largest that fits with no prompt cache
    batched: bool  # whether mlx_lm.server would batch this model at all
    result: FitResult | None  # fit_served at the plan
    prompt_cache_size: int
    # The --prompt-cache-bytes of the command line (None when the server serves one request at
    # a time: it never applies the byte cap there)
    prompt_cache_bytes: int | None
    bytes_per_cached_prompt: int
    aggregate_tps: float | None
    per_user_tps: float | None
    ttft_seconds: float | None  # one request's prompt alone (estimate/compute.predicted_ttft)
    # A full prompt batch prefilled together: prefill is compute-bound, so B prompts take B
    # times one (their chunks are one B x L tensor; only the weights are read once).
    ttft_batch_seconds: float | None
    command: str | None
    rows: tuple[PlanRow, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    machine: Machine | None = None  # the machine planned for (the JSON's machine object)

    @property
    def fits(self) -> bool:
        """The plan answers the question asked: the --users asked for fit (without --users, at
        least one request does). The CLI's exit code: 0 when it fits, 1 when not."""
        return self.concurrency >= (self.users or 1)

    @property
    def verdict(self) -> str:
        """The plan's FitResult verdict (estimate/bands.verdict); "does_not_fit" without one or
        when the --users asked for do not fit."""
        return self.result.verdict if self.result is not None and self.fits else "does_not_fit"


def _table_sizes(n_max: int, users: int | None) -> list[int]:
    sizes = {1, n_max, n_max + 1}
    k = 2
    while k < n_max:
        sizes.add(k)
        k *= 2
    if users:
        sizes.add(users)
    return sorted(s for s in sizes if s >= 1)


def serve_plan(
    model: str,
    ctx: int = 32768,
    *,
    machine: str | None = None,
    users: int | None = None,
    memory_budget_gb: float | None = None,
    macos: int | None = None,
    revision: str | None = None,
    prefill_step_size: int = DEFAULT_PREFILL_STEP_SIZE,
    calibration: Calibration | None = None,
    progress: bool = False,
) -> ServePlan:
    """The largest number of concurrent ``ctx``-token requests ``mlx_lm.server`` can hold for
    ``model`` on the machine (``users``: plan for that many, when they fit), the throughput
    and time to first token there, the prompt-cache budget left, and the command line."""
    run = run_from(ctx=ctx, prefill_step_size=prefill_step_size)
    check_machine_params(memory_budget_gb, macos)
    if users is not None and (isinstance(users, bool) or not 1 <= users <= 4096):
        raise UsageError(f"users must be between 1 and 4096, got {users}", param="users")
    cal = calibration_for_user(calibration)
    src = resolve_model(model, revision=revision, progress=progress)
    inputs = model_inputs(src)
    arrays = model_arrays(src)
    m = machine_for(machine, memory_budget_gb, macos)
    cfg = inputs.cfg
    warnings = [*this_machine_warnings(machine), WARN_CONTEXT, WARN_BYTES_CAP, WARN_SEQUENTIAL]
    blockers = batch_blockers(cfg, run, Serving(parallel=2))
    batched = not blockers
    if not batched:
        warnings.insert(0, f"mlx_lm.server serves this model one request at a time "
                        f"({' and '.join(blockers)}): the plan is for one request")

    def at(n: int, k: int = 0) -> FitResult:
        return fit_served(inputs, run, m, cal, Serving(parallel=n, prompt_cache=k), arrays,
                          model_ref=model)

    hi = 1 if not batched else (users or MAX_CONCURRENCY)
    n_max = largest_true(lambda n: at(n).runs, hi)
    if users and n_max == users:
        # More would fit too: the table shows how far.
        n_table = largest_true(lambda n: at(n).runs, MAX_CONCURRENCY) if batched else 1
    else:
        n_table = n_max
    n = n_max
    per = seq_cache_bytes(cfg, run)
    k, r, cap = 0, None, 0
    if n:
        # The server trims to (cap - the batch's own caches): with every sequence at the
        # context that leaves k entries. The rule `fit --parallel` applies too.
        sv = planned_serving(inputs, run, m, cal, n, arrays, model)
        k, cap = sv.cached_prompts, sv.prompt_cache_bytes or 0  # None there: all 10
        r = at(n, k)
        if r.watchdog:  # the one rule fit, matrix and pick apply (FitResult.watchdog)
            warnings.insert(0, r.watchdog)
        if k == 0:
            warnings.append(f"no room for cached prompts at {n} concurrent requests: each costs "
                            f"{per / 1e9:.2f} GB; plan fewer requests to keep some")
    elif n_max == 0:
        warnings.append(f"not even one {run.ctx:,}-token request fits on {m.name}")
    rows = []
    for size in _table_sizes(n_table, users):
        rr = at(size, k)
        bd = rr.serving.batched_decode if size > 1 and rr.serving is not None else None
        if size == 1 and rr.fits and rr.predicted_decode_tps:
            agg = per_user = rr.predicted_decode_tps
            bound = "memory"
        elif bd:
            agg, per_user, bound = bd.aggregate_tps, bd.per_sequence_tps, bd.bound
        else:
            agg = per_user = bound = None
        rows.append(PlanRow(size, rr.total_bytes, rr.runs, agg, per_user, bound, rr.verdict))
        if not batched:
            break
    plan_row = next((x for x in rows if x.concurrency == n), None)
    ttft = r.predicted_ttft_s if r is not None else None
    ttft_b = ttft * min(n, SERVER_PROMPT_CONCURRENCY) if ttft is not None else None
    notes = list(r.notes if r is not None else ())
    if n and ttft is None:
        notes.append("time to first token unknown: no compute figures for this machine")
    command = None
    if n and batched:
        command = command_line(model, run, Serving(parallel=n, prompt_cache=k,
                                                    prompt_cache_bytes=cap))
    elif n:
        command = command_line(model, run, Serving(parallel=1, prompt_cache=k))
    return ServePlan(
        model=inputs.name, machine_name=m.name, usable_bytes=m.usable_bytes, ctx=run.ctx,
        users=users, concurrency=n, max_concurrency=n_table, batched=batched, result=r,
        prompt_cache_size=k, prompt_cache_bytes=cap if batched and n else None,
        bytes_per_cached_prompt=per,
        aggregate_tps=plan_row.aggregate_tps if plan_row else None,
        per_user_tps=plan_row.per_user_tps if plan_row else None,
        ttft_seconds=ttft, ttft_batch_seconds=ttft_b, command=command, rows=tuple(rows),
        warnings=tuple(warnings), notes=tuple(notes), machine=m)
