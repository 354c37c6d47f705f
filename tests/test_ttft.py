"""Time to first token in every verb: one predictor (estimate/compute.predicted_ttft) behind fit,
matrix, pick, cluster, the advice and the chart; the watchdog warning and its step size."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from rich.console import Console
from st_helpers import runner

import mlxfit
from mlxfit.calibration.load import load_calibration
from mlxfit.cli.app import app
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.model.inputs import model_inputs
from mlxfit.render.chart import render_terminal, svg
from mlxfit.sources.resolve import resolve_model
from mlxfit.verbs.advise import Option
from mlxfit.verbs.measure.twin import predict_prefill

Q8B = "mlx-community/Qwen3-8B-4bit"
Q32B = "mlx-community/Qwen3-32B-4bit"
M4MAX = "M4 Max 128GB"


@pytest.fixture(scope="module")
def q8b_fit():
    return mlxfit.fit(Q8B, 16384, machine=M4MAX)


def test_fit_reports_ttft_and_prompt_speed(q8b_fit):
    r = q8b_fit
    assert r.predicted_ttft_s and r.predicted_prefill_tps
    # prompt tok/s as mlx_lm.generate prints it: the prompt over the time to the first token
    assert r.predicted_prefill_tps == pytest.approx(r.run.schedule().prompt / r.predicted_ttft_s)
    names = [t.name for t in r.prefill_terms]
    assert names[-1] == "ttft_seconds" and r.prefill_terms[-1].seconds == r.predicted_ttft_s
    out = runner.invoke(app, ["fit", Q8B, "--ctx", "16384", "--machine", M4MAX, "--json"])
    d = json.loads(out.stdout)
    assert d["predicted_ttft_s"] == round(r.predicted_ttft_s, 3)
    assert d["predicted_prefill_tps"] == round(r.predicted_prefill_tps, 2)
    assert [t["name"] for t in d["prefill_terms"]] == names
    text = runner.invoke(app, ["fit", Q8B, "--ctx", "16384", "--machine", M4MAX]).stdout
    assert re.search(r"time to\s+first token", text)


def test_matrix_and_pick_rows_are_the_fit():
    m = mlxfit.matrix(Q8B, 16384)
    row = next(r for r in m.rows if r.name == "M4 Max 128GB" or r.name.endswith("M4 Max 128GB"))
    f = mlxfit.fit(Q8B, 16384, machine=row.name)
    assert row.predicted_ttft_s == f.predicted_ttft_s
    assert row.predicted_prefill_tps == f.predicted_prefill_tps
    # every SKU where it runs has a prompt speed: each chip has compute figures
    assert all(r.predicted_ttft_s for r in m.rows if r.runs)
    # fewer GPU cores of one generation take longer
    m4 = {r.chip: [] for r in m.rows if r.family == "M4"}
    for r in m.rows:
        if r.family == "M4" and r.runs:
            m4[r.chip].append(r.predicted_ttft_s)
    assert max(m4["M4 Max"]) < min(m4["M4 Pro"]) <= max(m4["M4 Pro"]) < min(m4["M4"])
    pk = mlxfit.pick(16384, catalog=True, machine=f.machine_name)
    c = next(c for c in pk.catalog if c.model == Q8B)
    assert c.predicted_ttft_s == f.predicted_ttft_s
    d = json.loads(runner.invoke(app, ["pick", "--ctx", "16384", "--catalog", "--machine",
                                       f.machine_name, "--json"]).stdout)
    row = next(x for x in d["catalog"] if x["model"] == Q8B)
    assert row["predicted_ttft_s"] == round(f.predicted_ttft_s, 3)


def test_cluster_single_host_is_the_fit_and_stages_run_in_sequence():
    model, ctx = "mlx-community/Qwen3-30B-A3B-4bit", 8192
    f = mlxfit.fit(model, ctx, machine="M3 Ultra 80-core 256GB")
    one = mlxfit.cluster(model, hosts=["M3 Ultra 80-core 256GB"], ctx=ctx).plan
    # the same chunks; a stage streams its own layers (not the output head) and the plan's
    # decode step is at the run's context: within 0.2 % here
    assert one.predicted_ttft_s == pytest.approx(f.predicted_ttft_s, rel=2e-3)
    two = mlxfit.cluster(model, hosts=["2x M3 Ultra 80-core 256GB"], ctx=ctx)
    pipe = next(p for p in two.plans if p.strategy == "pipeline")
    tp = next(p for p in two.plans if p.strategy == "tensor")
    # the stages take turns: no faster than one host, a little slower for the sends
    assert pipe.predicted_ttft_s >= f.predicted_ttft_s
    # tensor parallel splits the work: faster than one host, never twice as fast
    assert f.predicted_ttft_s / 2 < tp.predicted_ttft_s < f.predicted_ttft_s
    d = json.loads(runner.invoke(app, ["cluster", model, "--host", "2x M3 Ultra 80-core 256GB",
                                       "--ctx", str(ctx), "--json"]).stdout)
    assert {p["strategy"]: p["predicted_ttft_s"] for p in d["plans"]}["tensor"] \
        == round(tp.predicted_ttft_s, 3)


def test_watchdog_warns_and_its_step_keeps_layers_under():
    # at its context limit (40,960): past it a run does not fit and has no TTFT (issue 13)
    r = mlxfit.fit(Q32B, 40960, machine="M4 Pro 64GB")
    w = next(x for x in r.warnings if "watchdog" in x)
    step = int(re.search(r"--prefill-step-size (\d+)", w).group(1))
    cost = float(re.search(r"\(TTFT [\d,.]+ s, \+([\d,.]+) s\)", w).group(1).replace(",", ""))
    assert step < 2048 and cost > 0
    again = mlxfit.fit(Q32B, 40960, machine="M4 Pro 64GB", prefill_step_size=step)
    assert not any("watchdog" in x for x in again.warnings)
    assert again.predicted_ttft_s == pytest.approx(r.predicted_ttft_s + cost, abs=0.06)
    # a short prompt on a fast chip is nowhere near the danger zone
    assert not any("watchdog" in x for x in mlxfit.fit(Q8B, 4096, machine=M4MAX).warnings)


def test_advice_states_the_ttft_cost_of_a_smaller_step():
    # within its 40,960-token limit: past it no setting helps (issue 13), so no option at all
    r = mlxfit.fit(Q32B, 40960, machine="M2 Max 32GB", advise=True)
    opts = [o for o in r.advice.options if any(c.kind == "prefill_step_size" for c in o.changes)]
    assert opts
    for o in opts:
        assert isinstance(o, Option) and o.ttft_cost_s is not None and o.ttft_cost_s > 0
    others = [o for o in r.advice.options if o not in opts]
    assert all(o.ttft_cost_s is None for o in others)


def test_chart_has_ttft_rising_with_context():
    r = mlxfit.fit(Q8B, 32768, machine=M4MAX, chart=True)
    pts = [p for p in r.chart.points if p.fits]
    ttft = [p.ttft_s for p in pts]
    assert all(t is not None for t in ttft) and ttft == sorted(ttft)
    at = next(p for p in r.chart.points if p.ctx == 32768)
    assert at.ttft_s == pytest.approx(r.predicted_ttft_s, rel=1e-9)


def test_chart_renderers_draw_ttft():
    r = mlxfit.fit(Q8B, 32768, machine=M4MAX, chart=True)
    assert "time to first token, s" in svg(r.chart)
    con = Console(record=True, width=100)
    render_terminal(r.chart, con)
    assert "TTFT s" in con.export_text()


def test_measure_predicts_the_chunked_prefill_with_the_same_model(q8b_fit):
    """measure times the P-1 chunked tokens alone: its prediction is fit's prefill_seconds."""
    inputs = model_inputs(resolve_model(Q8B))
    m = resolve_machine(M4MAX)
    run = q8b_fit.run
    secs = next(t.seconds for t in q8b_fit.prefill_terms if t.name == "prefill_seconds")
    got = predict_prefill(inputs, run, load_calibration(), m)
    assert got == pytest.approx(run.schedule().prefill_tokens / secs, rel=1e-12)
    assert predict_prefill(inputs, replace(run, backend="cpu"), load_calibration(), m) is None
