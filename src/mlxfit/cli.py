"""The command line: parse, call the library twin, print. No arithmetic here."""

from __future__ import annotations

import importlib
import json
import sys
from typing import NoReturn

import typer

from mlxfit.cli_common import console, fail, print_error
from mlxfit.errors import MlxfitError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Will this model run on this Mac with MLX, at what context, how fast?",
    pretty_exceptions_enable=False,
)

DEFAULT_MODEL = "mlx-community/Qwen3-8B-4bit"


_console = console
_fail = fail


CHART_SUFFIXES = (".png", ".svg")


def _chart_path(model: str, extra: list[str], chart: bool) -> tuple[str, str | None]:
    """`--chart [PATH]`: Typer has no optional option values, so a PATH after --chart arrives
    as a positional argument; it is the one ending in .png/.svg. Returns (model, path)."""
    words = [model] + list(extra)
    paths = [w for w in words if w.lower().endswith(CHART_SUFFIXES)]
    rest = [w for w in words if w not in paths]
    if (paths and not chart) or len(paths) > 1 or len(rest) > 1:
        unexpected = (paths + rest[1:]) if not chart else (paths[1:] + rest[1:])
        raise typer.BadParameter(f"unexpected argument {unexpected[0]!r} "
                                 "(a chart file goes after --chart and ends in .png or .svg)")
    return (rest[0] if rest else DEFAULT_MODEL), (paths[0] if paths else None)


