"""Fit mlxfit's calibration constants to measured runs (``mlxfit measure --save`` records).

Memory, per backend: the peak a record measured is compared with the peak mlxfit predicts for
the same run from the record's own config, with the measured weights (the weights are exact
anyway; what is fitted is the transient). The constants that shape the transient (activation
multipliers, score arrays, act_kv, bf16_act_bytes, the SSM and linear-attention terms) are
fitted by damped least squares (Levenberg-Marquardt, finite-difference Jacobian, constants kept
>= 0) on the relative error of the peak. A constant no record exercises keeps its value; a
small pull towards the current value keeps weakly determined constants near it.

Decode speed (Metal records that measured tok/s on a known bandwidth): seconds per token =
bytes_read / (eta x bandwidth) + fixed_s + per-layer costs is linear in 1/eta and fixed_s,
which are fitted by least squares on the relative error of the seconds per token (the per-layer
costs are kept). The calibration file has one [decode] table: records of several chips are
fitted together.

Pure Python (no numpy): the systems are at most 13 x 13.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from mlxfit.calibration.constants import Calibration
from mlxfit.calibration.load import check_user_calibration, load_calibration
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.estimate.compute import decode_matmul_flops
from mlxfit.estimate.speed import predicted_decode_seconds
from mlxfit.hardware.resolve import resolve_machine
from mlxfit.json_result import JsonResult
from mlxfit.localfile import read_regular, why
from mlxfit.records import (
    NoMeasurements,
    Sample,
    decode_rows,
    load_records,
    merge_repeats,
    results_path,
)
from mlxfit.settings import MAX_JSON_BYTES, parse_toml, user_calibration
from mlxfit.verbs.calibrate.fitting import (
    jacobian_columns,
    least_squares,
    numeric_rank,
    predict_peak,
    predicted_caches,
    relative_residuals,
    with_backend,
)
from mlxfit.verbs.calibrate.toml_edit import EditRefused, edit_toml
from mlxfit.verbs.edges import compute_for
from mlxfit.writefile import write_file

# The constants a memory fit may move, in the order they are shown.
# Those a calibration file lacks (an older mlxfit) are skipped.
FIT_PARAMS: tuple[str, ...] = (
    "act_hidden", "act_ffn", "act_q", "act_moe", "act_kv", "act_linear", "act_floor",
    "act_floor_small", "act_floor_m5",
    "score_arrays", "sink_score_arrays", "softcap_score_arrays", "quantized_score_arrays",
    "mla_score_arrays", "mla_kv_arrays", "bf16_act_bytes", "ssd_square", "ssd_token",
    "linear_fallback",
)
DECODE_PARAMS: tuple[str, ...] = ("eta", "fixed_s")


# --------------------------------------------------------------------------- records


# --------------------------------------------------------------------------- prediction


# --------------------------------------------------------------------------- least squares


def fittable(cal: Calibration, backend: str, params: tuple[str, ...] = FIT_PARAMS
             ) -> tuple[str, ...]:
    """The requested constants this calibration's backend has."""
    have = set(cal.backend(backend).__dataclass_fields__)
    return tuple(k for k in params if k in have)


def undetermined(samples: list[Sample], cal: Calibration, backend: str,
                 start: dict[str, float]) -> str:
    """Why these records cannot fit these constants, or "": with fewer independent records than
    constants they inform, the fit is exact whatever the constants, and a perfect score says
    nothing. The reason lists which constants each record informs."""
    cols = jacobian_columns(lambda v: relative_residuals(samples, cal, backend, v), start)
    informed = [k for k in start if any(abs(x) > 1e-12 for x in cols[k])]
    rank = numeric_rank([cols[k] for k in informed])
    if len(informed) <= rank:
        return ""
    per = "; ".join(f"{s.name}: {', '.join(k for k in informed if abs(cols[k][i]) > 1e-12)}"
                    for i, s in enumerate(samples[:6]))
    more = f"; ... {len(samples) - 6} more" if len(samples) > 6 else ""
    verb = "determines" if len(samples) == 1 else "determine"
    return (
        f"{len(samples):,} distinct run{'' if len(samples) == 1 else 's'} {verb} {rank} of the "
        f"{len(informed)} "
        f"constants {'it informs' if len(samples) == 1 else 'they inform'} "
        f"({', '.join(informed)}): "
        "fitting "
        f"them all would score 0 % whatever they are; measure more runs (other contexts, "
        f"prefill steps, models) or fit fewer (--param). Each run informs: {per}{more}")


