"""The ``mlxfit machine`` twin: a named Apple Silicon SKU, or this machine probed."""

from __future__ import annotations

from mlxfit.hardware.probe import probe_machine
from mlxfit.hardware.resolve import Machine, resolve_machine
from mlxfit.settings import DEFAULT_MACOS
from mlxfit.verbs.edges import check_machine_params


def machine(spec: str | None = None, *, macos: int | None = None) -> Machine:
    """``spec`` ("M4 Max 128GB") resolved from the SKU table, else this machine probed
    (sysctl, ioreg, sw_vers, psutil); ``macos``: the macOS major version for the working set."""
    check_machine_params(macos=macos)  # before any probe
    if spec:
        return resolve_machine(spec, macos_major=macos or DEFAULT_MACOS)
    return probe_machine(macos_major=macos)
