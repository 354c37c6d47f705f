"""mlxfit matrix: every SKU, the same numbers as `fit --machine`, grouping, filters, this Mac."""

from __future__ import annotations

import json

import pytest
from st_helpers import NO_USER_TABLE, config_dict, make_folder, recorded_runner, runner

import mlxfit
from mlxfit.cli.app import app
from mlxfit.errors import MachineError, UsageError
from mlxfit.hardware.probe import probe_machine
from mlxfit.hardware.resolve import all_skus, resolve_machine
from mlxfit.hardware.skus import load_sku_table
from mlxfit.render import SCHEMA_VERSION, dumps
from mlxfit.render.matrix import matrix_to_json
from mlxfit.verbs.matrix import filter_skus, matrix

QWEN8 = "mlx-community/Qwen3-8B-4bit"
QWEN30 = "mlx-community/Qwen3-30B-A3B-4bit"
GEMMA27 = "mlx-community/gemma-3-27b-it-4bit"  # sliding window + unfused head dim 128/256


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


@pytest.fixture(scope="module")
def table() -> dict:
    return load_sku_table(user_path=NO_USER_TABLE)


NUMERIC = ("machine_name", "ram_bytes", "bandwidth_gbs", "usable_bytes", "usable_source",
           "context_tokens", "weights_bytes", "kv_bytes", "state_bytes", "transient_bytes",
           "total_bytes", "fits", "max_safe_context", "context_limit", "predicted_decode_tps",
           "peak_phase", "terms", "speed_terms", "run", "model", "source_kind", "buffers",
           "max_buffer_bytes", "extra_terms", "warnings")


def _family_sample() -> frozenset[str]:
    """The first and the last SKU of each chip family (the table's `family`: M1 ... M5), in
    table order: a base chip at its smallest RAM and the top chip (Max or Ultra) at its largest.
    Why a sample is enough: each matrix row is `verbs.fit.fit_served` on that SKU, the function
    `fit --machine <SKU>` ends in (verbs/matrix.py), so the comparison with a full fit checks
    the plumbing around it (the SKU, macOS and run options passed through), not the arithmetic,
    and that plumbing does not depend on the RAM size or the bin within a family. Comparing all
    89 SKUs x 4 cases (356 full fits, ~11 s) checked the same thing 9 times over. The sample
    still spans every generation's GPU architecture, all three GPU classes (g, s, d) and rows
    that fit and rows that do not where the matrix has both (asserted); every row's own
    consistency is checked on all."""
    table = load_sku_table(user_path=NO_USER_TABLE)
    by_family: dict[str, list[str]] = {}
    for machine in all_skus():
        by_family.setdefault(table["chips"][machine.chip]["family"], []).append(machine.name)
    return frozenset(name for names in by_family.values() for name in (names[0], names[-1]))


FAMILY_SAMPLE = _family_sample()


@pytest.mark.parametrize("model, ctx, kw", [
    (QWEN8, 32768, {}),
    (QWEN30, 8192, {"gen": 512, "prefill_step_size": 512}),
    (GEMMA27, 65536, {"kv_bits": None, "macos": 15}),
    (QWEN8, 131072, {"kv_bits": 4, "kv_group_size": 32}),
])
def test_every_row_is_fit_on_that_sku(model, ctx, kw):
    """The matrix and `fit --machine <row>` agree exactly, term by term: every SKU is a row,
    and the rows of a sample (FAMILY_SAMPLE) are each compared with a full fit."""
    m = matrix(model, ctx, probe=False, **kw)
    assert len(m.rows) == len(all_skus()) == m.skus_considered
    for row in m.rows:
        assert row.headroom_bytes == row.usable_bytes - row.total_bytes
        assert (row.predicted_decode_tps is None) == (not row.fits)
    sample = [row for row in m.rows if row.name in FAMILY_SAMPLE]
    assert {row.name for row in sample} == FAMILY_SAMPLE
    assert {row.fits for row in sample} == {row.fits for row in m.rows}, "every outcome sampled"
    for row in sample:
        r = mlxfit.fit(model, ctx, machine=row.name, **kw)
        for f in NUMERIC:
            assert getattr(row.result, f) == getattr(r, f), (row.name, f)
        # fit shows the speed past the trained context too (issue 28); a row that does not
        # fit carries none
        assert (row.total_bytes, row.fits, row.max_safe_context, row.predicted_decode_tps,
                row.usable_bytes) == (r.total_bytes, r.fits, r.max_safe_context,
                                      r.predicted_decode_tps if r.fits else None,
                                      r.usable_bytes)
        assert row.headroom_bytes == r.usable_bytes - r.total_bytes
        assert (row.predicted_decode_tps is None) == (not row.fits)