def fit_memory(samples: list[Sample], cal: Calibration, backend: str,
               params: tuple[str, ...] = FIT_PARAMS, max_iter: int = 60
               ) -> tuple[dict[str, float], tuple[str, ...], tuple[str, ...]]:
    """Least-squares constants of ``backend`` for these samples.

    Returns (new values of every parameter in ``params``, the ones fitted, the ones no sample
    exercises, which keep their value)."""
    be = cal.backend(backend)
    params = fittable(cal, backend, params)
    start = {k: float(getattr(be, k)) for k in params}
    vals, active = least_squares(lambda v: relative_residuals(samples, cal, backend, v), start,
                                 max_iter=max_iter)
    return vals, active, tuple(k for k in params if k not in active)


def _matmul_flops(machine_name: str) -> float | None:
    """The record's machine's matmul peak (decode's unfused attention FLOPs), as fit uses it;
    None for a machine the SKU table cannot name."""
    try:
        return decode_matmul_flops(compute_for(resolve_machine(machine_name)))
    except MlxfitError:
        return None


def fit_decode(records: list[dict], cal: Calibration) -> DecodeFit | None:
    """eta and fixed_s from Metal records with a measured decode speed (least squares on the
    relative error of the seconds per token; the other decode constants are kept); None
    without any such record."""
    rows = decode_rows(records)
    if not rows:
        return None

    flops = {r[6]: _matmul_flops(r[6]) for r in rows}

    def seconds(d, row) -> float:
        _, cfg, run, w, bw, _, machine_name = row
        return predicted_decode_seconds(cfg, run, w, bw, cal, machine_name, decode=d,
                                        matmul_flops=flops[machine_name])[0]

    def residuals(v: dict[str, float]) -> list[float]:
        d = replace(cal.decode, **v)
        return [(seconds(d, r) - r[5]) / r[5] for r in rows]

    start = {k: float(getattr(cal.decode, k)) for k in DECODE_PARAMS}
    # With one speed, or one model on one machine, eta and fixed_s cannot be told apart.
    distinct = len({(r[1].num_layers, r[3].total_bytes, r[4]) for r in rows}) >= 2
    if not distinct:
        start = {"eta": start["eta"]}
    new, fitted = least_squares(residuals, start, lower={"eta": 0.05})
    new = {**{k: float(getattr(cal.decode, k)) for k in DECODE_PARAMS}, **new}
    d_new = replace(cal.decode, **{k: new[k] for k in fitted})
    out = tuple(DecodeRow(r[0], 1 / r[5], 1 / seconds(cal.decode, r), 1 / seconds(d_new, r))
                for r in rows)
    return DecodeFit(n_records=len(rows),
                     old={k: float(getattr(cal.decode, k)) for k in DECODE_PARAMS},
                     new=new, fitted=fitted, rows=out)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Row:
    """One record: measured peak, predicted with the old and the new constants."""

    name: str
    backend: str
    measured: int
    old: int
    new: int
    kv_exact: bool
    repeats: int = 1

    @property
    def old_error(self) -> float:
        return (self.old - self.measured) / self.measured

    @property
    def new_error(self) -> float:
        return (self.new - self.measured) / self.measured


@dataclass(frozen=True)
class ErrorStats:
    n: int
    median: float  # of |relative error|
    p90: float
    max: float

    @staticmethod
    def of(errors: list[float]) -> ErrorStats:
        a = sorted(abs(e) for e in errors)
        if not a:
            return ErrorStats(0, math.nan, math.nan, math.nan)
        return ErrorStats(len(a), statistics.median(a), a[int(0.9 * (len(a) - 1))], a[-1])


@dataclass(frozen=True)
class BackendFit:
    backend: str
    n_records: int
    old: dict[str, float]
    new: dict[str, float]
    fitted: tuple[str, ...]
    unused: tuple[str, ...]  # no record exercises them: kept
    old_stats: ErrorStats
    new_stats: ErrorStats
    kv_mismatches: int  # records whose caches mlxfit does not predict to the byte
    n_runs: int = 0  # measured runs (n_records counts identical runs once)
    # Why nothing was fitted: the records determine fewer constants than they inform.
    refused: str = ""


@dataclass(frozen=True)
class DecodeRow:
    name: str
    measured_tps: float
    old_tps: float
    new_tps: float


@dataclass(frozen=True)
class DecodeFit:
    n_records: int
    old: dict[str, float]
    new: dict[str, float]
    fitted: tuple[str, ...]
    rows: tuple[DecodeRow, ...]

    def stats(self, which: str) -> ErrorStats:
        return ErrorStats.of([(getattr(r, f"{which}_tps") - r.measured_tps) / r.measured_tps
                              for r in self.rows])


