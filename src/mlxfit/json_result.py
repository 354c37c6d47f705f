"""A verb's result and its JSON: one place builds the JSON (a function in ``mlxfit.render``),
and the result's ``to_dict()`` is that object, equal to what ``mlxfit <verb> --json`` prints.

The result types sit below ``render/`` (``FitResult`` in the pure core), so a result names its
renderer instead of importing it: the lookup happens when a library caller asks for the dict,
the way ``cli/app.py`` loads a verb by name, and no import edge points up the layers."""

from __future__ import annotations

import importlib
import json
from typing import Any, ClassVar


class JsonResult:
    """Mixin for a frozen result dataclass: ``JSON_RENDERER`` is "module:function" of the
    render function the CLI's ``--json`` prints."""

    __slots__ = ()
    JSON_RENDERER: ClassVar[str]
    JSON_ROUNDED: ClassVar[bool] = True  # False: the verb prints its object unrounded

    def to_dict(self) -> dict[str, Any]:
        """The object ``mlxfit <verb> --json`` prints (schema_version included)."""
        module, _, name = self.JSON_RENDERER.partition(":")
        doc = getattr(importlib.import_module(module), name)(self)
        render = importlib.import_module("mlxfit.render")
        return (render.json_object if self.JSON_ROUNDED else render.plain_json_object)(doc)

    def to_json(self) -> str:
        """The text ``mlxfit <verb> --json`` prints: ``to_dict()`` indented as the CLI writes
        it, so a script may call the twin or the CLI and parse the same document."""
        return json.dumps(self.to_dict(), indent=2)
