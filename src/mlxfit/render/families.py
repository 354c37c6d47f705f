"""`mlxfit families` as text and JSON: every family, its cache kinds, fixture and CI check."""

from __future__ import annotations

from typing import Any

from mlxfit.render import SCHEMA_VERSION
from mlxfit.verbs.families import FamiliesResult


def families_to_json(r: FamiliesResult) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "families": [
            {"family": row.family, "model_types": list(row.model_types),
             "caches": list(row.caches), "own_cache": row.own_cache, "fixture": row.fixture,
             "fixture_synthetic": row.fixture_synthetic, "verified_in_ci": row.verified_in_ci}
            for row in r.rows
        ],
        "not_text_lm": r.not_text_lm,
        "not_supported": r.not_supported,
    }


def render_families(r: FamiliesResult, out: Any) -> None:
    from rich.table import Table  # rich is heavy: only a text report needs a table

    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("family")
    t.add_column("caches")
    t.add_column("fixture")
    t.add_column("CI", justify="center")
    for row in r.rows:
        types = [x for x in row.model_types if x != row.family]
        name = row.family + (f" [dim]({', '.join(types)})[/]" if types else "")
        fixture = (row.fixture or "-") + (" [dim](synthetic)[/]" if row.fixture_synthetic else "")
        t.add_row(name, ", ".join(row.caches), fixture, "yes" if row.verified_in_ci else "no")
    out.print(t)
    verified = sum(1 for row in r.rows if row.verified_in_ci)
    out.print(f"{len(r.rows)} families sized, {verified} checked in CI against mlx-lm's own "
              "caches")
    for name, why in r.not_supported.items():
        out.print(f"[yellow]not sized exactly:[/] {name}: {why}", soft_wrap=True)
    out.print(f"[dim]not text LMs: {', '.join(sorted(r.not_text_lm))}[/]", soft_wrap=True)