@app.command(context_settings={"allow_extra_args": True})
def fit(
    typer_ctx: typer.Context,
    model: str = typer.Argument(DEFAULT_MODEL, help="Folder, Hugging Face cache repo id, catalog id, or a Hub repo id (headers only)."),
    ctx: int = typer.Option(8192, "--ctx", help="Tokens in context at the end (prompt + generated)."),
    machine: str | None = typer.Option(None, "--machine", help='e.g. "M4 Pro 24GB"; default: this machine.'),
    memory_budget: float | None = typer.Option(None, "--memory-budget", help="Usable GB (10^9 B); replaces the machine's envelope."),
    macos: int | None = typer.Option(None, "--macos", help="macOS major version for the working-set limit (default 26)."),
    revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit (HF cache or the Hub)."),
    gen: int = typer.Option(0, "--gen", help="How many of the --ctx tokens are generated (the rest is prompt)."),
    prefill_step_size: int = typer.Option(2048, "--prefill-step-size", help="mlx-lm's prefill chunk."),
    kv_bits: int | None = typer.Option(None, "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits)."),
    kv_group_size: int = typer.Option(64, "--kv-group-size"),
    quantized_kv_start: int = typer.Option(5000, "--quantized-kv-start"),
    max_kv_size: int | None = typer.Option(None, "--max-kv-size", help="Rotating cache size (ignored by models with their own cache, as in mlx-lm)."),
    backend: str = typer.Option("metal", "--backend", help="metal (Apple GPU) or cpu (MLX's CPU backend)."),
    with_vision: bool = typer.Option(False, "--with-vision", help="Count vision/audio towers."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    explain: bool = typer.Option(False, "--explain", help="Show each term's formula and inputs."),
    advise: bool = typer.Option(False, "--advise", help="What would make it fit, cheapest first, with the mlx-lm command (shown anyway when it does not fit)."),
    parallel: int | None = typer.Option(None, "--parallel", help="Concurrent sequences in mlx_lm.server's batch (KV per sequence)."),
    prompt_cache: int | None = typer.Option(None, "--prompt-cache", help="Prompts mlx_lm.server keeps cached (its default is 10 when serving)."),
    draft_model: str | None = typer.Option(None, "--draft-model", help="Speculative decoding draft: its weights and KV count."),
    chart: bool = typer.Option(False, "--chart", help="Memory and tok/s against context in the terminal; --chart out.png|out.svg writes a file."),
    verbose: bool = typer.Option(False, "--verbose", help="Say what reading a Hub model cost (requests, bytes)."),
) -> None:
    """Weights + KV cache + transient against usable GPU memory: FITS or DOES NOT FIT."""
    from mlxfit import api
    from mlxfit.render import fit_to_json, render_fit

    try:
        model, chart_file = _chart_path(model, typer_ctx.args, chart)
    except typer.BadParameter as e:
        _fail(e)
        return
    try:
        r = api.fit(model, ctx, machine=machine, memory_budget_gb=memory_budget, macos=macos,
                    revision=revision, gen=gen, prefill_step_size=prefill_step_size,
                    kv_bits=kv_bits, kv_group_size=kv_group_size,
                    quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                    backend=backend, with_vision=with_vision, parallel=parallel,
                    prompt_cache=prompt_cache, draft_model=draft_model,
                    advise=True if advise else "auto", chart=chart,
                    progress=not as_json, verbose=verbose)
        if chart_file is not None:
            from mlxfit.chart import write_chart

            write_chart(r.chart, chart_file)
    except MlxfitError as e:
        _fail(e)
        return
    if as_json:
        print(json.dumps(fit_to_json(r), indent=2))
    else:
        out = _console()
        render_fit(r, out, explain=explain)
        if chart and chart_file is None:
            from mlxfit.chart import render_terminal

            out.print()
            render_terminal(r.chart, out)
        elif chart_file is not None:
            out.print(f"chart written to {chart_file}", soft_wrap=True)
    raise typer.Exit(0 if r.runs else 1)


@app.command()
def machine(
    spec: str | None = typer.Argument(None, help='Resolve a named SKU, e.g. "M4 Max 128GB".'),
    macos: int | None = typer.Option(None, "--macos"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """What mlxfit knows about this machine (or a named one), and where each figure came from."""
    from dataclasses import asdict

    from mlxfit import machine as mach

    try:
        m = mach.resolve_machine(spec, macos_major=macos or 26) if spec else mach.probe_machine(macos_major=macos)
    except MlxfitError as e:
        _fail(e)
        return
    if as_json:
        print(json.dumps(asdict(m), indent=2))
        return
    c = _console()
    c.print(f"[bold]{m.name}[/]")
    c.print(f"  chip: {m.chip or 'unknown'}  GPU cores: {m.gpu_cores or 'unknown'}")
    c.print(f"  RAM: {m.ram_bytes / 2**30:,.1f} GiB  bandwidth: "
            f"{f'{m.bandwidth_gbs:g} GB/s' if m.bandwidth_gbs else 'unknown'}")
    c.print(f"  usable GPU memory: {m.usable_bytes / 1e9:,.2f} GB ({m.usable_source})")
    for n in m.notes:
        c.print(f"  [dim]note: {n}[/]")
    if m.sources:
        c.print("  [bold]probed from[/]")
        for figure, where in m.sources.items():
            c.print(f"    {figure}: {where}", soft_wrap=True)


# Other verbs live in mlxfit/cli_<verb>.py, each with register(app); the list is fixed so
# start-up does not scan the package.
VERB_MODULES = ("matrix", "pick", "measure", "calibrate", "cluster")
for _verb in VERB_MODULES:
    try:
        _mod = importlib.import_module(f"mlxfit.cli_{_verb}")
    except ModuleNotFoundError as _e:
        if _e.name != f"mlxfit.cli_{_verb}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    """The console script: click's usage errors (unknown flag, non-numeric value) become the
    same single line and exit code 2 as every other bad input, not a framed usage box."""
    try:  # typer 0.28 vendors click; older releases use click itself
        from typer._click.exceptions import UsageError as ClickUsageError
    except ImportError:  # pragma: no cover
        from click.exceptions import UsageError as ClickUsageError

    def one_line(msg: str) -> NoReturn:  # outside the app: exit directly, not typer.Exit
        print_error(msg)
        sys.exit(2)

    try:
        rc = app(standalone_mode=False)
    except ClickUsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:
            print(e.ctx.get_help())  # a bare `mlxfit` asks for help
            sys.exit(0)
        verb = e.ctx.command_path.partition(" ")[2] if e.ctx is not None else ""
        one_line(f"{e.format_message()} (see mlxfit {verb + ' ' if verb else ''}--help)")
    except KeyboardInterrupt:
        sys.exit(130)
    except MlxfitError as e:  # commands catch their own; this is the last net
        one_line(str(e) or type(e).__name__)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