QWEN35 = "mlx-community/Qwen3.5-9B-MLX-8bit"  # head_dim 256: unfused prefill score arrays


def test_rows_where_the_gpu_buffer_limits_the_context_agree_with_fit():
    """Where one prefill score array would exceed maxBufferLength, fit lowers the largest safe
    context; the matrix row says the same, because it is the same function."""
    kw = {"prefill_step_size": 16384}  # 8192 no longer reaches it: the upper peak bound binds first
    m = matrix(QWEN35, 131072, probe=False, **kw)
    limited = [r for r in m.rows
               if any(w.startswith("largest safe context") for w in r.result.warnings)]
    assert limited, "the case must exercise the buffer limit"
    for row in limited + [r for r in m.rows if not r.fits][:5]:
        r = mlxfit.fit(QWEN35, 131072, machine=row.name, **kw)
        assert (row.max_safe_context, row.fits, row.runs, row.total_bytes) == (
            r.max_safe_context, r.fits, r.runs, r.total_bytes), row.name
        assert row.result.buffers == r.buffers and row.result.warnings == r.warnings


def test_fits_but_one_array_is_too_big_for_metal():
    """M3 Ultra 512GB, a 65536-token prefill chunk at 190,000 tokens: the total fits the usable
    memory but the last chunk's score array is over maxBufferLength: it does not run."""
    args = ["--ctx", "190000", "--prefill-step-size", "65536", "--chips", "M3 Ultra 512GB"]
    m = matrix(QWEN35, 190000, probe=False, prefill_step_size=65536, chips="M3 Ultra 512GB")
    (row,) = m.rows
    assert row.fits and not row.runs and m.n_fit == 0
    assert row.result.oversize_buffers
    assert matrix(QWEN35, 190000, probe=False, prefill_step_size=65536,
                  chips="M3 Ultra 512GB", only_fits=True).rows == ()
    r = runner.invoke(app, ["matrix", QWEN35, *args], terminal_width=120)
    assert r.exit_code == 1
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("  M3 Ultra"))
    assert line.split()[3:] == ["512GB", "819", f"{row.usable_bytes / 1e9:,.1f}", "buffer",
                                f"{row.max_safe_context:,}",
                                f"{row.headroom_bytes / 1e9:,.1f}"]  # no tok/s: it cannot run
    assert "exceeds the GPU's largest buffer" in r.stdout
    d = json.loads(runner.invoke(app, ["matrix", QWEN35, *args, "--json"]).stdout)
    assert (d["rows"][0]["fits"], d["rows"][0]["runs"], d["fits_count"]) == (True, False, 0)


CLI_ROW_ARGS = ["--ctx", "40000", "--prefill-step-size", "1024"]


@pytest.fixture(scope="module")
def cli_matrix_rows(tmp_path_factory) -> dict[str, dict]:
    """One `matrix --json` run shared by the per-SKU comparisons below, isolated as every test
    here is (conftest.py and isolated_home): no network, no cache or home of this host's."""
    root = tmp_path_factory.mktemp("matrix-rows")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("MLXFIT_CACHE_DIR", str(root / "mlxfit-cache"))
        mp.setenv("HOME", str(root / "home"))
        mp.setenv("HF_HUB_CACHE", str(root / "hub"))
        rm = runner.invoke(app, ["matrix", QWEN30, *CLI_ROW_ARGS, "--json"])
    assert rm.exit_code == 0, rm.output
    return {r["name"]: r for r in json.loads(rm.stdout)["rows"]}


@pytest.mark.parametrize("sku", ["M1 8-core 8GB", "M3 Max 36GB", "M2 Max 96GB",
                                 "M4 Pro 20-core 48GB", "M5 Max 36GB", "M3 Ultra 512GB"])
def test_cli_row_equals_cli_fit(sku, cli_matrix_rows):
    """Through the CLI too: the row of `matrix --json` and `fit --machine <sku> --json`."""
    args = CLI_ROW_ARGS
    row = cli_matrix_rows[sku]
    rf = runner.invoke(app, ["fit", QWEN30, *args, "--machine", sku, "--json"])
    assert rf.exit_code in (0, 1), rf.output
    f = json.loads(rf.stdout)
    assert f["machine"]["name"] == sku
    assert (row["total_bytes"], row["fits"], row["runs"], row["max_safe_context"],
            row["predicted_decode_tps"], row["usable_bytes"], row["headroom_bytes"],
            row["machine"]) == (
        f["total_bytes"], f["fits"], f["runs"], f["max_safe_context"],
        f["predicted_decode_tps"], f["usable_bytes"], f["headroom_bytes"],
        f["machine"])


