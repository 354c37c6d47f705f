"""The I/O every twin shares: the machine (named or probed), a wired-limit override, a draft
model, the calibration with the user's file; and the checks of the parameters they share, made
at a twin's entry, before any of that I/O."""

from __future__ import annotations

import re
from dataclasses import replace
from importlib import metadata

from mlxfit.calibration.constants import Calibration
from mlxfit.calibration.load import load_calibration
from mlxfit.errors import UsageError
from mlxfit.estimate.compute import ChipCompute, chip_compute
from mlxfit.estimate.kernels import arch_gen
from mlxfit.estimate.memory import Run
from mlxfit.estimate.serving import DraftModel
from mlxfit.hardware.probe import probe_machine
from mlxfit.hardware.resolve import (
    Machine,
    machine_with_budget,
    resolve_machine,
    usable_bytes_for,
)
from mlxfit.model.inputs import ModelInputs, model_arrays, model_inputs
from mlxfit.settings import DEFAULT_MACOS, MACOS_MAJORS, user_calibration
from mlxfit.sources.resolve import resolve_model
from mlxfit.units import gigabytes


def check_machine_params(memory_budget_gb: float | None = None, macos: int | None = None,
                         wired_limit_mb: int | None = None) -> None:
    """The machine parameters' ranges (UsageError naming the parameter), before any probe."""
    if memory_budget_gb is not None:
        memory_budget_gb = gigabytes(memory_budget_gb)  # "16GB" as the CLI takes it
    if memory_budget_gb is not None and (
            isinstance(memory_budget_gb, bool) or not memory_budget_gb > 0
            or memory_budget_gb > 1e6):
        raise UsageError(f"memory_budget_gb must be a positive number of GB, got "
                         f"{memory_budget_gb}", param="memory_budget_gb")
    if macos is not None and (isinstance(macos, bool) or not isinstance(macos, int)
                              or macos not in MACOS_MAJORS):
        why = ("not a version number" if not isinstance(macos, int) or isinstance(macos, bool)
               else "MLX needs macOS 14 or later" if macos < 14
               else "16 to 25 do not exist (Apple went from 15 to 26)" if 15 < macos < 26
               else "not a released macOS")
        raise UsageError(f"macos must be a macOS major version MLX runs on "
                         f"({', '.join(map(str, MACOS_MAJORS))}), got {macos}: {why}",
                         param="macos")
    if wired_limit_mb is not None:
        if memory_budget_gb is not None:
            raise UsageError("memory_budget_gb and wired_limit_mb both set the usable memory: "
                             "give one", param="wired_limit_mb", also=("memory_budget_gb",))
        if isinstance(wired_limit_mb, bool) or not isinstance(wired_limit_mb, int) or (
                wired_limit_mb < 0):
            raise UsageError(f"wired_limit_mb must be >= 0, got {wired_limit_mb}",
                             param="wired_limit_mb")


def machine_for(machine: str | None, memory_budget_gb: float | None = None,
                macos: int | None = None):
    """The named Mac (``--machine``), else this one probed; ``--memory-budget`` replaces usable."""
    check_machine_params(memory_budget_gb, macos)
    if machine:
        m = resolve_machine(machine, macos_major=macos or DEFAULT_MACOS)
    else:
        m = probe_machine(macos_major=macos)
    if memory_budget_gb is not None:
        m = machine_with_budget(m, int(gigabytes(memory_budget_gb) * 1e9))
    return m


# The mlx-lm release mlxfit's rules are read from (mlx_lm_defaults, model/*: mlx-lm 0.32.2).
MODELLED_MLX_LM = (0, 32)


def mlx_lm_version_warning(installed: str | None) -> tuple[str, ...]:
    """The warning for sizing this machine with an mlx-lm older than the one mlxfit models
    (none when it is not installed, is 0.32 or newer, or its version cannot be read)."""
    if installed is None:
        return ()
    parts = re.match(r"(\d+)\.(\d+)", installed)
    if parts is None or (int(parts[1]), int(parts[2])) >= MODELLED_MLX_LM:
        return ()
    want = ".".join(map(str, MODELLED_MLX_LM))
    return ((f"mlx-lm {installed} is installed; mlxfit models mlx-lm {want}: older releases "
            "build caches, chunk prefill and serve differently (mlx_lm.server's "
            "--decode-concurrency, --prompt-concurrency and --prompt-cache-bytes, printed "
            f"here, are {want}'s), so figures and commands may not match: pip install -U "
            f"'mlx-lm>={want}'"),)


