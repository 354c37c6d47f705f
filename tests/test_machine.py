"""mlxfit.machine: the SKU table, --machine strings, probing from recorded outputs (no Mac needed)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from st_helpers import NO_USER_TABLE, PROBE_FIXTURES, recorded_runner

from mlxfit.errors import MachineError
from mlxfit.hardware import resolve as mm
from mlxfit.hardware.probe import probe_machine
from mlxfit.hardware.resolve import (
    GIB,
    Machine,
    all_skus,
    machine_with_budget,
    resolve_machine,
    usable_bytes_for,
    working_set_fraction,
)
from mlxfit.hardware.skus import load_sku_table
from mlxfit.resources import data_path


@pytest.fixture(scope="module")
def table() -> dict:
    # The shipped table alone: a developer's own ~/.config/mlxfit/apple_skus.toml must not leak in.
    return load_sku_table(user_path=NO_USER_TABLE)


def failing_runner(argv: list[str]) -> str:
    raise AssertionError(f"no command may run here, got {argv}")


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

EXPECTED_CHIPS = [f"M{g}{t}" for g in range(1, 6) for t in ("", " Pro", " Max")] + [
    "M1 Ultra",
    "M2 Ultra",
    "M3 Ultra",
]


def test_table_covers_every_chip_m1_to_m5(table):
    assert set(EXPECTED_CHIPS) <= set(table["chips"])


def test_every_variant_has_cores_bandwidth_and_ram(table):
    for name, chip in table["chips"].items():
        assert chip["variants"], name
        for v in chip["variants"]:
            assert isinstance(v["gpu_cores"], int) and v["gpu_cores"] > 0, name
            assert v["bandwidth_gbs"] > 0, name
            assert v["ram_gb"] and all(isinstance(r, int) and r > 0 for r in v["ram_gb"]), name
            assert set(v.get("unverified_ram_gb", [])) <= set(v["ram_gb"]), name


def test_every_number_in_the_chip_table_has_a_source_comment(table):
    text = data_path("apple_skus.toml").read_text()
    chips_part = text[: text.index("[working_set]")]
    keyed = re.compile(r"^\s*(gpu_cores|bandwidth_gbs|ram_gb|unverified_ram_gb|unverified)\s*=")
    seen = {"gpu_cores": 0, "bandwidth_gbs": 0, "ram_gb": 0}
    for line in chips_part.splitlines():
        m = keyed.match(line)
        if not m:
            continue
        assert "#" in line, f"no source comment: {line!r}"
        comment = line.split("#", 1)[1].strip()
        assert comment.lower().startswith("source:") and len(comment) > len("source:") + 3, line
        if m.group(1) in seen:
            seen[m.group(1)] += 1
    n_variants = sum(len(c["variants"]) for c in table["chips"].values())
    assert seen == {"gpu_cores": n_variants, "bandwidth_gbs": n_variants, "ram_gb": n_variants}


def test_fraction_points_have_source_comments():
    text = data_path("apple_skus.toml").read_text()
    tail = text[text.index("[working_set]") :]
    points = [ln for ln in tail.splitlines() if ln.strip().startswith("{ ram_gb")]
    assert len(points) >= 9
    assert all("# Source:" in ln for ln in points)


def test_binned_max_chips_have_both_bandwidths(table):
    bw = {
        name: {v["gpu_cores"]: v["bandwidth_gbs"] for v in c["variants"]}
        for name, c in table["chips"].items()
    }
    assert bw["M3 Max"] == {30: 300.0, 40: 400.0}
    assert bw["M4 Max"] == {32: 410.0, 40: 546.0}
    assert bw["M5 Max"] == {32: 460.0, 40: 614.0}
    m5max32 = next(v for v in table["chips"]["M5 Max"]["variants"] if v["gpu_cores"] == 32)
    assert m5max32.get("unverified") is True


@pytest.mark.parametrize("key", ["before_26", "from_26"])
def test_working_set_fraction_is_monotonic_in_ram(table, key):
    major = 26 if key == "from_26" else 15
    sizes = [8, 16, 18, 24, 32, 36, 48, 64, 96, 128, 192, 256, 512]
    fr = [working_set_fraction(g * GIB, major, table) for g in sizes]
    assert fr == sorted(fr)
    assert all(0.5 < f < 0.9 for f in fr)


def test_macos_26_never_gives_less_than_before(table):
    for g in (8, 16, 24, 32, 36, 48, 64, 96, 128, 192, 256, 512):
        assert working_set_fraction(g * GIB, 26, table) >= working_set_fraction(g * GIB, 15, table)


def test_working_set_fraction_matches_the_reference_points(table):
    assert working_set_fraction(16 * GIB, 26, table) == pytest.approx(0.74)
    assert working_set_fraction(64 * GIB, 26, table) == pytest.approx(0.81)
    assert working_set_fraction(128 * GIB, 26, table) == pytest.approx(0.84)
    assert working_set_fraction(32 * GIB, 15, table) == pytest.approx(2 / 3, abs=1e-3)
    assert working_set_fraction(64 * GIB, 14, table) == pytest.approx(0.75)
    # 36/48 GB before 26 are not pinned down: interpolated between 2/3 and 3/4.
    assert 0.6667 < working_set_fraction(48 * GIB, 15, table) < 0.75


def test_unknown_macos_uses_the_smaller_pre_26_fraction(table):
    assert working_set_fraction(64 * GIB, None, table) == pytest.approx(0.75)


def test_max_buffer_is_about_half_the_ram(table):
    assert mm.max_buffer_bytes_for(8 * GIB, table) == 4 * GIB
    assert mm.max_buffer_bytes_for(64 * GIB, table) == 36 * GIB
    assert mm.max_buffer_bytes_for(24 * GIB, table) == 12 * GIB  # step: errs low between points


# ---------------------------------------------------------------------------------------------
# usable_bytes_for / machine_with_budget
# ---------------------------------------------------------------------------------------------


def test_usable_from_fraction(table):
    usable, source = usable_bytes_for(24 * GIB, 26, None, table)
    frac = working_set_fraction(24 * GIB, 26, table)
    assert usable == int(24 * GIB * frac)
    assert source == f"working-set fraction {frac:.3f} of 24 GiB = 25.77 GB (macOS 26+)"
    # ux-3 F19: the phrase's product is the usable figure to the printed precision
    shown = float(source.split()[2]) * float(source.split("= ")[1].split(" GB")[0])
    assert abs(shown - usable / 1e9) < 0.05


def test_a_memory_budget_in_gib_reads_back_in_gib():
    m = machine_with_budget(resolve_machine("M4 Pro 48GB"), 16 * GIB)
    assert m.usable_source == "--memory-budget 17.18 GB (16 GiB)"
    assert machine_with_budget(resolve_machine("M4 Pro 48GB"), 16 * 10**9).usable_source == (
        "--memory-budget 16.00 GB")


def test_wired_limit_replaces_the_fraction(table):
    usable, source = usable_bytes_for(128 * GIB, 26, 114688, table)
    assert usable == 112 * GIB
    assert source == "iogpu.wired_limit_mb=114688"
    assert usable_bytes_for(128 * GIB, 26, 0, table)[1].startswith("working-set fraction")


def test_wired_limit_above_ram_is_capped(table):
    usable, source = usable_bytes_for(16 * GIB, 26, 32768, table)
    assert usable == 16 * GIB and "capped" in source


def test_bad_usable_inputs(table):
    with pytest.raises(MachineError):
        usable_bytes_for(0, 26, None, table)
    with pytest.raises(MachineError):
        usable_bytes_for(16 * GIB, 26, -1, table)


def test_memory_budget_replaces_usable(table):
    m = resolve_machine("M4 Pro 24GB", table=table)
    b = machine_with_budget(m, 20 * GIB)
    assert b.usable_bytes == 20 * GIB
    assert b.usable_source.startswith("--memory-budget")
    assert b.bandwidth_gbs == m.bandwidth_gbs and b.ram_bytes == m.ram_bytes
    assert machine_with_budget(m, 24 * GIB).usable_bytes == m.ram_bytes  # all of it: allowed
    with pytest.raises(MachineError, match="is more than the 25.77 GB"):  # more than RAM
        machine_with_budget(m, 24 * GIB + 1)
    with pytest.raises(MachineError):
        machine_with_budget(m, 0)


# ---------------------------------------------------------------------------------------------
# resolve_machine
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, chip, cores, ram_gb, bw",
    [
        ("M4 Pro 24GB", "M4 Pro", 16, 24, 273.0),
        ("m4 pro 24gb", "M4 Pro", 16, 24, 273.0),
        ("  M4Pro   24 GB ", "M4 Pro", 16, 24, 273.0),
        ("Apple M4 Max 128GB", "M4 Max", 40, 128, 546.0),
        ("M3 Max 30-core 96GB", "M3 Max", 30, 96, 300.0),
        ("M4 Max 40c 128 GB", "M4 Max", 40, 128, 546.0),
        ("M4 Max 40-core GPU 64GB", "M4 Max", 40, 64, 546.0),
        ("M2 Ultra 192GB", "M2 Ultra", 60, 192, 800.0),
        ("M1 8GB", "M1", 7, 8, 68.25),
        ("M3 Ultra 512GB", "M3 Ultra", 80, 512, 819.0),
        ("M5 Pro 64", "M5 Pro", 20, 64, 307.0),  # the well-sourced bin first
    ],
)
def test_resolve_parses_variants(table, spec, chip, cores, ram_gb, bw):
    m = resolve_machine(spec, table=table)
    assert (m.chip, m.gpu_cores, m.ram_bytes, m.bandwidth_gbs) == (chip, cores, ram_gb * GIB, bw)
    assert m.is_apple_silicon and m.macos_major == 26
    assert m.max_buffer_bytes is not None and 0 < m.max_buffer_bytes < m.ram_bytes
    assert 0 < m.usable_bytes < m.ram_bytes


def test_ram_is_binary_gb(table):
    assert resolve_machine("M4 Pro 24GB", table=table).ram_bytes == 25769803776


@pytest.mark.parametrize(
    "spec, cores, bw",
    [
        ("M3 Max 36GB", 30, 300.0),
        ("M3 Max 96GB", 30, 300.0),
        ("M3 Max 48GB", 40, 400.0),
        ("M3 Max 64GB", 40, 400.0),
        ("M3 Max 128GB", 40, 400.0),
        ("M4 Max 36GB", 32, 410.0),
        ("M4 Max 48GB", 40, 546.0),
        ("M4 Max 128GB", 40, 546.0),
        ("M5 Max 36GB", 32, 460.0),
        ("M5 Max 128GB", 40, 614.0),
        ("M2 Max 96GB", 38, 400.0),
    ],
)
def test_bin_chosen_by_ram(table, spec, cores, bw):
    m = resolve_machine(spec, table=table)
    assert (m.gpu_cores, m.bandwidth_gbs) == (cores, bw)


def test_bin_chosen_by_cores(table):
    assert resolve_machine("M3 Max 40c 64GB", table=table).bandwidth_gbs == 400.0
    assert resolve_machine("M4 Max 32-core 36GB", table=table).bandwidth_gbs == 410.0
    assert resolve_machine("M5 Max 40c 128GB", table=table).unverified is False


def test_binned_names_say_the_cores_only_when_needed(table):
    assert resolve_machine("m4 pro 24gb", table=table).name == "M4 Pro 24GB"
    assert resolve_machine("M4 Pro 20c 24GB", table=table).name == "M4 Pro 20-core 24GB"
    assert resolve_machine("M4 Max 36GB", table=table).name == "M4 Max 36GB"
    assert resolve_machine("M3 Max 30-core 96GB", table=table).name == "M3 Max 96GB"


def test_same_bandwidth_bins_pick_the_smaller_gpu_with_a_note(table):
    m = resolve_machine("M1 Max 64GB", table=table)
    assert m.gpu_cores == 24 and m.bandwidth_gbs == 400.0
    assert any("GPU cores not given" in n for n in m.notes)
    assert resolve_machine("M1 Max 32c 64GB", table=table).notes == ()


def test_unverified_sku_is_flagged(table):
    m = resolve_machine("M5 Max 36GB", table=table)
    assert m.unverified and any("weak source" in n for n in m.notes)
    assert resolve_machine("M4 Max 36GB", table=table).unverified is False


def test_macos_generation_changes_usable(table):
    new = resolve_machine("M4 Max 64GB", macos_major=26, table=table)
    old = resolve_machine("M4 Max 64GB", macos_major=15, table=table)
    assert new.usable_bytes == int(64 * GIB * 0.81)
    assert old.usable_bytes == int(64 * GIB * 0.75)
    assert "before macOS 26" in old.usable_source


def test_ram_size_not_shipped_lists_valid_sizes(table):
    with pytest.raises(MachineError, match=r"M4 Pro ships with 24, 48, 64 GB, not 32GB"):
        resolve_machine("M4 Pro 32GB", table=table)
    with pytest.raises(MachineError, match=r"M3 Max 40-core ships with 48, 64, 128 GB, not 36GB"):
        resolve_machine("M3 Max 40c 36GB", table=table)


def test_unknown_cores(table):
    with pytest.raises(MachineError, match=r"M4 Max has no 38-core GPU; its bins are 32, 40-core"):
        resolve_machine("M4 Max 38c 64GB", table=table)


def test_unknown_chip_lists_nearest_names(table):
    with pytest.raises(MachineError) as e:
        resolve_machine("M9 Pro 48GB", table=table)
    msg = str(e.value)
    assert msg.startswith("unknown chip 'M9 Pro'; nearest: ")
    assert "Pro" in msg.split("nearest:")[1]
    assert "\n" not in msg
    with pytest.raises(MachineError, match="nearest: M4 Max"):
        resolve_machine("M4 Maxx 64GB", table=table)


@pytest.mark.parametrize("spec", ["", "M4 Pro", "24GB", "M4 Pro 24GB 48GB", "M4 Max 40c 32c 64GB"])
def test_malformed_specs(table, spec):
    with pytest.raises(MachineError):
        resolve_machine(spec, table=table)


# ---------------------------------------------------------------------------------------------
# all_skus
# ---------------------------------------------------------------------------------------------


def test_all_skus_lists_every_variant_and_ram(table):
    skus = all_skus(table=table)
    n = sum(len(v["ram_gb"]) for c in table["chips"].values() for v in c["variants"])
    assert len(skus) == n
    assert len({m.name for m in skus}) == n  # names tell every SKU apart
    assert all(isinstance(m, Machine) and m.bandwidth_gbs and m.chip for m in skus)
    names = {m.name for m in skus}
    assert {"M3 Max 36GB", "M4 Max 128GB", "M3 Ultra 80-core 96GB", "M3 Ultra 512GB"} <= names
    for m in skus:  # the matrix must agree with resolve_machine
        again = resolve_machine(f"{m.chip} {m.gpu_cores}c {round(m.ram_gb)}GB", table=table)
        assert (again.bandwidth_gbs, again.usable_bytes) == (m.bandwidth_gbs, m.usable_bytes)


# ---------------------------------------------------------------------------------------------
# The user's extra table
# ---------------------------------------------------------------------------------------------

USER_TOML = """
[chips."M6"]
family = "M6"