def test_rows_round_trip_through_resolve_machine(table):
    """Each row's name is a --machine string naming that very SKU (chip, bin, RAM, bandwidth)."""
    for m in all_skus(table=table):
        r = resolve_machine(m.name, table=table)
        assert (r.chip, r.gpu_cores, r.ram_bytes, r.bandwidth_gbs, r.usable_bytes) == (
            m.chip, m.gpu_cores, m.ram_bytes, m.bandwidth_gbs, m.usable_bytes), m.name


def test_grouped_by_family_and_sorted(table):
    m = matrix(QWEN8, 8192, probe=False, table=table)
    fams = [r.family for r in m.rows]
    assert list(dict.fromkeys(fams)) == ["M1", "M2", "M3", "M4", "M5"]
    assert fams == sorted(fams, key=["M1", "M2", "M3", "M4", "M5"].index)  # contiguous
    chip_order = list(table["chips"])
    keys = [(chip_order.index(r.chip), r.ram_gb, r.gpu_cores) for r in m.rows]
    for fam in ("M1", "M2", "M3", "M4", "M5"):
        ks = [k for k, r in zip(keys, m.rows) if r.family == fam]
        assert ks == sorted(ks)
    m4 = [(r.chip, r.gpu_cores, r.ram_gb) for r in m.rows if r.family == "M4"]
    assert m4[:2] == [("M4", 8, 16), ("M4", 10, 16)]
    assert m4[-4:] == [("M4 Max", 32, 36), ("M4 Max", 40, 48), ("M4 Max", 40, 64),
                       ("M4 Max", 40, 128)]


def test_binned_bandwidths_show(table):
    m = matrix(QWEN8, 8192, probe=False, chips="M3 Max,M4 Max,M5 Max", table=table)
    bw = {(r.chip, r.gpu_cores): r.bandwidth_gbs for r in m.rows}
    assert bw == {("M3 Max", 30): 300, ("M3 Max", 40): 400, ("M4 Max", 32): 410,
                  ("M4 Max", 40): 546, ("M5 Max", 32): 460, ("M5 Max", 40): 614}
    assert [r.unverified for r in m.rows if r.chip == "M5 Max" and r.gpu_cores == 32] == [True]


def test_only_fits_and_headroom():
    full = matrix(QWEN30, 32768, probe=False)
    only = matrix(QWEN30, 32768, probe=False, only_fits=True)
    assert 0 < len(only.rows) < len(full.rows) == only.skus_considered
    assert only.rows == tuple(r for r in full.rows if r.runs)
    assert only.n_fit == full.n_fit == len(only.rows)
    for r in full.rows:
        assert r.fits == (r.headroom_bytes >= 0) and (r.runs <= r.fits)
        assert (r.predicted_decode_tps is not None) == r.fits
    # 8 GB Macs cannot hold 17 GB of weights at all; 24 GB ones fit a shorter context.
    m1 = next(r for r in full.rows if r.name == "M1 8-core 8GB")
    assert (m1.fits, m1.max_safe_context) == (False, 0)
    m4p = next(r for r in full.rows if r.name == "M4 Pro 16-core 24GB")
    assert not m4p.fits and 0 < m4p.max_safe_context < 32768


@pytest.mark.parametrize("chips, expect", [
    ("M4*", {"M4", "M4 Pro", "M4 Max"}),
    ("m3 max", {"M3 Max"}),
    ("M1 Ultra, m2*", {"M1 Ultra", "M2", "M2 Pro", "M2 Max", "M2 Ultra"}),
    ("*Ultra*", {"M1 Ultra", "M2 Ultra", "M3 Ultra"}),
    ("M4 Pro 16-core 24GB", {"M4 Pro"}),
])
def test_chips_filter(table, chips, expect):
    got = filter_skus(all_skus(table=table), chips)
    assert {m.chip for m in got} == expect
    if chips == "M4 Pro 16-core 24GB":
        assert [m.name for m in got] == ["M4 Pro 16-core 24GB"]


