"""The model argument as people type it: mlx-lm's `--model` spelling, a context or a Mac typed
where the model or a flag belongs, and no model at all (the built-in default, said aloud)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from typer.core import TyperCommand

from mlxfit.cli.sizes import tokens
from mlxfit.errors import MachineError, MlxfitError
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.settings import DEFAULT_MODEL


class ModelFlagCommand(TyperCommand):
    """`--model X` / `--model=X` (every mlx-lm CLI's spelling) is the positional model."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        out: list[str] = []
        it = iter(args)
        for a in it:
            if a == "--model":
                value = next(it, None)
                if value is None:
                    raise typer.BadParameter("--model needs a value (the model to size)")
                out.append(value)
            elif a.startswith("--model="):
                out.append(a.removeprefix("--model="))
            else:
                out.append(a)
        return super().parse_args(ctx, out)


def _is_context(word: str) -> bool:
    try:
        return tokens(word) > 0
    except typer.BadParameter:
        return False


def _is_machine(word: str) -> bool:
    try:
        resolve_machine(word)
    except MachineError:
        return False
    return True


def misplaced_hint(word: str) -> str | None:
    """What a stray word most likely meant: `32768` -> --ctx, `"M4 Pro 24GB"` -> --machine."""
    if _is_context(word):
        return f"did you mean --ctx {word}?"
    if _is_machine(word):
        return f"did you mean --machine {word!r}?"
    return None


def unexpected(word: str, fallback: str) -> typer.BadParameter:
    """The error for a positional word where none belongs: a hint if it reads as a flag's value."""
    return typer.BadParameter(f"unexpected argument {word!r} "
                              f"({misplaced_hint(word) or fallback})")


def model_or_default(model: str | None, verb: str) -> str:
    """The model to size. None (no model given) is the built-in default, named on stderr so it
    is never sized silently; a context or a Mac given as the model is refused with the flag."""
    if model is None:
        print(f"mlxfit: note: no model given: sizing the default, {DEFAULT_MODEL} "
              f"(mlxfit {verb} MODEL sizes another)", file=sys.stderr)
        return DEFAULT_MODEL
    if "/" not in model and not Path(model).exists():
        hint = misplaced_hint(model)
        if hint is not None:
            raise MlxfitError(f"{model!r} is not a model: {hint} (name the model first)",
                              field="model")
    return model
