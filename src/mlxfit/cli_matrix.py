"""`mlxfit matrix`: parse, call `mlxfit.matrix.matrix`, print. No arithmetic here."""

from __future__ import annotations

import json
from typing import Any

import typer

from mlxfit.cli_common import console, fail
from mlxfit.errors import MlxfitError


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f}"


def render_matrix(m: Any, out: Any) -> None:
    from rich.table import Table

    flt = f", chips {m.chips_filter!r}" if m.chips_filter else ""
    out.print(f"[bold]{m.model}[/] at {m.context_tokens:,} tokens on Apple Silicon "
              f"(macOS {m.macos_major} working set{flt}): "
              f"[bold]{m.n_fit} of {m.skus_considered}[/] SKUs run it")
    if not m.rows:
        out.print("no SKU fits at this context" if m.only_fits else "no SKU to show")
    else:
        mark = any(r.this_machine for r in m.rows)
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        t.add_column("SKU", no_wrap=True)
        t.add_column("RAM", justify="right", no_wrap=True)
        t.add_column("GB/s", justify="right", no_wrap=True)
        t.add_column("usable", justify="right", no_wrap=True)
        t.add_column("fits", no_wrap=True)
        t.add_column("max ctx", justify="right", no_wrap=True)
        t.add_column("tok/s", justify="right", no_wrap=True)
        t.add_column("headroom", justify="right", no_wrap=True)
        if mark:
            t.add_column("", no_wrap=True)
        for i, r in enumerate(m.rows):
            if i == 0 or m.rows[i - 1].family != r.family:
                t.add_row(f"[bold cyan]{r.family}[/]")
            cores = f"  {r.chip} {r.gpu_cores}-core"
            cells = [
                f"[bold]{cores}[/]" if r.this_machine else cores,
                f"{r.ram_gb}GB",
                f"{r.bandwidth_gbs:g}" + ("*" if r.unverified else ""),
                _gb(r.usable_bytes),
                "[green]yes[/]" if r.runs else "[yellow]buffer[/]" if r.fits else "[red]no[/]",
                f"{r.max_safe_context:,}",
                f"{r.predicted_decode_tps:,.1f}"
                if r.runs and r.predicted_decode_tps is not None else "",
                _gb(r.headroom_bytes),
            ]
            if mark:
                cells.append("[bold]<- this Mac[/]" if r.this_machine else "")
            t.add_row(*cells)
        out.print(t)
    if m.rows:
        out.print(f"[dim]GB = 10^9 B; peak {_gb(m.rows[0].total_bytes)} GB at "
                  f"{m.context_tokens:,} tokens (weights {_gb(m.weights_bytes)} GB) on every SKU; "
                  f"model limit {m.context_limit:,} tokens; tok/s blank where it does not fit[/]")
    if any(r.unverified for r in m.rows):
        out.print("[dim]* rests on a weak source in apple_skus.toml[/]")
    if any(r.fits and not r.runs for r in m.rows):
        out.print("[dim]buffer: the total fits, but one array exceeds the GPU's largest buffer "
                  "(maxBufferLength): Metal cannot allocate it[/]")
    for w in m.warnings:
        out.print(f"[yellow]warning:[/] {w}")
    for n in m.notes:
        out.print(f"[dim]note: {n}[/]")


def register(app: typer.Typer) -> None:
    @app.command("matrix")
    def matrix_cmd(
        model: str = typer.Argument(..., help="Folder, Hugging Face cache repo id, or catalog id."),
        ctx: int = typer.Option(8192, "--ctx", help="Tokens in context at the end (prompt + generated)."),
        only_fits: bool = typer.Option(False, "--only-fits", help="Show only the SKUs where it fits."),
        chips: str | None = typer.Option(None, "--chips", help='Shell patterns, comma-separated: "M4*", "M3 Max,M2 Ultra".'),
        macos: int | None = typer.Option(None, "--macos", help="macOS major version for the working-set limit (default 26)."),
        revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit in the HF cache."),
        gen: int = typer.Option(0, "--gen", help="How many of the --ctx tokens are generated (the rest is prompt)."),
        prefill_step_size: int = typer.Option(2048, "--prefill-step-size", help="mlx-lm's prefill chunk."),
        kv_bits: int | None = typer.Option(None, "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits)."),
        kv_group_size: int = typer.Option(64, "--kv-group-size"),
        quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start"),
        max_kv_size: int | None = typer.Option(None, "--max-kv-size", help="Rotating cache size."),
        backend: str = typer.Option("metal", "--backend", help="metal (Apple GPU) or cpu (MLX's CPU backend)."),
        with_vision: bool = typer.Option(False, "--with-vision", help="Count vision/audio towers."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    ) -> None:
        """MODEL on every Apple Silicon SKU: fits, max safe context, decode tok/s, headroom."""
        from mlxfit.matrix import matrix, matrix_to_json

        try:
            m = matrix(model, ctx, chips=chips, only_fits=only_fits, macos=macos,
                       revision=revision, gen=gen, prefill_step_size=prefill_step_size,
                       kv_bits=kv_bits, kv_group_size=kv_group_size,
                       quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                       backend=backend, with_vision=with_vision)
        except MlxfitError as e:
            fail(e)
        if as_json:
            print(json.dumps(matrix_to_json(m), indent=2))
        else:
            render_matrix(m, console())
        raise typer.Exit(0 if m.n_fit else 1)