def installed_mlx_lm() -> str | None:
    """mlx-lm's installed version from its package metadata (never imported: it imports mlx)."""
    try:
        return metadata.version("mlx-lm")
    except metadata.PackageNotFoundError:
        return None


def this_machine_warnings(machine: str | None) -> tuple[str, ...]:
    """Warnings about the software on this machine, when this machine is the one sized."""
    return () if machine else mlx_lm_version_warning(installed_mlx_lm())


def calibration_for_user(calibration: Calibration | None = None) -> Calibration:
    """``calibration`` when given, else the shipped constants with the user's calibration file
    (``mlxfit calibrate --write``) on top: what every twin sizes with."""
    return calibration or load_calibration(user_calibration())


def calibration_note(cal: Calibration) -> tuple[str, ...]:
    """The report note naming a calibration other than the shipped one (none for that one)."""
    return () if cal.source == "calibration.toml" else (f"calibration: {cal.source}",)


def vision_note(inputs: ModelInputs) -> tuple[str, ...]:
    """The report note on vision/audio towers left out of the weights (mlx-lm's text path)."""
    if inputs.vision_bytes and not inputs.with_vision:
        note = (f"vision/audio towers ({inputs.vision_bytes / 1e9:.2f} GB) excluded: mlx-lm "
                "drops them for text generation (--with-vision to count them)")
        return (note,)
    if inputs.with_vision and not inputs.vision_bytes:
        where = ("this catalog descriptor holds the text model only (the repo of that name may "
                 "store one)" if inputs.source_kind == "catalog" else
                 "its safetensors hold no vision/audio tensors")
        return (f"--with-vision: no vision/audio tower to count: {where}",)
    return ()


def load_draft(spec: str, revision: str | None = None, with_vision: bool = False):
    """A --draft-model: resolved like the model (folder, HF cache, catalog)."""
    src = resolve_model(spec, revision=revision)
    inp = model_inputs(src, with_vision=with_vision)
    return DraftModel(name=spec, cfg=inp.cfg, weights_bytes=inp.weights.total_bytes,
                      arrays=model_arrays(src, with_vision))


def machine_with_wired_limit(m: Machine, wired_limit_mb: int) -> Machine:
    """The machine as if ``sudo sysctl iogpu.wired_limit_mb=N`` were set (a budget given with
    it is refused at the twin's entry, by ``check_machine_params``)."""
    if not m.is_apple_silicon:
        raise UsageError("iogpu.wired_limit_mb exists only on Apple Silicon Macs",
                         param="wired_limit_mb")
    usable, source = usable_bytes_for(m.ram_bytes, m.macos_major, wired_limit_mb)
    return replace(m, usable_bytes=usable, usable_source=source)


def run_on(run: Run, m: Machine | None) -> Run:
    """The run as it executes on this Mac's GPU: the commit rule of its class, its drain class
    and the attention kernels its architecture and macOS take. Fields the run already has are
    kept; off Metal, or without a machine, the run is unchanged. fit and measure both go
    through here, and a measurement record keeps the fields so calibrate predicts the same."""
    if m is None or run.backend != "metal":
        return run
    changes: dict = {}
    if not run.gpu_class and m.gpu_class:
        changes["gpu_class"] = m.gpu_class
    if not run.gpu_tier and m.gpu_tier:
        changes["gpu_tier"] = m.gpu_tier
    if not run.gpu_gen and m.gpu_arch:
        changes.update(gpu_gen=arch_gen(m.gpu_arch), macos_major=m.macos_major or 0)
    return replace(run, **changes) if changes else run


def compute_for(m: Machine) -> ChipCompute | None:
    """The machine's peak FLOP/s from its chip's SKU-table figures (None off Apple Silicon or
    for a chip the table does not know): the one source of prefill's compute for every verb."""
    if not m.is_apple_silicon or m.chip is None:
        return None
    return chip_compute(m.gpu_cores, dict(m.compute_figures), m.macos_major, m.chip)
