"""This Mac, probed through an injected Runner: sysctl, ioreg, sw_vers, psutil."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from mlxfit.errors import MachineError
from mlxfit.hardware.resolve import (
    GIB,
    MACHINE_HINT,
    Machine,
    Runner,
    apple_machine,
    bin_name,
    find_chip,
    fmt_gib,
    non_apple_machine,
    pick_by_ram,
    ram_unverified,
)
from mlxfit.hardware.skus import USER_TABLE, SkuTable, sku_table_or_default


def default_runner(cmd: list[str]) -> str:
    """Run a probe command; raise on any failure (the probe turns that into a note)."""
    import subprocess  # here, not at import: importing mlxfit stays cheap

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    return done.stdout


def _run(runner: Runner, cmd: list[str], notes: list[str]) -> str | None:
    try:
        return runner(cmd)
    except Exception as e:  # noqa: BLE001 - any failure of a probe command is a note, not a crash
        notes.append(
            f"`{' '.join(cmd)}` failed ({type(e).__name__}); figures that need it are degraded"
        )
        return None


def probe_brand(runner: Runner, notes: list[str]) -> str | None:
    out = _run(runner, ["sysctl", "-n", "machdep.cpu.brand_string"], notes)
    if out is None or not out.strip():
        return None
    return out.strip()


def probe_memsize(runner: Runner, notes: list[str]) -> int | None:
    out = _run(runner, ["sysctl", "-n", "hw.memsize"], notes)
    if out is None:
        return None
    try:
        n = int(out.strip())
    except ValueError:
        notes.append(f"hw.memsize is not a number ({out.strip()[:40]!r})")
        return None
    return n if n > 0 else None


def probe_wired_limit_mb(runner: Runner, notes: list[str]) -> int | None:
    """iogpu.wired_limit_mb: 0 = macOS's default. Older macOS has no such sysctl (it was
    debug.iogpu.wired_limit), which is not worth alarming anyone about: the default then holds."""
    try:
        out = runner(["sysctl", "-n", "iogpu.wired_limit_mb"])
    except Exception:  # noqa: BLE001 - absent or unreadable: the default working set holds
        notes.append("iogpu.wired_limit_mb unreadable: assumed unset (the default working set)")
        return None
    try:
        n = int(out.strip())
    except ValueError:
        notes.append(f"iogpu.wired_limit_mb is not a number ({out.strip()[:40]!r}); ignored")
        return None
    return n if n >= 0 else None


_GPU_CORES_RE = r'"gpu-core-count"\s*=\s*(\d+)'  # compiled on first use (re caches it): start-up


def probe_gpu_cores(runner: Runner, notes: list[str]) -> int | None:
    out = _run(runner, ["ioreg", "-rc", "AGXAccelerator"], notes)
    if out is None:
        return None
    m = re.search(_GPU_CORES_RE, out)
    if m is None:
        notes.append("no gpu-core-count in `ioreg -rc AGXAccelerator` (no Apple GPU visible)")
        return None
    return int(m.group(1))


def probe_macos_major(runner: Runner, notes: list[str]) -> int | None:
    out = _run(runner, ["sw_vers", "-productVersion"], notes)
    if out is None:
        return None
    m = re.match(r"\s*(\d+)", out)
    if m is None:
        notes.append(f"unreadable macOS version {out.strip()[:40]!r}")
        return None
    return int(m.group(1))


def _psutil_total() -> int:
    import psutil  # here, not at import: importing mlxfit stays cheap

    return int(psutil.virtual_memory().total)


# compiled on first use (re caches it): start-up
_BRAND_RE = r"(?i)^Apple\s+(M\d+(?:\s+(?:Pro|Max|Ultra))?)\s*(\(Virtual\))?\s*$"


def probe_machine(
    runner: Runner = default_runner,
    platform: str = sys.platform,
    macos_major: int | None = None,
    table: SkuTable | None = None,
    total_ram: Callable[[], int] | None = None,
) -> Machine:
    """The machine this runs on. On macOS: sysctl, ioreg and sw_vers through `runner` (tests feed
    recorded outputs). Elsewhere: total RAM from psutil (`total_ram` replaces it in tests).
    `macos_major`, when given, wins over sw_vers."""
    t = sku_table_or_default(table)
    notes: list[str] = []
    ram_probe = total_ram if total_ram is not None else _psutil_total

    def fallback_ram() -> int:
        try:
            n = int(ram_probe())
        except Exception as e:  # noqa: BLE001 - psutil missing or failing: one clear error below
            raise MachineError(
                f"cannot read this machine's RAM ({type(e).__name__}); {MACHINE_HINT} or "
                "--memory-budget"
            ) from None
        if n <= 0:
            raise MachineError(
                f"cannot read this machine's RAM; {MACHINE_HINT} or --memory-budget"
            )
        return n

    # Where each figure came from, for `mlxfit machine` ("probed from").
    src: dict[str, str] = {"platform": f"sys.platform = {platform!r}"}
    if platform != "darwin":
        ram = fallback_ram()
        src.update(chip="none: not macOS", ram_bytes=f"psutil.virtual_memory().total = {ram}")
        return non_apple_machine(
            platform.capitalize() if platform else "unknown OS", ram, None, notes, t, src
        )

    brand = probe_brand(runner, notes)
    src["chip"] = (f"sysctl -n machdep.cpu.brand_string = {brand!r}" if brand is not None
                   else "unknown: sysctl -n machdep.cpu.brand_string gave nothing")
    ram_bytes = probe_memsize(runner, notes)
    if ram_bytes is None:
        ram_bytes = fallback_ram()
        notes.append("RAM read through psutil instead of hw.memsize")
        src["ram_bytes"] = f"psutil.virtual_memory().total = {ram_bytes} (hw.memsize failed)"
    else:
        src["ram_bytes"] = f"sysctl -n hw.memsize = {ram_bytes}"
    if macos_major is None:
        macos_major = probe_macos_major(runner, notes)
        src["macos_major"] = (f"sw_vers -productVersion: major {macos_major}" if macos_major
                              else "unknown: sw_vers -productVersion gave nothing")
        if macos_major is None:
            notes.append(
                "macOS version unknown: used the pre-26 working-set fraction (the smaller)"
            )
    else:
        src["macos_major"] = f"--macos {macos_major}"

    if brand is not None and not brand.lower().startswith("apple"):
        return non_apple_machine(f"Mac ({brand})", ram_bytes, macos_major, notes, t, src)

    wired = probe_wired_limit_mb(runner, notes)
    src["wired_limit_mb"] = (
        "unreadable: assumed unset" if wired is None
        else f"sysctl -n iogpu.wired_limit_mb = {wired}"
        + ("" if wired else " (unset: the default working set)")
    )
    if wired:
        notes.append(f"iogpu.wired_limit_mb={wired} is set: it replaces the default working set")
    gpu_cores = probe_gpu_cores(runner, notes)
    src["gpu_cores"] = (f"ioreg -rc AGXAccelerator: gpu-core-count = {gpu_cores}"
                        if gpu_cores is not None
                        else "unknown: no gpu-core-count in ioreg -rc AGXAccelerator")
    ram_txt = fmt_gib(ram_bytes)

    def unknown(name: str, why: str, chip: str | None = None) -> Machine:
        return apple_machine(
            name=name,
            chip=chip,
            variant=None,
            gpu_cores=gpu_cores,
            ram_bytes=ram_bytes,
            macos_major=macos_major,
            wired_limit_mb=wired,
            unverified=True,
            notes=[why] + notes,
            table=t,
            sources=src,
        )

    if brand is None:
        return unknown(
            f"Apple Silicon (chip unknown) {ram_txt}GB",
            f"chip name unreadable: bandwidth unknown; {MACHINE_HINT}",
        )
    m = re.match(_BRAND_RE, brand)
    if m is None:
        return unknown(
            f"{brand} {ram_txt}GB",
            f"unknown chip {brand!r}: bandwidth unknown; {MACHINE_HINT} or add it to {USER_TABLE}",
        )
    if m.group(2):
        # Virtualization.framework reports a generic name; neither the host chip, its bin nor its
        # bandwidth can be told from inside, and the GPU is paravirtualized.
        return unknown(
            f"{brand} VM {ram_txt}GB",
            f"virtual machine ({brand!r}): the host chip and its bandwidth are unknown "
            f"and the GPU is paravirtualized; {MACHINE_HINT}",
        )
    try:
        chip = find_chip(t, m.group(1))
    except MachineError:
        return unknown(
            f"{brand} {ram_txt}GB",
            f"unknown chip {brand!r}: not in the SKU table, bandwidth unknown; "
            f"{MACHINE_HINT} or add it to {USER_TABLE}",
        )

    variants = t["chips"][chip]["variants"]
    ram_gb = round(ram_bytes / GIB)
    unverified = False
    variant: dict[str, Any] | None = None
    if gpu_cores is not None:
        match = [v for v in variants if v["gpu_cores"] == gpu_cores]
        if match:
            variant = match[0]
            if ram_gb not in variant["ram_gb"]:
                unverified = True
                notes.append(
                    f"{ram_gb}GB is not a size the table lists for {chip} {gpu_cores}-core"
                )
        else:
            unverified = True
            notes.append(
                f"{gpu_cores}-core GPU is not a {chip} bin the table knows; bin chosen by RAM size"
            )
    if variant is None:
        variant, pick_notes = pick_by_ram(chip, variants, ram_gb)
        notes.extend(pick_notes)
        if variant is None:
            if len({v["bandwidth_gbs"] for v in variants}) == 1:
                variant = min(variants, key=lambda v: v["gpu_cores"])
                unverified = True
                notes.append(
                    f"{ram_gb}GB is not a size the table lists for {chip}; its bins share one bandwidth"
                )
            else:
                return unknown(
                    f"{chip} {ram_txt}GB",
                    f"{ram_gb}GB is not a size the table lists for {chip} and the GPU bin "
                    f"is unknown: bandwidth unknown; {MACHINE_HINT}",
                    chip,
                )
    unverified = unverified or ram_unverified(variant, ram_gb)
    cores = gpu_cores if gpu_cores is not None else variant["gpu_cores"]
    if gpu_cores is None:
        src["gpu_cores"] += f"; apple_skus.toml: the {chip} bin sold with {ram_gb}GB"
    return apple_machine(
        name=bin_name(
            chip, variants, variant["gpu_cores"], ram_gb, gpu_cores == variant["gpu_cores"]
        )
        if ram_gb * GIB == ram_bytes
        else f"{chip} {ram_txt}GB",
        chip=chip,
        variant=variant,
        gpu_cores=cores,
        ram_bytes=ram_bytes,
        macos_major=macos_major,
        wired_limit_mb=wired,
        unverified=unverified,
        notes=notes,
        table=t,
        sources=src,
    )
