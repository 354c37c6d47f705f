"""Differential check of one run: mlxfit's cache bytes against mlx-lm's own caches.

The run is generate_step's: the first n-1 tokens prefilled in chunks of S, then one token
decoded, under ``--kv-bits`` / ``--kv-group-size`` / ``--quantized-kv-start`` /
``--max-kv-size``. mlxfit's answer is the pure core's (``parse_config`` -> ``as_mlx_lm_runs`` ->
``validate_run`` -> ``kv_bytes_final`` + ``state_bytes``, what ``fit`` prints as kv_cache and
state); mlx-lm's is the lazy oracle's (``mlxfit.model.oracle.cache_plan``: the bytes its cache
objects hold, or the error its own code raises). Used by tests/test_difffuzz.py and
bench/difffuzz.py; the measure extra only (mlx, mlx-lm).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxfit.errors import ConfigError, MlxfitError, OracleError, UsageError
from mlxfit.estimate.memory import (
    Run,
    as_mlx_lm_runs,
    kv_bytes_final,
    state_bytes_final,
    validate_run,
)
from mlxfit.mlx_lm_defaults import DEFAULT_KV_GROUP_SIZE, DEFAULT_QUANTIZED_KV_START
from mlxfit.model.oracle import cache_plan
from mlxfit.model.parse import parse_config

# Verdicts. Findings are the ones where mlxfit and mlx-lm part ways.
AGREE = "agree"  # equal bytes
BOTH_REFUSE = "both-refuse"  # mlxfit refuses the flags and mlx-lm raises under them
# mlxfit refuses --kv-bits, and no call of mlx-lm's run used a converted cache
UNREACHED = "refused-unreached"
DISAGREE = "disagree"
CONFIG_REFUSED = "config-refused"  # mlxfit refuses a config mlx-lm runs
FLAG_REFUSED = "flag-refused"  # mlxfit refuses a flag mlx-lm runs with
SIZES_FAILING = "mlxfit-sizes-failing-run"  # mlx-lm raises, mlxfit gives a size
FINDINGS = frozenset({DISAGREE, CONFIG_REFUSED, FLAG_REFUSED, SIZES_FAILING})


@dataclass(frozen=True)
class Flags:
    kv_bits: int | None = None
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START
    max_kv_size: int | None = None


@dataclass(frozen=True)
class Outcome:
    verdict: str
    step: int
    n: int
    mlxfit: int | None  # kv + state bytes, None when refused
    mlx_lm: int | None  # the caches' nbytes, None when mlx-lm raised
    why: str = ""  # the refusal or error line


def mlxfit_bytes(config: dict, n: int, step: int, flags: Flags) -> int:
    """mlxfit's kv_cache + state bytes for the run; ConfigError / UsageError when refused."""
    cfg = parse_config(config, act_bytes=2, where="config.json")
    run = Run(ctx=n, prefill_step_size=step, kv_bits=flags.kv_bits,
              kv_group_size=flags.kv_group_size, quantized_kv_start=flags.quantized_kv_start,
              max_kv_size=flags.max_kv_size)
    run, _ = as_mlx_lm_runs(cfg, run)
    validate_run(cfg, run)
    return kv_bytes_final(cfg, run) + state_bytes_final(cfg, run)


def mlx_lm_bytes(config: dict, n: int, step: int, flags: Flags) -> int:
    """The bytes mlx-lm's caches hold after the run (OracleError when its code raises)."""
    got = cache_plan(config, n, prefill_step_size=step, kv_bits=flags.kv_bits,
                     kv_group_size=flags.kv_group_size,
                     quantized_kv_start=flags.quantized_kv_start, max_kv_size=flags.max_kv_size)
    return got.kv_bytes + got.state_bytes


def compare(config: dict, n: int, step: int, flags: Flags = Flags()) -> Outcome:
    """One (S, n) run of ``config`` under ``flags``, compared exactly."""
    try:
        truth: int | None = mlx_lm_bytes(config, n, step, flags)
        truth_err = ""
    except (OracleError, ConfigError) as e:
        truth, truth_err = None, str(e)
    try:
        ours: int | None = mlxfit_bytes(config, n, step, flags)
        refusal: MlxfitError | None = None
    except (ConfigError, UsageError) as e:
        ours, refusal = None, e
    if truth is None:
        if refusal is not None:
            return Outcome(BOTH_REFUSE, step, n, None, None, str(refusal))
        return Outcome(SIZES_FAILING, step, n, ours, None, truth_err)
    if refusal is not None:
        if isinstance(refusal, ConfigError):
            return Outcome(CONFIG_REFUSED, step, n, None, truth, str(refusal))
        # maybe_quantize_kv_cache converts a cache after the call that brings its offset to
        # the start: when no call (the last is the decode at offset n-1) ran on a converted
        # cache, mlx-lm never met what mlxfit refuses, which stands for longer runs.
        if flags.kv_bits is not None and n - 1 < max(flags.quantized_kv_start, 1):
            return Outcome(UNREACHED, step, n, None, truth, str(refusal))
        return Outcome(FLAG_REFUSED, step, n, None, truth, str(refusal))
    verdict = AGREE if ours == truth else DISAGREE
    return Outcome(verdict, step, n, ours, truth)


def accepted_by_mlx_lm(config: dict, flags: Flags = Flags()) -> bool:
    """Whether mlx-lm builds the model and runs a 2-chunk prefill plus a decode (n=5, S=2)
    with its plain caches: the generator keeps only such configs."""
    try:
        mlx_lm_bytes(config, 5, 2, Flags(max_kv_size=flags.max_kv_size))
    except MlxfitError:
        return False
    return True
