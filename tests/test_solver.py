"""The max-context solver: the returned n fits and n+1 does not, in every regime, and the
transient terms behave as mlx-lm's schedule says."""

from __future__ import annotations

from dataclasses import replace

import pytest
from st_helpers import load_config as cfg

from mlxfit.calibration.load import load_calibration
from mlxfit.estimate.memory import Run, peak_phase
from mlxfit.estimate.solve import solve_max_context, totals_at

CAL = load_calibration()
WEIGHTS = 4_000_000_000


def total(c, run: Run, n: int) -> int:
    return totals_at(c, WEIGHTS, replace(run, ctx=n, gen=min(run.gen, n - 1)), CAL).total


def check_boundary(c, run: Run, target_ctx: int) -> int:
    """Set the budget to the total at target_ctx, solve, and check n fits and n+1 does not."""
    usable = total(c, run, target_ctx)
    n = solve_max_context(c, WEIGHTS, run, CAL, usable, 10**6)
    assert total(c, run, n) <= usable
    assert total(c, run, n + 1) > usable
    assert n >= target_ctx
    return n


def test_full_cache_boundary_sits_on_a_256_step():
    """Qwen3-8B: totals are flat within a 256-token step of the cache (until the activations
    of a longer last chunk add up), so the largest fitting n ends at or after the target."""
    c = cfg("Qwen__Qwen3-8B.json")
    n = check_boundary(c, Run(ctx=1), 10_000)
    assert n - 10_000 < 2048


@pytest.mark.parametrize("target", [300, 900, 5000])
def test_below_and_above_window(target):
    """Gemma 3 27B, window 1024: below, around and well above the window."""
    check_boundary(cfg("google__medgemma-27b-it.json"), Run(ctx=1), target)


def test_quantized_kv_start_regime():
    c = cfg("Qwen__Qwen3-8B.json")
    run = Run(ctx=1, kv_bits=4, quantized_kv_start=5000)
    for target in (4000, 6000, 20000):
        usable = total(c, run, target)
        n = solve_max_context(c, WEIGHTS, run, CAL, usable, 10**6)
        assert total(c, run, n) <= usable
        assert total(c, run, n + 1) > usable


def test_chunk_bound_regime():
    """With a small prefill step the chunk's activations are small; the solver still lands on
    a boundary where n fits and n+1 does not."""
    check_boundary(cfg("Qwen__Qwen3-8B.json"), Run(ctx=1, prefill_step_size=256), 3000)


def test_nothing_fits_returns_zero():
    c = cfg("Qwen__Qwen3-8B.json")
    assert solve_max_context(c, WEIGHTS, Run(ctx=1), CAL, WEIGHTS // 2, 40960) == 0


def test_everything_fits_returns_the_limit():
    c = cfg("Qwen__Qwen3-8B.json")
    assert solve_max_context(c, WEIGHTS, Run(ctx=1), CAL, 10**15, 40960) == 40960


def test_unfused_head_dim_adds_scores_on_metal_only_for_256():
    """Gemma 3 4B (head_dim 256) is unfused on Metal: its transient at 32K includes a score
    matrix 8 heads x 2047 x 32767 keys x 2 bytes; Qwen3-8B (128) has none."""
    g = cfg("Creekside__gemma-3-4b-text__variant.json")
    p = peak_phase(g, Run(ctx=32768), CAL.backend("metal"))
    scores = {t.name: t for t in p.terms}["attention_scores"]
    # 32767 prefill tokens: 15 full chunks + 2047; the last chunk attends all 32767 keys.
    assert scores.bytes == 8 * 2047 * 32767 * 2 + 2047 * 32767
    q = cfg("Qwen__Qwen3-8B.json")
    pq = peak_phase(q, Run(ctx=32768), CAL.backend("metal"))
    assert {t.name: t for t in pq.terms}["attention_scores"].bytes == 0
    # The CPU backend never fuses.
    pc = peak_phase(q, Run(ctx=32768, backend="cpu"), CAL.backend("cpu"))
    assert {t.name: t for t in pc.terms}["attention_scores"].bytes > 0


def test_prefill_step_is_the_lever_at_long_context():
    """Smaller chunks shrink the transient: 256 < 2048 for an unfused model at 128K."""
    g = cfg("Creekside__gemma-3-4b-text__variant.json")
    big = totals_at(g, WEIGHTS, Run(ctx=131072), CAL).total
    small = totals_at(g, WEIGHTS, Run(ctx=131072, prefill_step_size=256), CAL).total
    assert small < big


def test_sliding_window_prefill_holds_window_minus_one_plus_chunk():
    """During chunked prefill a RotatingKVCache holds window-1+chunk tokens: for gpt-oss-20b
    (window 128, 12 sliding layers, 2,048 B/layer-token) at ctx 8192 the prefill-time sliding
    cache is 12 x (127 + 2047) x 2048 bytes, larger than the final 12 x 128 x 2048."""
    c = cfg("openai__gpt-oss-20b.json")
    p = peak_phase(c, Run(ctx=8192), CAL.backend("metal"))
    assert p.name.startswith("prefill")
    full_part = 12 * 8192 * 2048  # 8191 prefill tokens -> 8192 slots on the full layers
    assert p.kv_bytes == full_part + 12 * (127 + 2047) * 2048


def test_bad_runs_are_usage_errors():
    from mlxfit.errors import UsageError
    from mlxfit.estimate.solve import fit_core
    from mlxfit.model.inputs import WeightsRead

    c = cfg("Qwen__Qwen3-8B.json")
    kw = {"model": "m", "source_kind": "folder", "cfg": c,
              "weights": WeightsRead(WEIGHTS, 0, 0, False), "cal": CAL, "machine_name": "x",
              "ram_bytes": 1, "bandwidth_gbs": None, "usable_bytes": 1, "usable_source": "x"}
    for run in (Run(ctx=0), Run(ctx=-5), Run(ctx=100, gen=100), Run(ctx=100, prefill_step_size=0),
                Run(ctx=100, kv_bits=7)):
        with pytest.raises(UsageError):
            fit_core(run=run, **kw)
    g = cfg("openai__gpt-oss-20b.json")
    with pytest.raises(UsageError, match="RotatingKVCache"):
        fit_core(run=Run(ctx=100, kv_bits=8), **{**kw, "cfg": g})


def test_cycle_skipping_capacity_equals_update_by_update():
    """capacity_after_equal_updates jumps over repeating cycles; it must equal applying
    mlx-lm's KVCache rule update by update, for steps on and off the 256 grid."""
    import random

    from mlxfit.model.cache_growth import capacity_after_equal_updates, kv_capacity_after_updates

    rng = random.Random(7)
    cases = [(rng.randint(0, 600), rng.randint(1, 1500)) for _ in range(400)]
    cases += [(1000, 1), (513, 255), (300, 257), (64, 2048)]
    for n, k in cases:
        assert capacity_after_equal_updates(n, k)[0] == kv_capacity_after_updates([k] * n)
