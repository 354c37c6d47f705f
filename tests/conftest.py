"""Test isolation: no test reaches the network or writes to the real caches by default.

The Hub tests point HF_ENDPOINT at their own 127.0.0.1 server and undo HF_HUB_OFFLINE.
The Hub tests share their environment and server fixtures (env, server) here. Also
test_measure_cpu's table of predicted vs measured, printed in the terminal summary.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hub_server import FakeHub


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MLXFIT_CACHE_DIR", str(tmp_path_factory.mktemp("mlxfit-cache")))


# ------------------------------------------------------------------ test_measure_cpu's table
# Each test_prediction_matches_mlx_cpu case records its row as a user property; the rows reach
# this process in the test reports (also from pytest-xdist's workers, whose own terminal is not
# shown) and are printed as one table in the terminal summary.

_MEASURE_ROWS: dict[str, dict] = {}
_MEASURE_HEADER: list[str] = []


def pytest_runtest_logreport(report) -> None:
    for key, value in getattr(report, "user_properties", ()):
        if key == "mlxfit_measure_row" and isinstance(value, dict):
            _MEASURE_ROWS[value["row"]["id"]] = value["row"]
            if value["header"] not in _MEASURE_HEADER:
                _MEASURE_HEADER.append(value["header"])


def pytest_terminal_summary(terminalreporter, config) -> None:
    if not _MEASURE_ROWS or hasattr(config, "workerinput"):  # an xdist worker: not shown
        return
    tr = terminalreporter
    tr.section("mlxfit: predicted vs measured, MLX CPU backend (MB = 10^6 B)")
    for header in _MEASURE_HEADER:
        tr.write_line(header)
    tr.write_line(format_table(list(_MEASURE_ROWS.values())))


def _mb(x) -> str:
    return "-" if x is None else f"{x / 1e6:.3f}"


def format_table(results: list[dict]) -> str:
    header = ("| case | weights MB | KV+state MB | transient MB meas / pred "
              "| peak MB meas (max of runs) / pred | runs, spread | peak error |")
    lines = [header, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['id']} | error: {r['error'].strip().splitlines()[-1][:80]} "
                         "| | | | | |")
            continue
        t = r["terms"]
        wm, wp = t["weights"]
        km = t["kv_cache"][0] + t.get("recurrent_state", [0, 0])[0]
        kp = t["kv_cache"][1] + t.get("recurrent_state", [0, 0])[1]
        tm, tp = t["transient"]
        pm, pp = t["peak"]
        peaks = r.get("peaks") or [pm]
        spread = (max(peaks) - min(peaks)) / max(peaks)
        lines.append(
            f"| {r['id']} | {_mb(wm)} {'exact' if wm == wp else f'{wm - wp:+,} B'} "
            f"| {_mb(km)} {'exact' if km == kp else '!= ' + _mb(kp)} "
            f"| {_mb(tm)} / {_mb(tp)} | {_mb(pm)} / {_mb(pp)} | {len(peaks)}, {100 * spread:.1f} % "
            f"| {100 * (pp - pm) / pm:+.1f} % |")
    errs = sorted(abs(r["terms"]["peak"][1] - r["terms"]["peak"][0]) / r["terms"]["peak"][0]
                  for r in results if "error" not in r)
    if errs:
        import statistics

        lines.append(f"\n{len(errs)} cases: |peak error| median "
                     f"{100 * statistics.median(errs):.1f} %, max {100 * errs[-1]:.1f} %")
    return "\n".join(lines)


# The Hub tests' environment and server (test_hub, test_trust_hub, test_trust_cache).


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No real cache, token or offline flag leaks in; retries back off in milliseconds."""
    import huggingface_hub.constants as hfc

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                "HF_HUB_DISABLE_IMPLICIT_TOKEN", "HF_HOME", "HUGGINGFACE_HUB_CACHE",
                "XDG_CACHE_HOME", "HF_OIDC_RESOURCE", "HF_HUB_DOWNLOAD_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("MLXFIT_CACHE_DIR", str(tmp_path / "mlxfit-cache"))
    # huggingface_hub froze these at import, perhaps while another test had set them.
    monkeypatch.setattr(hfc, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hfc, "HF_TOKEN_PATH", str(tmp_path / "stored-token"))
    monkeypatch.setenv("MLXFIT_HUB_BACKOFF_SECONDS", "0.005")
    monkeypatch.setenv("MLXFIT_HUB_MAX_WAIT_SECONDS", "0.02")
    return tmp_path


@pytest.fixture
def server(env: Path, monkeypatch: pytest.MonkeyPatch):
    from huggingface_hub.utils import close_session

    with FakeHub() as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        yield s
        close_session()  # drop pooled keep-alive connections to this server
