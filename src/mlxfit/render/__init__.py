"""Presentation only: each verb's result as Rich text and as JSON.

The JSON pieces every verb shares live here, once: the schema version, the machine object, the
run object, a term, tok/s, the float rounding and the text on stdout (docs/json.md)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: kept off every verb's start-up (cli.app imports dumps)
    from mlxfit.estimate.bands import Bands
    from mlxfit.estimate.memory import Run, Term
    from mlxfit.hardware.resolve import Machine
    from mlxfit.model.quantize import ConversionPlan

# The version of every verb's --json object (fit, matrix, pick, machine, cluster, measure,
# calibrate, models, families). Schema 2: docs/json.md, "Changes from schema 1".
SCHEMA_VERSION = 2

# Floats are rounded to this many significant digits when printed (no 49.99999999999999).
FLOAT_DIGITS = 6


def machine_to_json(m: Machine) -> dict[str, Any]:
    """The one machine object of every verb's JSON."""
    return {
        "name": m.name,
        "chip": m.chip,
        "gpu_cores": m.gpu_cores,
        "ram_bytes": m.ram_bytes,
        "bandwidth_gbs": m.bandwidth_gbs,
        "usable_bytes": m.usable_bytes,
        "usable_source": m.usable_source,
        "macos_major": m.macos_major,
    }


def run_to_json(run: Run) -> dict[str, Any]:
    """The one run object: mlx-lm's parameter names (mlx_lm.generate's flags with "_"), plus
    mlxfit's ctx, gen and backend."""
    return {
        "ctx": run.ctx,
        "gen": run.gen,
        "prefill_step_size": run.prefill_step_size,
        "kv_bits": run.kv_bits,
        "kv_group_size": run.kv_group_size,
        "quantized_kv_start": run.quantized_kv_start,
        "max_kv_size": run.max_kv_size,
        "backend": run.backend,
    }


def term_to_json(t: Term) -> dict[str, Any]:
    """A term as every "terms" list gives it: name, bytes, formula, inputs."""
    return {"name": t.name, "bytes": t.bytes, "formula": t.formula, "inputs": dict(t.inputs)}


def conversion_to_json(c: ConversionPlan | None) -> dict[str, Any] | None:
    """The one "quantization_plan" object (fit, matrix and its --quants, cluster): the conversion
    sized, or None when none is. ConversionPlan's fields are the JSON's keys, in their order."""
    return None if c is None else asdict(c)


def time_term_to_json(t: Any) -> dict[str, Any]:
    """A time term (estimate.compute.TimeTerm) as every "prefill_terms" list gives it: name,
    value (seconds), formula, inputs."""
    return rounded({"name": t.name, "value": t.seconds, "formula": t.formula,
                    "inputs": dict(t.inputs)})


def seconds_to_json(s: float | None) -> float | None:
    """Seconds (time to first token) as every verb's JSON gives them: three decimals."""
    return round(s, 3) if s is not None else None


def tps_to_json(tps: float | None) -> float | None:
    """Tokens per second as every verb's JSON gives them: two decimals (so a matrix row and
    `fit --json` on that SKU compare equal), or None where no speed is predicted."""
    return round(tps, 2) if tps is not None else None


def bands_to_json(b: Bands | None) -> dict[str, Any] | None:
    """The "bands" object (issue 27): [lo, hi] of each predicted figure, where the real mlx-lm
    figure lies 9 times in 10 (null: the figure is not predicted; the object is null without
    a band table)."""
    if b is None:
        return None

    def pair(p, fn):
        return None if p is None else [fn(p[0]), fn(p[1])]

    return {"total_bytes": list(b.total_bytes),
            "predicted_decode_tps": pair(b.predicted_decode_tps, tps_to_json),
            "predicted_prefill_tps": pair(b.predicted_prefill_tps, tps_to_json),
            "predicted_ttft_s": pair(b.predicted_ttft_s, seconds_to_json),
            "max_safe_context": list(b.max_safe_context)}


# The verdict's words in every report (estimate/bands.verdict decides it).
VERDICT_TEXT = {"fits": "FITS", "tight": "TIGHT: fits at the estimate, not at its upper bound",
                "does_not_fit": "DOES NOT FIT"}


def gb_range(p: tuple[int, int] | None) -> str:
    """A peak band as the reports print it beside the figure: "9.76-10.79 GB"."""
    return "" if p is None else f"{p[0] / 1e9:,.2f}-{p[1] / 1e9:,.2f} GB"


def rounded(x: Any) -> Any:
    """``x`` with every float rounded to FLOAT_DIGITS significant digits (ints untouched)."""
    if isinstance(x, float):
        if x == 0 or not math.isfinite(x):
            return x
        return round(x, FLOAT_DIGITS - 1 - math.floor(math.log10(abs(x))))
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v) for v in x]
    return x


def dumps(doc: dict[str, Any]) -> str:
    """A verb's JSON object as printed on stdout: floats rounded, indented."""
    return json.dumps(rounded(doc), indent=2, default=str)


def json_object(doc: dict[str, Any]) -> dict[str, Any]:
    """The object ``dumps(doc)`` prints, read back: what a result's ``to_dict()`` returns, so
    it equals ``json.loads`` of the verb's --json output (floats rounded, values JSON's)."""
    return json.loads(dumps(doc))


def plain_json_object(doc: dict[str, Any]) -> dict[str, Any]:
    """As json_object, for a verb that prints its object unrounded (`families --json`)."""
    return json.loads(json.dumps(doc, indent=2))
