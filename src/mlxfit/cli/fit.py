"""`mlxfit fit`: parse, call the twin `mlxfit.fit`, render. No arithmetic here."""

from __future__ import annotations

import typer

from mlxfit.cli.common import console, fail, wants_json
from mlxfit.cli.options import (
    BackendOpt,
    CtxOpt,
    DtypeOpt,
    ExplainOpt,
    FormatOpt,
    GenOpt,
    JsonOpt,
    KvBitsOpt,
    KvGroupSizeOpt,
    MachineOpt,
    MacosOpt,
    MaxKvSizeOpt,
    MemoryBudgetOpt,
    PlanOpt,
    PrefillStepSizeOpt,
    QBitsOpt,
    QGroupSizeOpt,
    QModeOpt,
    QuantizedKvStartOpt,
    QuantPredicateOpt,
    RevisionOpt,
    WithVisionOpt,
)
from mlxfit.cli.positional import ModelFlagCommand, model_or_default, unexpected
from mlxfit.errors import MlxfitError
from mlxfit.mlx_lm_defaults import (
    DEFAULT_KV_GROUP_SIZE,
    DEFAULT_PREFILL_STEP_SIZE,
    DEFAULT_QUANTIZED_KV_START,
)
from mlxfit.render import dumps
from mlxfit.render.fit import fit_to_json, render_fit
from mlxfit.render.text import esc
from mlxfit.settings import DEFAULT_MODEL
from mlxfit.verbs.fit import fit

app = typer.Typer(add_completion=False)  # the completion flags are the root command's


CHART_SUFFIXES = (".png", ".svg")


def _chart_path(model: str | None, extra: list[str],
                chart: bool) -> tuple[str | None, str | None]:
    """`--chart [PATH]`: Typer has no optional option values, so a PATH after --chart arrives
    as a positional argument; it is the one ending in .png/.svg. Returns (model, path)."""
    words = ([model] if model is not None else []) + list(extra)
    paths = [w for w in words if w.lower().endswith(CHART_SUFFIXES)]
    rest = [w for w in words if w not in paths]
    if (paths and not chart) or len(paths) > 1 or len(rest) > 1:
        stray = (paths + rest[1:]) if not chart else (paths[1:] + rest[1:])
        raise unexpected(stray[0], "a chart file goes after --chart and ends in .png or .svg")
    return (rest[0] if rest else None), (paths[0] if paths else None)


class _FitCommand(ModelFlagCommand):
    """`--chart=out.svg` is `--chart out.svg`: the flag takes no value of its own (Typer has no
    optional option values), so the path is split off and read as the positional word."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        split: list[str] = []
        for a in args:
            if a.startswith("--chart="):
                split += ["--chart", a.removeprefix("--chart=")]
            else:
                split.append(a)
        return super().parse_args(ctx, split)


@app.command("fit", cls=_FitCommand, context_settings={"allow_extra_args": True})
def fit_cmd(
    typer_ctx: typer.Context,
    model: str | None = typer.Argument(None, help=f"Folder, Hugging Face cache repo id, catalog id, or a Hub repo id (headers only); also --model. Default: {DEFAULT_MODEL}.", show_default=False),
    ctx: CtxOpt = 8192,
    machine: MachineOpt = None,
    memory_budget: MemoryBudgetOpt = None,
    macos: MacosOpt = None,
    revision: RevisionOpt = None,
    gen: GenOpt = 0,
    prefill_step_size: PrefillStepSizeOpt = DEFAULT_PREFILL_STEP_SIZE,
    kv_bits: KvBitsOpt = None,
    kv_group_size: KvGroupSizeOpt = DEFAULT_KV_GROUP_SIZE,
    quantized_kv_start: QuantizedKvStartOpt = DEFAULT_QUANTIZED_KV_START,
    max_kv_size: MaxKvSizeOpt = None,
    backend: BackendOpt = "metal",
    with_vision: WithVisionOpt = False,
    as_json: JsonOpt = False,
    fmt: FormatOpt = "table",
    explain: ExplainOpt = False,
    advise: bool = typer.Option(False, "--advise", help="What would make it fit, cheapest first, with the mlx-lm command (shown anyway when it does not fit)."),
    parallel: int | None = typer.Option(None, "--parallel", "--decode-concurrency", help="Concurrent sequences in mlx_lm.server's batch (KV per sequence)."),
    prompt_cache: int | None = typer.Option(None, "--prompt-cache", "--prompt-cache-size", help="Prompts mlx_lm.server keeps cached (its default is 10 when serving)."),
    draft_model: str | None = typer.Option(None, "--draft-model", help="Speculative decoding draft: its weights and KV count."),
    chart: bool = typer.Option(False, "--chart", help="Memory and tok/s against context in the terminal; --chart out.png|out.svg (or --chart=out.svg) writes a file."),
    verbose: bool = typer.Option(False, "--verbose", help="Say what reading a Hub model cost (requests, bytes)."),
    plan: PlanOpt = "auto",
    q_bits: QBitsOpt = None,
    q_group_size: QGroupSizeOpt = None,
    q_mode: QModeOpt = None,
    quant_predicate: QuantPredicateOpt = None,
    dtype: DtypeOpt = None,
    mlx_env: list[str] | None = typer.Option(None, "--mlx-env", help="MLX scheduler setting for the run, NAME=VALUE: MLX_MAX_MB_PER_BUFFER or MLX_MAX_OPS_PER_BUFFER (repeatable; default on this Mac: the environment)."),  # noqa: B008 (Typer's idiom for a list option)
) -> None:
    """Weights + KV cache + transient against usable GPU memory: FITS or DOES NOT FIT."""
    try:
        as_json = wants_json(fmt, as_json, "fit")
        given, chart_file = _chart_path(model, typer_ctx.args, chart)
        model = model_or_default(given, "fit")
    except (typer.BadParameter, MlxfitError) as e:
        fail(e, as_json)
        return
    try:
        r = fit(model, ctx, machine=machine, memory_budget_gb=memory_budget, macos=macos,
                    revision=revision, gen=gen, prefill_step_size=prefill_step_size,
                    kv_bits=kv_bits, kv_group_size=kv_group_size,
                    quantized_kv_start=quantized_kv_start, max_kv_size=max_kv_size,
                    backend=backend, with_vision=with_vision, parallel=parallel,
                    prompt_cache=prompt_cache, draft_model=draft_model,
                    advise=True if advise else "auto", chart=chart,
                    progress=not as_json, verbose=verbose, q_bits=q_bits,
                    q_group_size=q_group_size, q_mode=q_mode,
                    quant_predicate=quant_predicate, dtype=dtype, plan=plan,
                    mlx_env=mlx_env or None)
        if chart_file is not None:
            from mlxfit.render.chart import write_chart  # on demand: only with --chart

            write_chart(r.chart, chart_file)
    except MlxfitError as e:
        fail(e, as_json)
        return
    if as_json:
        print(dumps(fit_to_json(r)))
    else:
        out = console()
        render_fit(r, out, explain=explain)
        if chart and chart_file is None:
            from mlxfit.render.chart import render_terminal  # on demand: only with --chart

            out.print()
            render_terminal(r.chart, out)
        elif chart_file is not None:
            out.print(f"chart written to {esc(chart_file)}", soft_wrap=True)
    raise typer.Exit(0 if r.runs else 1)
