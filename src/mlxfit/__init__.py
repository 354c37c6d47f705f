"""mlxfit: will this model run on this Mac with MLX, at what context, how fast?

Every CLI verb has a Python twin returning a frozen result: ``mlxfit.fit(model, ctx, ...)``,
``mlxfit.matrix(...)``, ``mlxfit.pick(...)``. They are imported lazily (start-up time matters).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_TWINS = {
    "fit": "mlxfit.api",
    "weights_summary": "mlxfit.api",
    "resolve_machine": "mlxfit.machine",
    "probe_machine": "mlxfit.machine",
    "matrix": "mlxfit.matrix",
    "pick": "mlxfit.pick",
    "measure": "mlxfit.measure",
    "calibrate": "mlxfit.calibrate",
    "cluster": "mlxfit.cluster",
}


def __getattr__(name: str) -> Any:
    if name in _TWINS:
        return getattr(importlib.import_module(_TWINS[name]), name)
    raise AttributeError(f"module 'mlxfit' has no attribute {name!r}")