@pytest.mark.parametrize("chips, near", [("M4 Proo", "M4 Pro"), ("M7*", "M5"),
                                         ("m3 maxx", "M3 Max")])
def test_unknown_chip_lists_nearest_names(table, chips, near):
    with pytest.raises(MachineError, match="matches no chip; nearest: ") as e:
        filter_skus(all_skus(table=table), chips)
    assert near in str(e.value)
    r = runner.invoke(app, ["matrix", QWEN8, "--chips", chips])
    assert r.exit_code == 2 and "nearest:" in r.stderr and r.stderr.count("\n") == 1


def test_this_machine_is_marked_from_a_probe(table):
    here = probe_machine(recorded_runner("m3_max_36gb_30core"), platform="darwin", table=table)
    m = matrix(QWEN8, 8192, this_machine=here, table=table)
    assert [r.name for r in m.rows if r.this_machine] == ["M3 Max 36GB"]
    assert m.this_machine == here.name
    here = probe_machine(recorded_runner("m4_pro_24gb"), platform="darwin", table=table)
    m = matrix(QWEN8, 8192, this_machine=here, table=table)
    assert [r.name for r in m.rows if r.this_machine] == ["M4 Pro 16-core 24GB"]
    # A wired limit makes this Mac's figure differ from the SKU's: the note says so.
    here = probe_machine(recorded_runner("m4_max_128gb_wired"), platform="darwin", table=table)
    m = matrix(QWEN8, 8192, this_machine=here, table=table)
    assert [r.name for r in m.rows if r.this_machine] == ["M4 Max 128GB"]
    assert any("has its own limit, iogpu.wired_limit_mb=" in n for n in m.notes)


@pytest.mark.parametrize("fixture, why", [("m1_virtual_vm", "not a SKU of the table"),
                                          ("intel_mac", "not Apple Silicon"),
                                          ("m9_pro_unknown", "not a SKU of the table")])
def test_no_row_for_a_machine_the_table_does_not_know(table, fixture, why):
    here = probe_machine(recorded_runner(fixture), platform="darwin", table=table,
                         total_ram=lambda: 16 * 2**30)
    m = matrix(QWEN8, 8192, this_machine=here, table=table)
    assert not any(r.this_machine for r in m.rows)
    assert any(n.endswith(f"is not a row: {why}") for n in m.notes), m.notes


def test_filtered_out_machine_is_said(table):
    here = resolve_machine("M4 Pro 24GB", table=table)
    m = matrix(QWEN8, 8192, this_machine=here, chips="M1*", table=table)
    assert any(n.endswith("is not a row: filtered out") for n in m.notes)


def test_this_linux_box_marks_nothing_and_says_why():
    m = matrix(QWEN8, 8192)  # not a Mac: no probe is needed to know it is not a row
    assert not any(r.this_machine for r in m.rows)
    assert m.this_machine is None
    assert any(n.endswith("is not a row: not Apple Silicon") for n in m.notes)


def test_user_table_chip_is_a_row(tmp_path):
    user = tmp_path / "skus.toml"
    user.write_text('[chips."M6 Max"]\nfamily = "M6"\n[[chips."M6 Max".variants]]\n'
                    "gpu_cores = 48\nbandwidth_gbs = 800.0\nram_gb = [96, 192]\n")
    t = load_sku_table(user_path=user)
    m = matrix(QWEN8, 8192, probe=False, table=t)
    assert [r.name for r in m.rows[-2:]] == ["M6 Max 96GB", "M6 Max 192GB"]
    assert m.rows[-1].family == "M6" and m.rows[-1].bandwidth_gbs == 800.0


def test_folder_model_and_its_warnings(tmp_path):
    """A folder model with no max_position_embeddings: the model-level warning once, not per row."""
    cfg = config_dict("Qwen__Qwen3-0.6B")
    cfg.pop("max_position_embeddings")
    # as a llama: mlx-lm's qwen3 ModelArgs requires max_position_embeddings (refused without)
    cfg["model_type"] = "llama"
    spec = {"model.embed_tokens.weight": ("BF16", [151936, 1024])}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        spec.update({p + "self_attn.q_proj.weight": ("BF16", [2048, 1024]),
                     p + "self_attn.k_proj.weight": ("BF16", [1024, 1024]),
                     p + "self_attn.v_proj.weight": ("BF16", [1024, 1024]),
                     p + "self_attn.o_proj.weight": ("BF16", [1024, 2048]),
                     p + "mlp.gate_proj.weight": ("BF16", [3072, 1024]),
                     p + "mlp.up_proj.weight": ("BF16", [3072, 1024]),
                     p + "mlp.down_proj.weight": ("BF16", [1024, 3072])})
    folder = make_folder(tmp_path / "q06", cfg, {"model.safetensors": spec})
    m = matrix(str(folder), 8192, probe=False, chips="M2")
    assert m.source_kind == "folder" and len(m.rows) == 6
    assert m.warnings == (
        "config has no max_position_embeddings: max context searched up to 131072",)
    assert all(r.result.warnings[:1] == m.warnings for r in m.rows)