@dataclass(frozen=True)
class CalibrationResult(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.calibrate:result_to_json"
    source: str  # the measurements file
    calibration: str  # what the old figures came from
    backends: tuple[BackendFit, ...]
    decode: DecodeFit | None
    rows: tuple[Row, ...]
    skipped: tuple[tuple[str, str], ...]
    toml: str  # the user calibration file this fit would write
    written_to: str | None = None

    def backend(self, name: str) -> BackendFit:
        for b in self.backends:
            if b.backend == name:
                return b
        raise KeyError(name)

    def calibration_after(self, base: Calibration) -> Calibration:
        """``base`` with the fitted constants."""
        cal = base
        for b in self.backends:
            cal = with_backend(cal, b.backend, {k: b.new[k] for k in b.fitted})
        if self.decode is not None and self.decode.fitted:
            cal = replace(cal, decode=replace(cal.decode, **{k: self.decode.new[k]
                                                             for k in self.decode.fitted}))
        return cal


# --------------------------------------------------------------------------- the user file


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v == 0:
            return "0.0"
        r = float(f"{v:.6g}")
        s = repr(r)
        return s if ("." in s or "e" in s) else s + ".0"
    return json.dumps(str(v))


def render_toml(doc: dict[str, Any], comments: dict[tuple[str, ...], str],
                header: str) -> str:
    """A calibration TOML: [backend.<name>] tables then [decode], each key with its comment."""
    out = [f"# {line}" if line else "#" for line in header.splitlines()]

    def table(path: tuple[str, ...], tbl: dict[str, Any]) -> None:
        out.append("")
        if comments.get(path):
            out.extend(f"# {line}" for line in comments[path].splitlines())
        out.append(f"[{'.'.join(path)}]")
        for k, v in tbl.items():
            if isinstance(v, dict):
                continue
            c = comments.get((*path, k))
            out.append(f"{k} = {_fmt(v)}" + (f"  # {c}" if c else ""))

    for name, tbl in (doc.get("backend") or {}).items():
        table(("backend", name), tbl)
    if doc.get("decode"):
        table(("decode",), doc["decode"])
    for k, v in doc.items():  # anything else a user put there, kept as is
        if k not in ("backend", "decode") and isinstance(v, dict):
            table((k,), v)
    return "\n".join(out) + "\n"


def _user_text(path: Path) -> str | None:
    """The user calibration file's text (checked to be TOML), None when there is none."""
    if not path.is_file():
        return None
    try:  # a FIFO or /dev/zero in its place neither hangs nor fills memory
        text = read_regular(path, MAX_JSON_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why_not = why(e) if isinstance(e, OSError) else "not UTF-8"
        raise MlxfitError(f"cannot read the calibration file {path}: {why_not}") from None
    parse_toml(text, f"the calibration file {path}")
    return text


def _changes(result_backends: tuple[BackendFit, ...], decode: DecodeFit | None, source: str
             ) -> tuple[dict[tuple[str, ...], Any], dict[tuple[str, ...], str]]:
    """(key path -> fitted value, key or table path -> its comment): what --write changes."""
    values: dict[tuple[str, ...], Any] = {}
    comments: dict[tuple[str, ...], str] = {}
    when = time.strftime("%Y-%m-%d", time.gmtime())
    for b in result_backends:
        if b.fitted:
            o, n = b.old_stats, b.new_stats
            comments[("backend", b.backend)] = (
                f"Fitted {when} by least squares to {b.n_runs} measured runs "
                f"({b.n_records} distinct) of {source}:\n"
                f"|peak error| median {100 * o.median:.1f} -> {100 * n.median:.1f} %, "
                f"p90 {100 * o.p90:.1f} -> {100 * n.p90:.1f} %, "
                f"max {100 * o.max:.1f} -> {100 * n.max:.1f} %.")
        for k in b.fitted:
            values[("backend", b.backend, k)] = round(b.new[k], 6)
            comments[("backend", b.backend, k)] = f"was {_fmt(b.old[k])}"
    if decode is not None and decode.fitted:
        for k in decode.fitted:
            values[("decode", k)] = decode.new[k]
            comments[("decode", k)] = (
                f"fitted {when} to {decode.n_records} Metal tok/s records "
                f"(was {_fmt(decode.old[k])})")
    return values, comments


def _toml_for(result_backends: tuple[BackendFit, ...], decode: DecodeFit | None,
              existing: str | None, source: str, target: Path, write: bool) -> str:
    """The calibration file --write stores: ``existing`` (the file's text) edited in place, or
    a new file when there is none (or, when only shown, when the edit is refused)."""
    values, comments = _changes(result_backends, decode, source)
    if existing is not None:
        try:
            return edit_toml(existing, values, _fmt, comments)
        except EditRefused as e:
            if write:
                raise MlxfitError(f"{target}: cannot update it in place ({e}); nothing "
                                  "written: set the fitted values by hand (--show-toml prints "
                                  "them)") from None
    doc: dict[str, Any] = {"backend": {b.backend: {} for b in result_backends}}
    for path, v in values.items():
        tbl = doc
        for p in path[:-1]:
            tbl = tbl.setdefault(p, {})
        tbl[path[-1]] = v
    header = ("mlxfit user calibration, written by `mlxfit calibrate --write`.\n"
              f"Measurements: {source}\n"
              "Keys here override the constants shipped in mlxfit's calibration.toml;\n"
              "delete this file to return to them.")
    return render_toml(doc, comments, header)


# --------------------------------------------------------------------------- the twin


def calibrate(
    from_file: str | Path | None = None,
    *,
    write: bool = False,
    user_file: str | Path | None = None,
    backends: tuple[str, ...] | None = None,
    params: tuple[str, ...] = FIT_PARAMS,
    calibration: Calibration | None = None,
) -> CalibrationResult:
    """Fit the calibration constants to the measurements in ``from_file`` (default: what
    ``mlxfit measure --save`` appends to, ``~/.cache/mlxfit/measurements.jsonl``).

    The old figures are those ``fit`` uses now (the shipped constants with the user file, if
    any, on top). ``write``: store the fitted constants in ``user_file`` (default
    ``~/.config/mlxfit/calibration.toml``, merged with what it holds), which ``fit`` and
    ``measure`` then load and name in their notes."""
    bad = [p for p in params if p not in FIT_PARAMS]
    if bad:
        raise UsageError(f"params: cannot fit {', '.join(bad)} (fittable: "
                         f"{', '.join(FIT_PARAMS)})", param="params")
    src = Path(from_file).expanduser() if from_file is not None else results_path()
    target = Path(user_file).expanduser() if user_file is not None else user_calibration()
    cal = calibration or load_calibration(target)
    if backends is not None:
        unknown = [b for b in backends if b not in cal.backends]
        if unknown:
            raise UsageError(f"backends {unknown[0]!r}: unknown (known: "
                             f"{', '.join(sorted(cal.backends))})", param="backends")
    samples, skipped = load_records(src)
    samples = merge_repeats(samples)
    if backends is not None:
        samples = [s for s in samples if s.backend in backends]
    if not samples:
        why = f" ({len(skipped)} skipped: {skipped[0][1]})" if skipped else ""
        raise NoMeasurements(f"{src}: no usable measurement to fit{why}")

    fits: list[BackendFit] = []
    rows: list[Row] = []
    for b in sorted({s.backend for s in samples}):
        group = [s for s in samples if s.backend == b]
        be = cal.backend(b)
        start = {k: float(getattr(be, k)) for k in fittable(cal, b, params)}
        refused = undetermined(group, cal, b, start)
        if refused:  # kept as they are: nothing is fitted, the reason is reported
            new_vals, fitted, unused = dict(start), (), ()
        else:
            new_vals, fitted, unused = fit_memory(group, cal, b, params)
        new_cal = with_backend(cal, b, {k: new_vals[k] for k in fitted})
        old_peaks = [predict_peak(s, cal) for s in group]
        new_peaks = [predict_peak(s, new_cal) for s in group]
        kv_ok = [predicted_caches(s, cal) == s.caches for s in group]
        for s, o, n, ok in zip(group, old_peaks, new_peaks, kv_ok):
            rows.append(Row(s.name, b, s.peak, o, n, ok, s.repeats))
        fits.append(BackendFit(
            backend=b, n_records=len(group),
            old={k: float(getattr(be, k)) for k in fittable(cal, b, params)}, new=new_vals,
            fitted=fitted, unused=unused,
            old_stats=ErrorStats.of([(o - s.peak) / s.peak for s, o in zip(group, old_peaks)]),
            new_stats=ErrorStats.of([(n - s.peak) / s.peak for s, n in zip(group, new_peaks)]),
            kv_mismatches=sum(not ok for ok in kv_ok),
            n_runs=sum(s.repeats for s in group), refused=refused,
        ))
    decode = fit_decode([s.record for s in samples], cal)
    toml = _toml_for(tuple(fits), decode, _user_text(target), str(src), target, write)
    written = None
    if write and not any(b.fitted for b in fits) and not (decode and decode.fitted):
        raise NoMeasurements(f"{src}: nothing fitted, nothing written: "
                             + "; ".join(f"backend {b.backend}: {b.refused}"
                                         for b in fits if b.refused))
    if write:
        try:
            # never write what the loader rejects; the old file stays whole until the new one is
            write_file(target, toml, make_parents=True, validate=lambda b: check_user_calibration(
                parse_toml(b, f"the calibration for {target}"), str(target)))
        except OSError as e:
            raise MlxfitError(f"{target}: cannot write ({e.strerror or e})") from None
        written = str(target)
    return CalibrationResult(source=str(src), calibration=cal.source, backends=tuple(fits),
                             decode=decode, rows=tuple(rows), skipped=tuple(skipped),
                             toml=toml, written_to=written)




