"""The memory / tok-s vs context chart: the series is the fit itself at each context, the kinks
sit where mlx-lm's caches and chunking change, and each renderer draws once."""

from __future__ import annotations

import itertools
import json
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console
from st_helpers import M4PRO, runner

import mlxfit
from mlxfit.cli.app import app
from mlxfit.errors import MlxfitError
from mlxfit.render.chart import render_terminal, svg, write_chart
from mlxfit.verbs.chart import ChartData, log_grid

Q8B = "mlx-community/Qwen3-8B-4bit"
GEMMA = "mlx-community/gemma-3-27b-it-4bit"
GPTOSS = "mlx-community/gpt-oss-20b-MXFP4-Q8"


@pytest.fixture(scope="module")
def gemma() -> tuple:
    r = mlxfit.fit(GEMMA, 32768, machine=M4PRO, chart=True)
    return r, r.chart


def test_log_grid():
    g = log_grid(256, 131072, 64)
    assert g[0] == 256 and g[-1] == 131072 and g == sorted(set(g))
    ratios = [b / a for a, b in itertools.pairwise(g)]
    assert max(ratios) / min(ratios) < 1.05  # evenly spaced in log


def test_series_is_the_fit_at_each_context(gemma):
    _r, d = gemma
    assert isinstance(d, ChartData)
    ctxs = [p.ctx for p in d.points]
    assert ctxs == sorted(set(ctxs)) and d.lo == 256 and d.hi == 131072
    for p in d.points[:: max(1, len(d.points) // 12)] + (d.points[-1],):
        f = mlxfit.fit(GEMMA, p.ctx, machine=M4PRO)
        assert p.total_bytes == f.total_bytes
        assert p.fits == f.fits
        assert p.decode_tps == f.predicted_decode_tps


def test_requested_context_and_safe_edge_are_points(gemma):
    r, d = gemma
    by_ctx = {p.ctx: p for p in d.points}
    assert by_ctx[32768].total_bytes == r.total_bytes
    n = r.max_safe_context
    assert d.max_safe_context == n and 0 < n < 32768
    # the safe edge is where the upper peak bound fits (issue 27): past it the run is tight
    assert by_ctx[n].fits and n + 1 in by_ctx
    assert mlxfit.fit(GEMMA, n + 1, machine=M4PRO).verdict != "fits"
    assert d.usable_bytes == r.usable_bytes
    # Past the edge there is no speed (it would swap); below it, one at every point.
    assert all((p.decode_tps is None) == (not p.fits) for p in d.points)


def test_kinks_where_caches_and_chunking_change(gemma):
    _, d = gemma
    kinks = {k.ctx: k.label for k in d.kinks}
    assert "sliding window" in kinks[1024] and "52 layers" in kinks[1024]
    assert "prefill step 2048" in kinks[2049]
    pts = {p.ctx: p.total_bytes for p in d.points}
    assert {1024, 1025, 2049, 2050} <= set(pts)  # each kink and the token after it


def test_kinks_gpt_oss_window_and_kv_start():
    r = mlxfit.fit(GPTOSS, 8192, machine=M4PRO, chart=True)
    kinks = {k.ctx for k in r.chart.kinks}
    assert 128 in kinks and r.chart.lo == 64  # the window is inside the chart
    q = mlxfit.fit(Q8B, 16384, machine=M4PRO, kv_bits=8, chart=True)
    labels = {k.ctx: k.label for k in q.chart.kinks}
    assert "quantized to 8 bits" in labels[5000]  # offset >= --quantized-kv-start 5000
    pts = {p.ctx: p.total_bytes for p in q.chart.points}
    assert 5000 in pts and 5001 in pts


def test_full_cache_model_total_grows_with_context():
    r = mlxfit.fit(Q8B, 32768, machine=M4PRO, chart=True)
    totals = [p.total_bytes for p in r.chart.points if p.ctx > 2049]
    assert totals == sorted(totals)
    speeds = [p.decode_tps for p in r.chart.points if p.decode_tps is not None]
    assert speeds == sorted(speeds, reverse=True)


def test_serving_terms_are_in_the_series():
    plain = mlxfit.fit(Q8B, 8192, machine=M4PRO, chart=True)
    served = mlxfit.fit(Q8B, 8192, machine=M4PRO, parallel=2, prompt_cache=0, chart=True)
    p1 = {p.ctx: p.total_bytes for p in plain.chart.points}
    p2 = {p.ctx: p.total_bytes for p in served.chart.points}
    assert p2[8192] == served.total_bytes > p1[8192] == plain.total_bytes


def test_render_terminal(gemma):
    _, d = gemma
    con = Console(record=True, width=100, color_system=None)
    render_terminal(d, con)
    text = con.export_text()
    assert "GB total (peak)" in text and "decode tok/s" in text
    assert "▲ context asked for: 32,768" in text
    assert f"largest safe context: {d.max_safe_context:,}" in text
    assert "a: 1,024 tokens: the sliding window is full" in text
    assert "b: 2,049 tokens: prefill step 2048" in text
    assert "×" in text and "●" in text and "─" in text
    assert "1K" in text and "16K" in text


def test_svg(gemma, tmp_path):
    _, d = gemma
    out = write_chart(d, tmp_path / "c.svg")
    root = ET.fromstring(out.read_text())
    assert root.tag.endswith("svg")
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) >= 2  # memory and tok/s
    texts = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
    assert GEMMA in texts and "usable 19.60 GB" in texts and "--ctx 32,768" in texts
    # Every memory point lies inside the memory panel.
    pts = [tuple(map(float, xy.split(","))) for xy in lines[0].get("points").split()]
    assert len(pts) == len(d.points)
    assert all(70 <= x <= 740 and 40 <= y <= 235 for x, y in pts)
    assert svg(d) == out.read_text()


def test_png(gemma, tmp_path):
    pytest.importorskip("matplotlib", reason="PNG charts need the optional matplotlib "
                        "(pip install 'mlxfit[chart]'); SVG and the terminal chart do not")
    _, d = gemma
    out = write_chart(d, tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_matplotlib_says_how(gemma, tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    with pytest.raises(MlxfitError, match="mlxfit\\[chart\\]"):
        write_chart(gemma[1], tmp_path / "c.png")


def test_bad_suffix(gemma, tmp_path):
    with pytest.raises(MlxfitError, match=".png or .svg"):
        write_chart(gemma[1], tmp_path / "c.pdf")


def test_cli_chart_terminal():
    r = runner.invoke(app, ["fit", Q8B, "--ctx", "32768", "--machine", M4PRO, "--chart"])
    assert r.exit_code == 0, r.output
    assert "decode tok/s" in r.output and "▲ context asked for: 32,768" in r.output


@pytest.mark.parametrize("order", ["model-first", "chart-first"])
def test_cli_chart_file(tmp_path, order):
    path = str(tmp_path / "m.svg")
    args = (["fit", Q8B, "--chart", path] if order == "model-first"
            else ["fit", "--chart", path, Q8B])
    r = runner.invoke(app, args + ["--ctx", "8192", "--machine", M4PRO])
    assert r.exit_code == 0, r.output
    assert f"chart written to {path}" in r.output
    assert ET.parse(path).getroot().tag.endswith("svg")


def test_cli_chart_json():
    r = runner.invoke(app, ["fit", Q8B, "--ctx", "8192", "--machine", M4PRO, "--chart",
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    pts = {p["ctx"]: p for p in d["chart"]["points"]}
    assert pts[8192]["total_bytes"] == d["total_bytes"]
    assert d["chart"]["max_safe_context"] == d["max_safe_context"]


def test_cli_stray_arguments_are_errors(tmp_path):
    r = runner.invoke(app, ["fit", Q8B, str(tmp_path / "m.svg"), "--machine", M4PRO])
    assert r.exit_code == 2 and "unexpected argument" in r.output
    r = runner.invoke(app, ["fit", Q8B, "other-model", "--chart", "--machine", M4PRO])
    assert r.exit_code == 2 and "unexpected argument 'other-model'" in r.output
