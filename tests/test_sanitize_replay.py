"""Every family's ``Model.sanitize`` replay (model/sanitize_*.py) against mlx-lm's own, on
checkpoint layouts written by undoing it (tests/sanitize_cases_*.py), lazily: the same tensors
out (names, dtypes, shapes), every line of mlx-lm's sanitize run by some case, and the whole
conversion (sanitize, cast, quantize_model) equal to ``plan_conversion``'s."""

from __future__ import annotations

import pytest
import sanitize_cases_dense
import sanitize_cases_mla
import sanitize_cases_moe
import sanitize_cases_moe_fused
import sanitize_cases_recurrent
import sanitize_cases_wrappers
from sanitize_oracle import executable_lines, mlx_convert, mlx_sanitize

from mlxfit.model.convert_rules import REPLAYED, RULES, generated_rules, sanitized
from mlxfit.model.families import mlx_lm_module
from mlxfit.model.mlx_lm_quant import QUANT_FACTS
from mlxfit.model.quantize import QuantRecipe, plan_conversion
from mlxfit.model.tensors import TensorInfo

MODULES = (sanitize_cases_dense, sanitize_cases_recurrent, sanitize_cases_wrappers,
           sanitize_cases_moe, sanitize_cases_moe_fused, sanitize_cases_mla)
CASES = {f: fn for m in MODULES for f, fn in m.CASES.items()}
UNREACHABLE = {f: lines for m in MODULES for f, lines in m.UNREACHABLE.items()}
# Families whose sanitize rewrites values only (no name, dtype or shape changes), and why.
VALUES_ONLY = {f: why for m in MODULES for f, why in getattr(m, "VALUES_ONLY", {}).items()}


def _tensors(layout) -> list[TensorInfo]:
    return [TensorInfo.of(k, dt, shape) for k, (dt, shape) in layout.items()]


def _family(config) -> str:
    return mlx_lm_module(config["model_type"], config.get("architectures") or ())


def test_every_own_sanitize_is_replayed_and_tested():
    """A family whose mlx-lm Model has a sanitize is verified only through a replay that this
    file tests (the hand-written RULES are tested against the real convert in
    tests/test_quantize.py); one without has nothing to replay."""
    own = {f for f, facts in QUANT_FACTS.items() if facts["sanitize"]}
    assert set(REPLAYED) == set(CASES), sorted(set(REPLAYED) ^ set(CASES))
    assert set(REPLAYED) <= own and not set(REPLAYED) & set(RULES)
    unverified = sorted(f for f in QUANT_FACTS
                        if not (RULES.get(f) or generated_rules(f)).verified)
    assert unverified == sorted(own - set(RULES) - set(REPLAYED))
    assert unverified == []  # every mlx-lm family's conversion rules are verified


@pytest.mark.parametrize("family", sorted(CASES))
def test_replay_is_mlx_lms_sanitize(family):
    pytest.importorskip("mlx_lm")
    cases = CASES[family]()
    assert cases, family
    ran: set[int] = set()
    changed = False
    for config, layout in cases:
        assert _family(config) == family, config["model_type"]
        want, hit = mlx_sanitize(config, layout)
        ran |= hit
        changed |= want != layout
        got, rules = sanitized(_tensors(layout), config, family)
        assert rules.verified
        assert {k: (t.dtype, tuple(t.shape)) for k, t in got.items()} == want, (
            sorted(set(got) ^ set(want))[:6])
    lines = executable_lines(cases[0][0])
    allowed = UNREACHABLE.get(family, {})
    assert set(allowed) <= set(lines.values()), sorted(set(allowed) - set(lines.values()))
    missed = {ln: text for ln, text in lines.items() if ln not in ran and text not in allowed}
    assert not missed, missed
    # An input mlx-lm's sanitize leaves alone would test nothing but the identity, unless the
    # family's sanitize only ever rewrites values.
    assert changed != (family in VALUES_ONLY) or not lines, family


@pytest.mark.parametrize("family", sorted(CASES))
def test_conversion_is_mlx_lms(family):
    """The first case converted to 4-bit: plan_conversion's tensors are the ones mlx-lm's own
    sanitize, strict load, cast and quantize_model leave."""
    pytest.importorskip("mlx_lm")
    config, layout = CASES[family]()[0]
    want = mlx_convert(config, layout)
    plan = plan_conversion(_tensors(layout), config, family, QuantRecipe(bits=4))
    got = {t.name: (t.dtype, tuple(t.shape)) for t in plan.tensors}
    assert got == want, sorted(set(got) ^ set(want))[:6] or [
        (k, got[k], want[k]) for k in got if got[k] != want[k]][:6]
    assert plan.verified
