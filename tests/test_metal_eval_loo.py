"""Issue 26: bench/metal_eval.py's per-run held-out peak rows (``--loo-rows``): the fast per-phase
basis equals the formula it stands for, and each held-out prediction comes from a fit that did
not see the run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def me():
    sys.path.insert(0, str(BENCH))  # metal_eval imports its sibling metal_descriptors
    try:
        spec = importlib.util.spec_from_file_location("metal_eval", BENCH / "metal_eval.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["metal_eval"] = mod
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(BENCH))
        sys.modules.pop("metal_eval", None)


@pytest.fixture(scope="module")
def small_set(me):
    """A few main runs of two sources and three family kinds (dense, hybrid, sliding)."""
    cases, _ = me.load_cases()
    main = [c for c in cases if not c.approx and not me.excluded(c) and c.peak is not None]
    picked: list = []
    for src, kind in (("guruswami", "dense"), ("guruswami", "sliding"), ("ax-engine", "hybrid"),
                      ("ax-engine", "dense"), ("ax-engine", "sliding")):
        picked += [c for c in main if c.source == src and me.family_kind(c) == kind][:3]
    return picked


def test_the_basis_equals_peak_form_away_from_the_fitted_constants(me, small_set) -> None:
    doc = me.base_doc()
    metal = {"act_hidden": 3.0, "act_ffn": 1.5, "act_q": 9.0, "act_moe": 2.0,
             "score_arrays": 1.3, "growth_copy_layers": 0.7, "base_bytes": 2.0e8}
    for form in ("F2k", "F2kg", "F3kg"):
        ex = {**me.LOO_MEM_FORMS[form][2], "floor_small": 0.5, "act_linear": 7.0}
        assert me.peak_basis_check(small_set, doc, (metal, ex)) < 1e-9


def test_a_held_out_prediction_is_the_fit_without_that_source(me, small_set) -> None:
    doc = me.base_doc()
    preds = me.peak_loo_predictions(small_set, doc, "F2kg", log=lambda *a, **k: None)
    held = [c for c in small_set if c.source == "ax-engine"]
    train = [c for c in small_set if c.source != "ax-engine"]
    full = me.fit_peak_fast(small_set, "F2kg")
    start = {**full[0], **full[1]}
    fitted = me.LOO_MEM_FORMS["F2kg"][0] + me.LOO_MEM_FORMS["F2kg"][1]
    warm = {p: v for p, v in start.items()
            if p not in fitted or me._identified(train, full, p)}
    alone = me.fit_peak_fast(train, "F2kg", warm)
    for c in held:
        assert preds[c.idx]["loso"] == pytest.approx(me.peak_fast(c, *alone), rel=1e-12)
    # the held-out fit differs from the in-sample one: the rows are not in-sample copies
    assert any(abs(preds[c.idx]["loso"] - preds[c.idx]["in_sample"]) > 1e-6 for c in held)


def test_rows_carry_the_segments_and_every_form(me, small_set) -> None:
    rows = me.peak_loo_rows(small_set, me.base_doc(), forms=("F2k", "F2kg"))
    assert len(rows) == len(small_set)
    for r in rows:
        assert r["metric"] == "peak"
        assert set(r["forms"]) == {"F2k", "F2kg"}
        assert {"in_sample", "loso", "lofko"} <= set(r) and r["measured"] > 0
        assert r["family_kind"] in ("dense", "hybrid", "sliding")
        assert r["context"] > r["prompt"] > 0 and r["params_b"] > 0
