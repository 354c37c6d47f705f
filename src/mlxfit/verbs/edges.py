"""The I/O every twin shares: the machine (named or probed), a wired-limit override, a draft model."""

from __future__ import annotations

from dataclasses import replace

from mlxfit.errors import UsageError
from mlxfit.model.inputs import model_arrays, model_inputs
from mlxfit.settings import DEFAULT_MACOS


def machine_for(machine: str | None, memory_budget_gb: float | None = None,
                macos: int | None = None):
    """The named Mac (``--machine``), else this one probed; ``--memory-budget`` replaces usable."""
    from mlxfit.hardware import probe as mach_probe
    from mlxfit.hardware import resolve as mach

    if machine:
        m = mach.resolve_machine(machine, macos_major=macos or DEFAULT_MACOS)
    else:
        m = mach_probe.probe_machine(macos_major=macos)
    if memory_budget_gb is not None:
        if not memory_budget_gb > 0 or memory_budget_gb > 1e6:
            raise UsageError(f"--memory-budget must be a positive number of GB, got {memory_budget_gb}")
        m = mach.machine_with_budget(m, int(memory_budget_gb * 1e9))
    return m


_machine = machine_for


def load_draft(spec: str, revision: str | None = None, with_vision: bool = False):
    """A --draft-model: resolved like the model (folder, HF cache, catalog)."""
    from mlxfit.estimate.serving import DraftModel
    from mlxfit.sources.resolve import resolve_model

    src = resolve_model(spec, revision=revision)
    inp = model_inputs(src, with_vision=with_vision)
    return DraftModel(name=spec, cfg=inp.cfg, weights_bytes=inp.weights.total_bytes,
                      arrays=model_arrays(src, with_vision))


def machine_with_wired_limit(m, wired_limit_mb: int, budget: bool = False):
    """The machine as if ``sudo sysctl iogpu.wired_limit_mb=N`` were set."""
    from mlxfit.hardware import resolve as mach

    if budget:
        raise UsageError("--memory-budget and a wired limit both set the usable memory: give one")
    if not m.is_apple_silicon:
        raise UsageError("iogpu.wired_limit_mb exists only on Apple Silicon Macs")
    usable, source = mach.usable_bytes_for(m.ram_bytes, m.macos_major, wired_limit_mb)
    return replace(m, usable_bytes=usable, usable_source=source)
