"""mlxfit: will this model run on this Mac with MLX, at what context, how fast?

Every CLI verb has a Python twin returning a frozen result, importable from here:
``mlxfit.fit``, ``mlxfit.matrix``, ``mlxfit.pick``, ``mlxfit.cluster``, ``mlxfit.measure``,
``mlxfit.calibrate``, ``mlxfit.machine`` and ``mlxfit.serve_plan``. They are imported on first use (start-up time
matters); the ``TYPE_CHECKING`` block gives type checkers and editors their real signatures.
No subpackage carries a twin's name, so none can shadow it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mlxfit._version import __version__

if TYPE_CHECKING:
    from mlxfit.hardware.probe import probe_machine
    from mlxfit.hardware.resolve import resolve_machine
    from mlxfit.verbs.calibrate.twin import calibrate
    from mlxfit.verbs.cluster.twin import cluster
    from mlxfit.verbs.fit import fit, weights_summary
    from mlxfit.verbs.machine import machine
    from mlxfit.verbs.matrix import matrix
    from mlxfit.verbs.measure.twin import measure
    from mlxfit.verbs.pick import pick
    from mlxfit.verbs.serve_plan import serve_plan

# public name -> module that defines it
_PUBLIC = {
    "fit": "mlxfit.verbs.fit",
    "matrix": "mlxfit.verbs.matrix",
    "pick": "mlxfit.verbs.pick",
    "cluster": "mlxfit.verbs.cluster.twin",
    "measure": "mlxfit.verbs.measure.twin",
    "calibrate": "mlxfit.verbs.calibrate.twin",
    "machine": "mlxfit.verbs.machine",
    "serve_plan": "mlxfit.verbs.serve_plan",
    "weights_summary": "mlxfit.verbs.fit",
    "resolve_machine": "mlxfit.hardware.resolve",
    "probe_machine": "mlxfit.hardware.probe",
}

__all__ = [
    "__version__", "calibrate", "cluster", "fit", "machine", "matrix", "measure", "pick",
    "probe_machine", "resolve_machine", "serve_plan", "weights_summary",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value
    raise AttributeError(f"module 'mlxfit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
