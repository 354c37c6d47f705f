"""mlx-lm's own ``Model.sanitize`` and convert, run lazily (nothing evaluated) on a checkpoint
layout a test writes down, with the lines of the family's sanitize each run executes.

A layout is ``name -> (safetensors dtype, shape)``. The oracle builds the family's model from
the config as mlx_lm.utils.load_model does, hands its sanitize lazy zeros of those shapes, and
reads back what it returned. ``load_weights(strict=True)`` then proves the layout is one
mlx_lm.convert accepts (its load is strict): a layout mlx-lm's sanitize does not turn into the
model's own parameters is a bad test input, not a finding.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

Layout = dict[str, tuple[str, tuple[int, ...]]]
Case = tuple[dict[str, Any], Layout]  # (config, checkpoint layout)
FIXTURES = Path(__file__).parent / "fixtures" / "families"


def fixture(family: str, **changes: Any) -> dict[str, Any]:
    """The family's fixture config (tests/fixtures/families), with ``changes``."""
    return {**json.loads((FIXTURES / f"{family}.json").read_text()), **changes}


def _classes(config: dict[str, Any]):
    from mlx_lm.utils import _get_classes  # heavy, optional: only the converter tests

    return _get_classes(config)


def build(config: dict[str, Any]):
    """The family's mlx-lm model (parameters lazy, never evaluated)."""
    model_cls, args_cls = _classes(config)
    return model_cls(args_cls.from_dict(config))


def _st(dtype) -> str:
    from mlxfit.model.tensors import MLX_TO_SAFETENSORS

    return MLX_TO_SAFETENSORS[str(dtype).rsplit(".", 1)[-1]]


def _mx_dtype(st: str):
    import mlx.core as mx  # heavy, optional: only the converter tests

    from mlxfit.model.tensors import MLX_TO_SAFETENSORS

    inverse = {v: k for k, v in MLX_TO_SAFETENSORS.items()}
    name = inverse[st]
    return mx.bool_ if name == "bool" else getattr(mx, name)  # mlx spells it bool_


def params(model) -> Layout:
    from mlx.utils import tree_flatten  # heavy, optional: only the converter tests

    return {k: (_st(v.dtype), tuple(v.shape)) for k, v in tree_flatten(model.parameters())}


def model_layout(config: dict[str, Any], dtype: str = "BF16") -> Layout:
    """The model's own parameters (mlx-lm's names and shapes) at ``dtype``: the starting point
    for writing a family's HF layout by undoing its sanitize."""
    return {k: (dtype, shape) for k, (_, shape) in params(build(config)).items()}


def _codes(fn: Callable) -> list[types.CodeType]:
    """The code object of ``fn`` and every code object nested in it (comprehensions,
    closures, lambdas)."""
    out, todo = [], [fn.__code__]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return out


def sanitize_fn(config: dict[str, Any]) -> Callable:
    model_cls, _ = _classes(config)
    return model_cls.sanitize


def executable_lines(config: dict[str, Any]) -> dict[int, str]:
    """line number -> source text of every executable line of the family's sanitize (the
    ``def`` line itself excluded)."""
    fn = sanitize_fn(config)
    src, first = inspect.getsourcelines(fn)
    lines: set[int] = set()
    for c in _codes(fn):
        lines.update(ln for _, _, ln in c.co_lines() if ln is not None)
    lines.discard(fn.__code__.co_firstlineno)
    return {ln: src[ln - first].strip() for ln in sorted(lines) if 0 <= ln - first < len(src)}


def mlx_sanitize(config: dict[str, Any], layout: Layout) -> tuple[Layout, set[int]]:
    """What the family's sanitize returns for ``layout`` and the lines of it that ran. Raises
    whatever mlx-lm raises (a layout its sanitize refuses)."""
    import mlx.core as mx  # heavy, optional: only the converter tests

    model = build(config)
    weights = {k: mx.zeros(shape, dtype=_mx_dtype(dt)) for k, (dt, shape) in layout.items()}
    codes = set(_codes(sanitize_fn(config)))
    ran: set[int] = set()

    def local(frame, event, arg):
        if event == "line":
            ran.add(frame.f_lineno)
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code in codes else None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = model.sanitize(weights)
    finally:
        sys.settrace(old)
    result = {k: (_st(v.dtype), tuple(v.shape)) for k, v in out.items()}
    model.load_weights(list(out.items()), strict=True)
    return result, ran


def mlx_convert(config: dict[str, Any], layout: Layout, q_bits: int | None = 4,
                q_group_size: int | None = None, q_mode: str = "affine") -> Layout:
    """mlx_lm.convert's steps after loading, lazily: sanitize, strict load, the dtype cast to
    the config's torch_dtype (convert's rule, with the family's cast_predicate), then
    quantize_model. name -> (dtype, shape) of what convert would write."""
    import mlx.core as mx  # heavy, optional: only the converter tests
    from mlx.utils import tree_map_with_path  # heavy, optional: as above
    from mlx_lm.utils import quantize_model  # heavy, optional: as above

    model = build(config)
    weights = {k: mx.zeros(shape, dtype=_mx_dtype(dt)) for k, (dt, shape) in layout.items()}
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    dtype = config.get("torch_dtype") or (config.get("text_config") or {}).get("dtype")
    if dtype in ("float16", "bfloat16", "float32"):
        cast = getattr(model, "cast_predicate", lambda _: True)
        target = getattr(mx, dtype)
        model.update(tree_map_with_path(
            lambda k, v: v.astype(target) if cast(k) and mx.issubdtype(v.dtype, mx.floating)
            else v, model.parameters()))
    with contextlib.redirect_stdout(io.StringIO()):
        model, _ = quantize_model(model, dict(config), q_group_size, q_bits, mode=q_mode)
    return params(model)


# ------------------------------------------------------------------ writing HF layouts
# Small helpers for undoing a sanitize; each family's cases say which it uses.

def unstack(layout: Layout, pattern: str, name: Callable[[re.Match, int], str]) -> Layout:
    """Every (E, ...) tensor whose name matches ``pattern`` written as E per-expert tensors
    ``name(match, e)``, in place."""
    out: Layout = {}
    for k, (dt, shape) in layout.items():
        m = re.fullmatch(pattern, k)
        if m is None:
            out[k] = (dt, shape)
            continue
        for e in range(shape[0]):
            out[name(m, e)] = (dt, shape[1:])
    return out


def rename(layout: Layout, fn: Callable[[str], str]) -> Layout:
    return {fn(k): v for k, v in layout.items()}


def with_extra(layout: Layout, extra: Layout) -> Layout:
    """``layout`` plus tensors mlx-lm's sanitize drops (rotary buffers, towers, MTP layers)."""
    return {**layout, **extra}
