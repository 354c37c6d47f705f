"""mlxfit: will this model run on this Mac with MLX, at what context, how fast?

Every CLI verb has a Python twin returning a frozen result. ``mlxfit.fit(model, ctx, ...)`` is
here; all of them (fit, matrix, pick, cluster, measure, calibrate) are in ``mlxfit.api``. A
verb's module shares its name (``mlxfit.matrix``), so only ``fit`` is re-exported at the top:
importing the submodule would otherwise shadow a same-named function. Imports are lazy
(start-up time matters).
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
}


def __getattr__(name: str) -> Any:
    if name in _TWINS:
        return getattr(importlib.import_module(_TWINS[name]), name)
    raise AttributeError(f"module 'mlxfit' has no attribute {name!r}")
