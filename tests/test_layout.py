"""The package's shape, checked from its source: layers without import circles (function-local
imports included), function-local imports only where start-up time or an optional extra asks
for one, no oversized module, and every verb's twin at ``mlxfit.<verb>`` with a real signature.

The import graph is read with ``ast`` from the files, never by importing them, so a circle that
only a rarely taken code path closes is still found."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import mlxfit

PKG = Path(mlxfit.__file__).resolve().parent
TWINS = ("fit", "matrix", "pick", "cluster", "measure", "calibrate", "machine", "serve_plan")

# Third-party packages a function may import on demand (their import costs start-up time, or
# they are optional extras), and the mlxfit modules only a rarely used feature reaches.
HEAVY_THIRD_PARTY = {"rich", "huggingface_hub", "mlx", "mlx_lm", "matplotlib", "psutil", "numpy",
                     "safetensors", "atheris", "typer", "click", "subprocess", "platform",
                     "importlib"}
# A result's to_dict() builds its verb's --json object with the renderer the CLI calls: render/
# sits above the core, so the core imports it only inside that method (a library call, not a run).
RENDERERS = {"mlxfit.render", "mlxfit.render.fit", "mlxfit.render.matrix", "mlxfit.render.pick",
             "mlxfit.render.serve_plan", "mlxfit.render.cluster", "mlxfit.render.machine",
             "mlxfit.render.models", "mlxfit.render.families", "mlxfit.render.calibrate",
             "mlxfit.render.measure"}
ON_DEMAND = {"mlxfit.verbs.advise", "mlxfit.verbs.chart", "mlxfit.render.chart",
             "mlxfit.sources.hub.fetch",
             "mlxfit.verbs.measure.oracle"}  # needs the measure extra: --plan mlx-lm only
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(path: Path, mod: str):
    """(imported module, line, is function-local) for every import statement in the file.
    Imports under ``if TYPE_CHECKING:`` never run, so they close no circle and are skipped."""
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text())
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for inner in ast.walk(sub):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        typing_only.add(inner.lineno)
    local_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    local_lines.add(sub.lineno)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in typing_only and isinstance(
                node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno, node.lineno in local_lines
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names]
            found = [s for s in subs if s in MODULES]
            for target in found or [base]:
                yield target, node.lineno, node.lineno in local_lines


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for target, _, _ in _imports(path, mod):
            if target in MODULES and target != mod:
                g[mod].add(target)
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    """The check below can fail: a planted circle is found."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_counting_function_local_imports():
    assert _cycles(_graph()) == []


def _in_to_dict(path: Path, line: int) -> bool:
    """The import sits inside a method named to_dict."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.FunctionDef) and node.name == "to_dict"
                and node.lineno <= line <= (node.end_lineno or node.lineno)):
            return True
    return False


def _has_reason(lines: list[str], line: int) -> bool:
    """A comment on the import, on another import of the same block, or just above the block."""
    k = line - 1
    while k >= 0:
        text = lines[k].strip()
        if "#" in text:
            return True
        if not (text.startswith(("import ", "from ")) or text.endswith((",", "(", ")"))):
            return False
        k -= 1
    return False


def test_function_local_imports_are_only_the_allowed_kinds():
    """A function imports on demand only a heavy or optional third-party package, or a feature
    module a plain run never reaches; each such line says why in a comment on it or above it."""
    bad = []
    for mod, path in MODULES.items():
        lines = path.read_text().splitlines()
        for target, line, local in _imports(path, mod):
            if not local:
                continue
            top = target.split(".")[0]
            allowed = ((top in HEAVY_THIRD_PARTY and top != "mlxfit") or target in ON_DEMAND
                       or (target in RENDERERS and _in_to_dict(path, line)))
            if not allowed:
                bad.append(f"{mod}:{line} imports {target}")
                continue
            if not _has_reason(lines, line):
                bad.append(f"{mod}:{line} imports {target} without a one-line reason")
    assert bad == []


def test_no_module_is_oversized():
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


def test_no_subpackage_or_module_shadows_a_twin():
    """``mlxfit.fit`` etc. resolve through the package's lazy __getattr__; a submodule of the
    same name would replace the function once imported."""
    assert [t for t in TWINS if f"mlxfit.{t}" in MODULES] == []


@pytest.mark.parametrize("name", TWINS)
def test_every_twin_has_an_explicit_signature(name):
    fn = getattr(mlxfit, name)
    assert callable(fn) and fn.__name__ == name
    kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    assert name in mlxfit.__all__ and name in dir(mlxfit)
    # The TYPE_CHECKING block names the same function the lazy look-up returns.
    src = (PKG / "__init__.py").read_text()
    assert f"import {name}" in src or f" {name}," in src or f", {name}\n" in src
    assert getattr(importlib.import_module(fn.__module__), name) is fn


def test_importing_the_package_imports_no_verb():
    """Start-up: ``import mlxfit`` loads no twin; ``mlxfit.fit`` loads fit's, not the others."""
    code = ("import sys, mlxfit; a = sorted(m for m in sys.modules if m.startswith('mlxfit.'));"
            "mlxfit.fit; b = sorted(m for m in sys.modules if m.startswith('mlxfit.verbs'));"
            "print(a); print(b)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert eval(out[0]) == ["mlxfit._version"]
    loaded = eval(out[1])
    assert "mlxfit.verbs.fit" in loaded
    assert not {"mlxfit.verbs.cluster.twin", "mlxfit.verbs.measure.twin",
                "mlxfit.verbs.calibrate.twin", "mlxfit.verbs.pick"} & set(loaded)