[[chips."M6".variants]]
gpu_cores = 12          # Source: my own Mac
bandwidth_gbs = 170.0   # Source: Apple spec page
ram_gb = [16, 24, 32]   # Source: Apple spec page

[[chips."M4 Pro".variants]]
gpu_cores = 20          # Source: correction
bandwidth_gbs = 280.0   # Source: pretend correction
ram_gb = [24, 48, 64]   # Source: correction
"""


def test_user_table_adds_and_replaces(tmp_path):
    user = tmp_path / "apple_skus.toml"
    user.write_text(USER_TOML)
    merged = load_sku_table(user_path=user)
    m6 = resolve_machine("M6 24GB", table=merged)
    assert (m6.chip, m6.bandwidth_gbs) == ("M6", 170.0)
    # The user's `variants` array replaces the shipped one whole.
    m4p = resolve_machine("M4 Pro 24GB", table=merged)
    assert (m4p.gpu_cores, m4p.bandwidth_gbs) == (20, 280.0)
    # Everything else is still there.
    assert resolve_machine("M3 Max 36GB", table=merged).bandwidth_gbs == 300.0
    # And the shipped table alone is untouched.
    assert (
        resolve_machine("M4 Pro 24GB", table=load_sku_table(user_path=NO_USER_TABLE)).bandwidth_gbs
        == 273.0
    )


def test_extra_path_merges_last(tmp_path):
    user = tmp_path / "user.toml"
    user.write_text(USER_TOML)
    extra = tmp_path / "extra.toml"
    extra.write_text("[non_apple]\nusable_fraction = 0.5  # Source: test\n")
    t = load_sku_table(extra_path=extra, user_path=user)
    assert t["non_apple"]["usable_fraction"] == 0.5
    assert "M6" in t["chips"]


def test_table_is_cached(tmp_path):
    user = tmp_path / "apple_skus.toml"
    user.write_text(USER_TOML)
    assert load_sku_table(user_path=user) is load_sku_table(user_path=user)


def test_bad_user_table_is_a_machine_error(tmp_path):
    user = tmp_path / "apple_skus.toml"
    user.write_text('[chips."M7"]\nfamily = "M7"\n[[chips."M7".variants]]\ngpu_cores = 10\n')
    with pytest.raises(MachineError, match="M7"):
        load_sku_table(user_path=user)
    user.write_text("[chips\n")
    with pytest.raises(MachineError, match="cannot read"):
        load_sku_table(user_path=user)
    with pytest.raises(MachineError, match="does not exist"):
        load_sku_table(extra_path=tmp_path / "missing.toml", user_path=NO_USER_TABLE)


# ---------------------------------------------------------------------------------------------
# Probing from recorded outputs
# ---------------------------------------------------------------------------------------------


def test_probe_m4_pro_24gb(table):
    m = probe_machine(recorded_runner("m4_pro_24gb"), platform="darwin", table=table)
    assert (m.chip, m.gpu_cores, m.ram_bytes, m.bandwidth_gbs) == ("M4 Pro", 16, 24 * GIB, 273.0)
    assert m.macos_major == 26 and m.is_apple_silicon and not m.unverified
    assert m.usable_source.startswith("working-set fraction") and "macOS 26+" in m.usable_source
    assert m.notes == ()
    assert m == resolve_machine("M4 Pro 16c 24GB", table=table)


def test_probe_m3_max_binned(table):
    m = probe_machine(recorded_runner("m3_max_36gb_30core"), platform="darwin", table=table)
    assert (m.chip, m.gpu_cores, m.bandwidth_gbs) == ("M3 Max", 30, 300.0)
    assert m.macos_major == 15 and "before macOS 26" in m.usable_source
    assert m.usable_bytes == int(36 * GIB * working_set_fraction(36 * GIB, 15, table))


def test_probe_wired_limit(table):
    m = probe_machine(recorded_runner("m4_max_128gb_wired"), platform="darwin", table=table)
    assert (m.chip, m.gpu_cores, m.bandwidth_gbs) == ("M4 Max", 40, 546.0)
    assert m.usable_bytes == 114688 * 2**20
    assert m.usable_source == "iogpu.wired_limit_mb=114688"
    assert any("wired_limit_mb=114688" in n for n in m.notes)


def test_probe_virtual_machine_has_no_bandwidth(table):
    m = probe_machine(recorded_runner("m1_virtual_vm"), platform="darwin", table=table)
    assert m.is_apple_silicon and m.chip is None and m.bandwidth_gbs is None
    assert m.unverified and m.ram_bytes == 8 * GIB
    assert "virtual machine" in m.notes[0] and "--machine" in m.notes[0]
    assert "(Virtual)" in m.name


def test_probe_unknown_chip_has_no_bandwidth(table):
    m = probe_machine(recorded_runner("m9_pro_unknown"), platform="darwin", table=table)
    assert m.chip is None and m.bandwidth_gbs is None and m.unverified
    assert m.notes[0].startswith("unknown chip 'Apple M9 Pro'")
    assert m.gpu_cores == 24 and m.ram_bytes == 48 * GIB and m.macos_major == 29
    assert m.usable_bytes > 0  # the working set still applies: it is macOS, not the chip


def test_probe_degrades_with_notes(table):
    run = recorded_runner("m4_pro_24gb_degraded")
    m = probe_machine(run, platform="darwin", table=table)
    assert (m.chip, m.bandwidth_gbs, m.gpu_cores) == ("M4 Pro", 273.0, 16)
    assert m.macos_major is None and "pre-26" in m.usable_source
    text = " | ".join(m.notes)
    assert "iogpu.wired_limit_mb unreadable" in text
    assert "`ioreg -rc AGXAccelerator` failed" in text
    assert "macOS version unknown" in text
    assert "GPU cores not given" in text


def test_probe_macos_major_argument_wins(table):
    m = probe_machine(
        recorded_runner("m3_max_36gb_30core"), platform="darwin", macos_major=26, table=table
    )
    assert m.macos_major == 26 and "macOS 26+" in m.usable_source


def test_probe_intel_mac_is_not_apple_silicon(table):
    m = probe_machine(recorded_runner("intel_mac"), platform="darwin", table=table)
    assert not m.is_apple_silicon and m.bandwidth_gbs is None and m.chip is None
    assert m.ram_bytes == 32 * GIB and m.macos_major == 15
    assert m.usable_source.startswith("not Apple Silicon")
    assert m.notes[0].startswith("not Apple Silicon")


def test_probe_linux_uses_total_ram_and_runs_no_command(table):
    total = int((PROBE_FIXTURES / "linux.txt").read_text().split()[-1])
    m = probe_machine(failing_runner, platform="linux", table=table, total_ram=lambda: total)
    assert not m.is_apple_silicon and m.bandwidth_gbs is None and m.chip is None
    assert m.ram_bytes == total and m.usable_bytes == int(total * 0.75)
    assert m.usable_source.startswith("not Apple Silicon: assumed 0.75")
    assert "not Apple Silicon" in m.notes[0] and "pass --machine" in m.notes[0]
    assert m.max_buffer_bytes is None and m.macos_major is None


@pytest.mark.skipif(sys.platform == "darwin", reason="reads this Linux machine's own RAM")
def test_probe_linux_with_real_psutil(table):
    m = probe_machine(failing_runner, platform=sys.platform, table=table)
    assert m.ram_bytes > 0 and not m.is_apple_silicon


def test_probe_unreadable_ram_is_a_machine_error(table):
    def broken() -> int:
        raise OSError("no /proc")

    with pytest.raises(MachineError, match="cannot read this machine's RAM"):
        probe_machine(failing_runner, platform="linux", table=table, total_ram=broken)


def test_probe_every_command_failing_never_crashes(table):
    def dead(argv: list[str]) -> str:
        raise subprocess.TimeoutExpired(argv, 10)

    m = probe_machine(dead, platform="darwin", table=table, total_ram=lambda: 16 * GIB)
    assert m.chip is None and m.bandwidth_gbs is None and m.ram_bytes == 16 * GIB
    assert m.notes and "chip name unreadable" in m.notes[0]


# ---------------------------------------------------------------------------------------------
# No function ever returns a bandwidth for an unknown chip
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "brand",
    [
        "Apple M9 Pro",
        "Apple M5 Ultra",
        "Apple M1 (Virtual)",
        "Apple M4 Pro (Virtual)",
        "Apple A18 Pro",
        "Apple",
        "Apple processor",
        "",
    ],
)
def test_no_bandwidth_for_an_unknown_chip(table, brand):
    outputs = {
        "sysctl -n machdep.cpu.brand_string": brand + "\n",
        "sysctl -n hw.memsize": str(32 * GIB) + "\n",
        "sysctl -n iogpu.wired_limit_mb": "0\n",
        "ioreg -rc AGXAccelerator": '"gpu-core-count" = 20\n',
        "sw_vers -productVersion": "26.0\n",
    }
    m = probe_machine(lambda argv: outputs[" ".join(argv)], platform="darwin", table=table)
    assert m.bandwidth_gbs is None and m.chip is None and m.unverified
    with pytest.raises(MachineError):
        resolve_machine(f"{brand} 32GB", table=table)


def test_known_chip_with_an_unlisted_ram_size_and_no_cores_gets_no_bandwidth_guess(table):
    # M4 Max bins differ in bandwidth; 96GB is no M4 Max size and the cores are unknown.
    outputs = {
        "sysctl -n machdep.cpu.brand_string": "Apple M4 Max\n",
        "sysctl -n hw.memsize": str(96 * GIB) + "\n",
        "sysctl -n iogpu.wired_limit_mb": "0\n",
        "ioreg -rc AGXAccelerator": "",
        "sw_vers -productVersion": "26.0\n",
    }
    m = probe_machine(lambda argv: outputs[" ".join(argv)], platform="darwin", table=table)
    assert m.bandwidth_gbs is None and m.chip == "M4 Max" and m.unverified


def test_module_import_is_cheap():
    code = "import sys, mlxfit.hardware.resolve; print('psutil' in sys.modules, 'subprocess' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# ---------------------------------------------------------------------------------------------
# Where each figure came from (what `mlxfit machine` shows as "probed from")
# ---------------------------------------------------------------------------------------------


def test_probe_says_where_each_figure_came_from(table):
    m = probe_machine(recorded_runner("m4_pro_24gb"), platform="darwin", table=table)
    assert m.sources == {
        "platform": "sys.platform = 'darwin'",
        "chip": "sysctl -n machdep.cpu.brand_string = 'Apple M4 Pro'",
        "ram_bytes": "sysctl -n hw.memsize = 25769803776",
        "macos_major": "sw_vers -productVersion: major 26",
        "wired_limit_mb": "sysctl -n iogpu.wired_limit_mb = 0 (unset: the default working set)",
        "gpu_cores": "ioreg -rc AGXAccelerator: gpu-core-count = 16",
        "bandwidth_gbs": "apple_skus.toml, M4 Pro 16-core",
        "usable_bytes": m.usable_source,
    }


def test_probe_sources_when_things_fail_or_are_overridden(table):
    m = probe_machine(recorded_runner("m4_pro_24gb_degraded"), platform="darwin", table=table)
    assert m.sources["wired_limit_mb"] == "unreadable: assumed unset"
    assert m.sources["gpu_cores"] == ("unknown: no gpu-core-count in ioreg -rc AGXAccelerator; "
                                      "apple_skus.toml: the M4 Pro bin sold with 24GB")
    assert m.sources["macos_major"].startswith("unknown")
    m = probe_machine(recorded_runner("m4_max_128gb_wired"), platform="darwin", table=table,
                      macos_major=15)
    assert m.sources["macos_major"] == "--macos 15"
    assert m.sources["usable_bytes"] == "iogpu.wired_limit_mb=114688" == m.usable_source
    m = probe_machine(recorded_runner("m1_virtual_vm"), platform="darwin", table=table)
    assert m.sources["bandwidth_gbs"] == "unknown (no SKU table entry)"
    m = probe_machine(failing_runner, platform="linux", table=table, total_ram=lambda: 8 * GIB)
    assert m.sources["ram_bytes"] == f"psutil.virtual_memory().total = {8 * GIB}"
    assert m.sources["bandwidth_gbs"] == "unknown (not Apple Silicon)"


def test_resolved_and_budgeted_machines_say_where_too(table):
    m = resolve_machine("M3 Max 96GB", table=table)
    assert m.sources["chip"] == "--machine 'M3 Max 96GB'"
    assert m.sources["gpu_cores"] == "apple_skus.toml: the M3 Max bin sold with 96GB"
    assert m.sources["bandwidth_gbs"] == "apple_skus.toml, M3 Max 30-core"
    b = machine_with_budget(m, 50 * 10**9)
    assert b.usable_source.startswith("--memory-budget")
    assert b.sources["usable_bytes"] == b.usable_source
    assert b.sources["chip"] == m.sources["chip"]
    assert all(s.sources["bandwidth_gbs"].startswith("apple_skus.toml") for s in all_skus(table=table))


def test_compute_comes_from_the_table_the_machine_was_resolved_against(tmp_path):
    # A user's table that doubles M4 Pro's GPU clock doubles the chip compute prefill uses,
    # for a machine resolved against that table (not the shipped table reloaded later).
    from mlxfit.verbs.edges import compute_for

    shipped = load_sku_table(user_path=NO_USER_TABLE)
    clock = shipped["chips"]["M4 Pro"]["gpu_clock_mhz"]
    user = tmp_path / "apple_skus.toml"
    user.write_text(f'[chips."M4 Pro"]\ngpu_clock_mhz = {2 * clock}  # Source: test\n')
    merged = load_sku_table(user_path=user)
    base = compute_for(resolve_machine("M4 Pro 24GB", table=shipped))
    fast = compute_for(resolve_machine("M4 Pro 24GB", table=merged))
    assert base is not None and fast is not None
    assert fast.gpu_flops == pytest.approx(2 * base.gpu_flops)
