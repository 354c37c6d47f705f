"""atheris fuzz target: every text report with fuzzer-chosen strings where model-controlled
text goes (model and machine names, reasons, warnings, notes, skipped repo ids, advice).

    python fuzz/fuzz_render.py [libFuzzer flags] CORPUS_DIR      (see fuzz/README.md)

A real fit (with advice), matrix and pick of a catalog model are computed once; each input
replaces their string fields with random unicode spliced with Rich markup and terminal escapes
and renders fit (with --explain), advice, matrix and pick into a Rich console, then builds the
error line. Contract: no exception, and no C0/C1 control character in any output but the line
breaks Rich lays out (a raw ESC would command the user's terminal).
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import sys
import tempfile
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="mlxfit-fuzz-render-")  # no real cache
os.environ.setdefault("HF_HUB_OFFLINE", "1")

with atheris.instrument_imports(include=["mlxfit"]):
    from rich.console import Console

    import mlxfit
    from mlxfit.cli.common import error_text
    from mlxfit.render.fit import render_fit
    from mlxfit.render.matrix import render_matrix
    from mlxfit.render.pick import render_pick
    from mlxfit.render.text import controls
    from mlxfit.sources.redact import redact_text

MODEL, MACHINE = "mlx-community/Qwen3-0.6B-4bit", "M4 Pro 24GB"
_FIT = mlxfit.fit(MODEL, 100_000, machine=MACHINE, advise=True)
_MATRIX = mlxfit.matrix(MODEL, 8192, probe=False)
_PICK = mlxfit.pick(8192, machine=MACHINE, catalog=True)
_BAD = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_PIECES = ["[/]", "[bold]", "[blink]", "[link=x]", "\\", "[", "]", ":fire:", "\x1b]0;t\x07",
           "\x1b[2J", "\x9b", "\x85", "\x00", "\r", "\n", "\t", "[/bold]", "[@click]", "\u202e"]


def _text(fdp: atheris.FuzzedDataProvider) -> str:
    out = []
    for _ in range(fdp.ConsumeIntInRange(1, 6)):
        out.append(fdp.PickValueInList(_PIECES) if fdp.ConsumeBool()
                   else fdp.ConsumeUnicodeNoSurrogates(10))
    return "".join(out)


def _render(fn, result, **kw) -> str:
    buf = io.StringIO()
    fn(result, Console(file=buf, width=100, highlight=False, emoji=False), **kw)
    return buf.getvalue()


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    t = [_text(fdp) for _ in range(6)]
    fit = dataclasses.replace(_FIT, model=t[0], machine_name=t[1], usable_source=t[2],
                              peak_phase=t[3], warnings=(t[4],), notes=(t[5],))
    adv = fit.advice
    if adv is not None:
        fit = dataclasses.replace(fit, advice=dataclasses.replace(
            adv, problem=t[2], notes=(t[3],)))
    mx = dataclasses.replace(_MATRIX, model=t[0], warnings=(t[1],), notes=(t[2],),
                             rows=_MATRIX.rows[:3])  # a few rows: a table costs ~ms a row
    cands = tuple(dataclasses.replace(c, model=t[3], reason=t[4], warnings=(t[5],))
                  for c in _PICK.candidates)
    pk = dataclasses.replace(_PICK, reason=t[0], machine_name=t[1], default_model=t[2],
                             candidates=cands, notes=(t[5],), warnings=(t[4],),
                             catalog=tuple(dataclasses.replace(c, model=t[1])
                                           for c in (_PICK.catalog or ())[:3]))
    outs = [_render(render_fit, fit, explain=True), _render(render_matrix, mx),
            _render(render_pick, pk), controls(redact_text(error_text(ValueError(t[0]))))]
    for out in outs:
        bad = _BAD.search(out)
        assert bad is None, f"control character {bad.group()!r} in output: {out[:400]!r}"


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
