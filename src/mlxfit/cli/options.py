"""The CLI flags two or more verbs share, declared once: one ``typing.Annotated`` alias per
flag, with one help text true for every verb that takes it. A verb puts its default in its own
signature (``ctx: CtxOpt = 8192``), taken from the twin's default where the twin has one
(tests/test_cli_conventions.py checks both). Where a verb's flag means something else, it has
its own alias here, with a comment saying why."""

from __future__ import annotations

from typing import Annotated

import typer

from mlxfit.cli.sizes import gigabytes, tokens

# -- the run being sized (mlx-lm's flags) -----------------------------------------------------
CtxOpt = Annotated[int, typer.Option(
    "--ctx", parser=tokens, metavar="TOKENS",
    help="Tokens in context at the end (prompt + generated).")]
# serve-plan's --ctx is each request's own context, not one generation's (default 32768).
ServeCtxOpt = Annotated[int, typer.Option(
    "--ctx", parser=tokens, metavar="TOKENS",
    help="Tokens each request may reach (prompt + generated).")]
GenOpt = Annotated[int, typer.Option(
    "--gen", "--max-tokens", parser=tokens, metavar="TOKENS",
    help="How many of the --ctx tokens are generated (the rest is prompt); --max-tokens is "
         "mlx-lm's name for it.")]
# measure really generates them and times decode over them: at least 1 (default 16).
MeasureGenOpt = Annotated[int, typer.Option(
    "--gen", "--max-tokens", parser=tokens, metavar="TOKENS",
    help="Tokens generated (>= 1); decode tok/s is over them.")]
PrefillStepSizeOpt = Annotated[int, typer.Option(
    "--prefill-step-size", parser=tokens, metavar="TOKENS",
    help="mlx-lm's prefill chunk (mlx_lm.generate and mlx_lm.server --prefill-step-size).")]
KvBitsOpt = Annotated[int | None, typer.Option(
    "--kv-bits", help="Quantize the KV cache (mlx-lm --kv-bits).")]
KvGroupSizeOpt = Annotated[int, typer.Option(
    "--kv-group-size",
    help="Group size of the quantized KV cache (mlx-lm --kv-group-size: 32, 64 or 128).")]
QuantizedKvStartOpt = Annotated[int, typer.Option(
    "--quantized-kv-start", parser=tokens, metavar="TOKENS",
    help="Tokens before the KV cache is quantized (mlx-lm --quantized-kv-start).")]
MaxKvSizeOpt = Annotated[int | None, typer.Option(
    "--max-kv-size", parser=tokens, metavar="TOKENS",
    help="Rotating cache size (mlx-lm --max-kv-size; models with their own cache ignore it).")]
BackendOpt = Annotated[str, typer.Option(
    "--backend", help="metal (Apple GPU) or cpu (MLX's CPU backend).")]
# calibrate's --backend filters the saved records (repeatable); it sizes no run.
CalibrateBackendOpt = Annotated[list[str] | None, typer.Option(
    "--backend", help="Fit only this backend (cpu, metal); repeatable.")]

# -- the machine ------------------------------------------------------------------------------
MachineOpt = Annotated[str | None, typer.Option(
    "--machine", help='e.g. "M4 Pro 24GB"; default: this machine.')]
# measure runs on this Mac: the name only stands in when it cannot be probed.
MeasureMachineOpt = Annotated[str | None, typer.Option(
    "--machine", help="This Mac's name if it cannot be probed (for the predicted tok/s).")]
MemoryBudgetOpt = Annotated[float | None, typer.Option(
    "--memory-budget", parser=gigabytes, metavar="SIZE",
    help="Usable GB (10^9 B); replaces the machine's envelope.")]
MacosOpt = Annotated[int | None, typer.Option(
    "--macos", help="macOS major version for the working-set limit (default: this Mac's; 26 "
                    "for a named machine).")]

# -- the model --------------------------------------------------------------------------------
RevisionOpt = Annotated[str | None, typer.Option(
    "--revision", help="Branch, tag or commit (a unique prefix of a cached snapshot's too), in "
                       "the HF cache or on the Hub.")]
WithVisionOpt = Annotated[bool, typer.Option("--with-vision", help="Count vision/audio towers.")]
PlanOpt = Annotated[str, typer.Option(
    "--plan", help="Cache plan: auto (the family table, else mlx-lm's own classes when "
                   "installed), table, or mlx-lm (cross-checks a known family).")]

# -- sizing an unquantized model as mlx_lm.convert would write it ------------------------------
QBitsOpt = Annotated[int | None, typer.Option(
    "--q-bits", help="Size an unquantized model as `mlx_lm.convert -q --q-bits B` would write it "
                     "(default: --q-mode's, 4 for affine; pick: its --catalog entries).")]
QGroupSizeOpt = Annotated[int | None, typer.Option(
    "--q-group-size", help="mlx_lm.convert's group size (affine default 64).")]
QModeOpt = Annotated[str | None, typer.Option(
    "--q-mode", help="affine, mxfp4, nvfp4 or mxfp8 (mlx_lm.convert --q-mode).")]
QuantPredicateOpt = Annotated[str | None, typer.Option(
    "--quant-predicate",
    help="mixed_2_6, mixed_3_4, mixed_3_6 or mixed_4_6 (mlx_lm.convert's recipes).")]
DtypeOpt = Annotated[str | None, typer.Option(
    "--dtype", help="float16, bfloat16 or float32 (mlx_lm.convert --dtype).")]
# measure's --dtype is the random weights' own dtype, not a conversion's.
MeasureDtypeOpt = Annotated[str | None, typer.Option(
    "--dtype", help="With --random-weights: float32, bfloat16 or float16 (default: the "
                    "checkpoint's).")]
QuantsOpt = Annotated[str | None, typer.Option(
    "--quants", help="Also size each unquantized model as mlx_lm.convert would write it, one "
                     'per comma-separated conversion, e.g. "3,4,6,8,mixed_3_6,mxfp4" (matrix: a '
                     "column set each; pick: with --catalog).")]

# -- output -----------------------------------------------------------------------------------
JsonOpt = Annotated[bool, typer.Option(
    "--json", help="One JSON object on stdout (= --format json where a verb has --format).")]
FormatOpt = Annotated[str, typer.Option(
    "--format", help="table, markdown (for a model card), csv or json (= --json); fit, "
                     "serve-plan and cluster print one result: table or json.")]
ExplainOpt = Annotated[bool, typer.Option(
    "--explain", help="Show each term's formula and inputs (cluster: every host's).")]
OnlyFitsOpt = Annotated[bool, typer.Option(
    "--only-fits", help="Show only the rows where it fits (matrix: the SKUs; pick, with "
                        "--catalog: the catalog models that run here).")]
# cluster's --force writes launch files for a plan that does not fit; measure's runs mlx-lm
# past the predicted memory: two different overrides.
ClusterForceOpt = Annotated[bool, typer.Option(
    "--force", help="With --write: write the launch files even when the plan does not fit.")]
MeasureForceOpt = Annotated[bool, typer.Option(
    "--force", help="Run even when the predicted peak exceeds this machine's memory.")]
# cluster's --write is a folder for launch files; calibrate's a switch storing the constants.
ClusterWriteOpt = Annotated[str | None, typer.Option(
    "--write", help="Write hostfile.json, run.sh and plan.json for mlx.launch here (only for a "
                    "plan that fits, unless --force).")]
CalibrateWriteOpt = Annotated[bool, typer.Option(
    "--write", help="Store the fitted constants in ~/.config/mlxfit/calibration.toml.")]
