"""`mlxfit machine` as text: the figures and where each came from."""

from __future__ import annotations

from typing import Any

from mlxfit.hardware.resolve import Machine
from mlxfit.render import SCHEMA_VERSION, machine_to_json
from mlxfit.render.text import esc


def machine_doc(m: Machine) -> dict[str, Any]:
    """`mlxfit machine --json`: the machine object every verb uses, then what only this verb
    shows (where each figure came from)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "machine": machine_to_json(m),
        "is_apple_silicon": m.is_apple_silicon,
        "unverified": m.unverified,
        "max_buffer_bytes": m.max_buffer_bytes,
        "notes": list(m.notes),
        "sources": dict(m.sources),
    }


def render_machine(m: Machine, out: Any) -> None:
    out.print(f"[bold]{esc(m.name)}[/]")
    out.print(f"  chip: {esc(m.chip or 'unknown')}  GPU cores: {m.gpu_cores or 'unknown'}")
    out.print(f"  RAM: {m.ram_bytes / 2**30:,.1f} GiB  bandwidth: "
              f"{f'{m.bandwidth_gbs:g} GB/s' if m.bandwidth_gbs else 'unknown'}")
    out.print(f"  usable GPU memory: {m.usable_bytes / 1e9:,.2f} GB ({esc(m.usable_source)})")
    for n in m.notes:
        out.print(f"  [dim]note: {esc(n)}[/]")
    if m.sources:
        out.print("  [bold]where each figure came from[/]")
        for figure, where in m.sources.items():
            out.print(f"    {esc(figure)}: {esc(where)}", soft_wrap=True)
