"""A table as Markdown (to paste into a model card) or CSV (for a spreadsheet): the one writer
of `--format markdown|csv` for every verb that has it. Cells are plain text, escaped here
(``render.text``): controls and bidi overrides shown, a CSV cell that would be a formula
neutralised."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from mlxfit.render.text import controls, csv_cell

FORMATS = ("table", "markdown", "csv", "json")


def markdown(headers: Sequence[str], rows: Sequence[Sequence[str]],
             right: Sequence[bool] = ()) -> str:
    """A GitHub-flavoured Markdown table; ``right`` marks the right-aligned (number) columns.
    A "|" in a cell is escaped so it cannot open a column."""
    def cell(x: str) -> str:
        return controls(str(x).replace("\n", " ")).replace("\\", "\\\\").replace("|", "\\|")

    align = [("---:" if (right[i] if i < len(right) else False) else "---")
             for i in range(len(headers))]
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def csv_text(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_cell(h) for h in headers])
    w.writerows([csv_cell(c) for c in r] for r in rows)
    return buf.getvalue()