def test_bad_run_flags_are_usage_errors():
    with pytest.raises(UsageError):
        matrix(QWEN8, 0, probe=False)
    r = runner.invoke(app, ["matrix", QWEN8, "--gen", "9000", "--ctx", "8192"])
    assert r.exit_code == 2 and "--gen" in r.stderr
    r = runner.invoke(app, ["matrix", "./no/such-folder"])
    assert r.exit_code == 2 and "does not exist" in r.stderr


def test_cli_json_is_the_twin_and_exit_codes():
    r = runner.invoke(app, ["matrix", QWEN30, "--ctx", "16384", "--chips", "M4*", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d == json.loads(dumps(matrix_to_json(matrix(QWEN30, 16384, chips="M4*"))))
    assert d["schema_version"] == SCHEMA_VERSION == 2
    assert d["fits_count"] == sum(x["fits"] for x in d["rows"])
    assert {x["machine"]["chip"] for x in d["rows"]} == {"M4", "M4 Pro", "M4 Max"}
    assert all(x["machine"]["ram_bytes"] % 2**30 == 0 for x in d["rows"])
    # Nothing fits: exit 1 (as `fit`), an empty table with --only-fits.
    r = runner.invoke(app, ["matrix", QWEN30, "--chips", "M1", "--only-fits", "--json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["rows"] == []


def test_cli_table():
    r = runner.invoke(app, ["matrix", QWEN30, "--ctx", "32768", "--chips", "M1*,M4 Max"],
                      terminal_width=120)
    assert r.exit_code == 0, r.output
    m = matrix(QWEN30, 32768, chips="M1*,M4 Max")
    out = r.stdout
    assert "at 32,768 tokens on Apple Silicon" in out
    assert f"{m.n_fit} of 20 SKUs run it" in out and 0 < m.n_fit < 20
    lines = out.splitlines()
    assert [ln.strip() for ln in lines if ln.strip() in ("M1", "M4")] == ["M1", "M4"]
    rows = [ln.split() for ln in lines if ln.startswith("  M")]
    assert len(rows) == len(m.rows) == 20
    for cells, row in zip(rows, m.rows):
        n = len(row.chip.split()) + 1  # "M1 Ultra 48-core" -> 3 cells before the RAM
        want = [f"{row.ram_gb}GB", f"{row.bandwidth_gbs:g}", f"{row.usable_bytes / 1e9:,.1f}",
                "yes" if row.runs else "buffer" if row.fits else "no",
                f"{row.max_safe_context:,}"]
        if row.runs:  # tok/s and TTFT are blank where it does not fit
            want.append(f"{row.predicted_decode_tps:,.1f}")
            want.append(f"{row.predicted_ttft_s:,.1f}")
        want.append(f"{row.headroom_bytes / 1e9:,.1f}")
        assert cells[:n] == [*row.chip.split(), f"{row.gpu_cores}-core"]
        assert cells[n:] == want, cells


def test_matrix_markdown_and_csv_carry_the_ttft_the_table_shows():
    # ux-3 F15: the markdown and CSV tables keep the TTFT column, CSV booleans are JSON's
    import csv
    import io
    import json as _json

    from st_helpers import invoke

    args = ("matrix", "mlx-community/Qwen3-8B-4bit", "--chips", "M4 Pro")
    d = _json.loads(invoke(*args, "--json").stdout)
    rows = list(csv.DictReader(io.StringIO(invoke(*args, "--format", "csv").stdout)))
    assert [float(r["predicted_ttft_s"]) for r in rows] == [x["predicted_ttft_s"] for x in
                                                            d["rows"]]
    assert {r["fits"] for r in rows} <= {"true", "false"}
    md = invoke(*args, "--format", "markdown").stdout
    assert "| TTFT s |" in md
    assert f"{d['rows'][0]['predicted_ttft_s']:,.1f}" in md
