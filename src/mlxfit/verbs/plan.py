"""Which per-layer cache plan a fit uses: the family table's, or one read from mlx-lm's own
classes through the oracle (``mlxfit.model.oracle``, the measure extra).

``--plan auto`` (the default): the table for a known family; for a family the table lacks, the
plan mlx-lm's own classes give when mlx-lm is importable (said in a note and in the JSON's
``plan_source``), else the plain-transformer estimate marked unverified. ``--plan table``: the
table only. ``--plan mlx-lm``: mlx-lm's plan, and for a known family a cross-check of the table
against mlx-lm's caches at the run's context, any disagreement reported as a warning.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mlxfit.errors import ConfigError, MlxfitError, OracleError, UsageError
from mlxfit.estimate.memory import Run, kv_bytes_final, per_token_bytes, state_bytes_final
from mlxfit.model.config import Layer, ModelConfig
from mlxfit.model.families import NOT_SUPPORTED, mlx_lm_module
from mlxfit.model.inputs import ModelInputs
from mlxfit.model.mlx_extra import mlx_missing_reason, require_mlx

PLANS = ("auto", "table", "mlx-lm")
STATE_CHECK_TOKENS = 4096


def check_plan(plan: str) -> None:
    if plan not in PLANS:
        raise UsageError(f"plan must be one of {', '.join(PLANS)}, got {plan!r}", param="plan")


def _same_cache(derived: Layer, table: Layer, act_bytes: int) -> bool:
    """Whether the table's layer holds what mlx-lm's cache holds: the same state bytes and
    the same growing cache (kind, window, bytes per token)."""
    if derived.state_bytes != table.state_bytes:
        return False
    a, b = derived.attn, table.attn
    if a is None or b is None:
        return a is None and (b is None or not b.cache.owns_memory)
    return (a.cache == b.cache
            and per_token_bytes(a, act_bytes) == per_token_bytes(b, act_bytes))


def _derived(cfg: ModelConfig, config: dict[str, Any]) -> ModelConfig:
    """``cfg`` with its layers replaced by the plan mlx-lm's own caches give. The transient
    terms follow each layer's kind: where the family table's layer holds the same cache it
    is kept (its MLA latent, heads and kernel width, its mixer), so both plans size the same
    prefill; a family the table lacks gets the widths of the shared recurrence mlx-lm runs."""
    # The oracle needs mlx / mlx-lm (the measure extra): imported when a plan is derived only
    from mlxfit.model.oracle import derive_layers, derive_mixer

    like = next((ly.attn for ly in cfg.layers if ly.attn is not None), None)
    layers, run = derive_layers(config, cfg.act_bytes, like)
    mixer: dict[str, Any] = {}
    if len(layers) == len(cfg.layers):  # keep the table's MoE flags (the router's cost)
        layers = [t if cfg.family_known and _same_cache(ly, t, cfg.act_bytes)
                  else Layer(ly.attn, ly.state_bytes, ly.state_kind, moe=t.moe)
                  for ly, t in zip(layers, cfg.layers, strict=True)]
    if not cfg.family_known:
        mixer = derive_mixer(run)
    return replace(cfg, layers=tuple(layers), num_layers=len(layers), own_cache=run.own_cache,
                   family_known=True, plan_source=f"mlx-lm {run.mlx_lm_version}",
                   warnings=tuple(w for w in cfg.warnings if "unknown model_type" not in w),
                   **mixer)


def _checked_at(cfg: ModelConfig, run: Run) -> int:
    """The context the cross-check runs at (recurrent mixers: capped, see _cross_check)."""
    return min(run.ctx, STATE_CHECK_TOKENS) if cfg.state_bytes else run.ctx


def _cross_check(cfg: ModelConfig, config: dict[str, Any], run: Run) -> str | None:
    """None when the table's KV and state bytes equal mlx-lm's caches at this run, else the
    disagreement in words."""
    from mlxfit.model.oracle import cache_plan  # the measure extra: only with mlx-lm

    dtype = "float32" if cfg.act_bytes == 4 else "bfloat16"
    # Recurrent mixers build a per-token graph on the CPU path: check them at a capped context
    # (their state is constant; their KV layers follow the same growth rule at any length).
    ctx = _checked_at(cfg, run)
    check = replace(run, ctx=ctx, gen=min(run.gen, ctx - 1), kv_bits=None)
    got = cache_plan(config, ctx, prefill_step_size=run.prefill_step_size, gen=check.gen,
                     max_kv_size=run.max_kv_size, dtype=dtype)
    table = (kv_bytes_final(cfg, check), state_bytes_final(cfg, check))
    if table == (got.kv_bytes, got.state_bytes):
        return None
    return (f"the family table and mlx-lm {got.mlx_lm_version} disagree at {ctx:,} tokens: "
            f"table KV {table[0]:,} B + state {table[1]:,} B, mlx-lm KV {got.kv_bytes:,} B + "
            f"state {got.state_bytes:,} B; sized with mlx-lm's plan")


def with_plan(inputs: ModelInputs, config: dict[str, Any], plan: str,
              run: Run) -> tuple[ModelInputs, tuple[str, ...], tuple[str, ...]]:
    """The inputs with the chosen plan, and the (warnings, notes) saying which and why."""
    check_plan(plan)
    cfg = inputs.cfg
    if plan == "table" or (plan == "auto" and cfg.family_known):
        return inputs, (), ()
    if plan == "auto" and (mlx_missing_reason() is not None
                           or mlx_lm_module(cfg.model_type) in NOT_SUPPORTED):
        return inputs, (), ()  # the unverified warning of parse_config stands
    if plan == "mlx-lm":
        require_mlx()
    warnings: list[str] = []
    notes: list[str] = []
    try:
        disagreement = None
        if plan == "mlx-lm" and cfg.family_known:
            disagreement = _cross_check(cfg, config, run)
        try:
            derived = _derived(cfg, config)
        except OracleError as e:
            # A cache no per-token plan describes (deepseek_v41's LayerCache): the table's plan,
            # when it matches mlx-lm's caches at this run, is the one that sizes it.
            if not (plan == "mlx-lm" and cfg.family_known and disagreement is None):
                raise
            kept = (f"cross-checked: the family table matches mlx-lm's caches at "
                    f"{_checked_at(cfg, run):,} tokens; kept the table's plan ({e})")
            return inputs, (), (kept,)
        if disagreement:
            warnings.append(disagreement)
        elif plan == "mlx-lm" and cfg.family_known:
            notes.append(f"cross-checked: the family table matches {derived.plan_source}'s "
                         f"caches at {_checked_at(cfg, run):,} tokens")
    except ConfigError:
        raise  # a field mlx-lm itself requires is missing: one line, exit 2
    except MlxfitError as e:
        if plan == "mlx-lm":
            raise
        warnings.append(f"{e}; falling back to the plain-transformer estimate (UNVERIFIED)")
        return inputs, tuple(warnings), ()
    notes.append(f"cache plan read from {derived.plan_source}'s own classes "
                 f"(model_type {cfg.model_type!r}): nothing downloaded, nothing evaluated")
    return replace(inputs, cfg=derived), tuple(warnings), tuple(notes)
