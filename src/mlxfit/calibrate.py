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
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from mlxfit.calibration import Calibration, load_calibration
from mlxfit.errors import MlxfitError, UsageError

# The constants a memory fit may move, in the order they are shown.
# Those a calibration file lacks (an older mlxfit) are skipped.
FIT_PARAMS: tuple[str, ...] = (
    "act_hidden", "act_ffn", "act_q", "act_moe", "act_kv", "act_linear", "act_floor",
    "score_arrays", "sink_score_arrays", "softcap_score_arrays", "quantized_score_arrays",
    "mla_score_arrays", "mla_kv_arrays", "bf16_act_bytes", "ssd_square", "ssd_token",
    "linear_fallback",
)
DECODE_PARAMS: tuple[str, ...] = ("eta", "fixed_s")
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PRIOR_WEIGHT = 1e-4  # pull towards the current value, per (relative change)^2


class NoMeasurements(MlxfitError):
    """No usable record to fit."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Sample:
    """One measured run, ready to predict."""

    name: str
    backend: str
    cfg: Any  # mlxfit.config.ModelConfig
    run: Any  # mlxfit.memory.Run
    weights: int  # measured
    peak: int  # measured, from the process's memory before the load
    caches: int  # measured bytes of all caches at the end
    record: dict = field(repr=False, default_factory=dict)
    repeats: int = 1  # identical runs merged into this one (their largest peak)


def _record_name(rec: dict, i: int) -> str:
    if rec.get("name"):
        return str(rec["name"])
    src = rec.get("source") or {}
    model = src.get("name") or src.get("model") or rec.get("model_type") or f"line {i}"
    tag = f"ctx{rec.get('ctx')}/step{rec.get('prefill_step_size')}/gen{rec.get('gen_tokens')}"
    if rec.get("kv_bits"):
        tag += f"/kv{rec['kv_bits']}"
    if rec.get("max_kv_size"):
        tag += f"/max_kv{rec['max_kv_size']}"
    return f"{model}/{tag}"


def _backend_of(rec: dict) -> str | None:
    pred = rec.get("predicted") or {}
    b = pred.get("backend") or rec.get("backend")
    return b if b in ("cpu", "metal") else None


def prepare(rec: dict, i: int = 0) -> Sample:
    """A record -> Sample; raises ValueError naming what is missing."""
    from mlxfit.config import parse_config
    from mlxfit.measure import measured_terms
    from mlxfit.memory import Run

    if rec.get("error"):
        raise ValueError(f"mlx-lm failed on this run ({str(rec['error'])[:60]})")
    for key in ("config", "ctx", "prefill_step_size", "peak_bytes", "cache_bytes_end",
                "active_after_load_bytes"):
        if key not in rec:
            raise ValueError(f"no '{key}'")
    backend = _backend_of(rec)
    if backend is None:
        raise ValueError(f"backend {rec.get('backend')!r} is neither cpu nor metal")
    act = rec.get("act_bytes") or _DTYPE_BYTES.get(rec.get("dtype", ""))
    if not act:
        raise ValueError(f"activation dtype unknown ({rec.get('dtype')!r})")
    cfg = parse_config(rec["config"], act_bytes=int(act), where=_record_name(rec, i))
    run = Run(ctx=int(rec["ctx"]), gen=int(rec.get("gen_tokens") or 0),
              prefill_step_size=int(rec["prefill_step_size"]), kv_bits=rec.get("kv_bits"),
              kv_group=int(rec.get("kv_group_size") or 64),
              quantized_kv_start=int(rec.get("quantized_kv_start", 5000)),
              max_kv_size=rec.get("max_kv_size"), backend=backend)
    mt = measured_terms(rec)
    return Sample(name=_record_name(rec, i), backend=backend, cfg=cfg, run=run,
                  weights=int(mt["weights"]), peak=int(mt["peak"]),
                  caches=int(rec["cache_bytes_end"]), record=rec)


def load_records(path: Path) -> tuple[list[Sample], list[tuple[str, str]]]:
    """Usable samples of a JSON-lines file, and (record, reason) for those skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NoMeasurements(f"{path}: no measurements there (mlxfit measure MODEL --ctx N "
                             "--save writes them)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MlxfitError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    samples: list[Sample] = []
    skipped: list[tuple[str, str]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            skipped.append((f"line {i}", f"not JSON ({e.msg})"))
            continue
        if not isinstance(rec, dict):
            skipped.append((f"line {i}", "not a JSON object"))
            continue
        try:
            samples.append(prepare(rec, i))
        except (ValueError, TypeError, KeyError, MlxfitError) as e:
            skipped.append((_record_name(rec, i), str(e).splitlines()[0] if str(e) else
                            type(e).__name__))
    return samples, skipped


def merge_repeats(samples: list[Sample]) -> list[Sample]:
    """Identical runs (same backend, config, run, weights and dtype) become one sample with
    the largest peak measured: the run-to-run spread of a peak (MLX's scheduler runs ahead of
    the kernels by a variable amount) is a few %, and the peak to budget for is the largest."""
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        key = json.dumps([s.backend, s.record.get("config"), repr(s.run), s.weights,
                          s.cfg.act_bytes], sort_keys=True, default=str)
        groups.setdefault(key, []).append(s)
    out = []
    for g in groups.values():
        top = max(g, key=lambda x: x.peak)
        out.append(replace(top, repeats=len(g)) if len(g) > 1 else top)
    return out


# --------------------------------------------------------------------------- prediction


def _with_backend(cal: Calibration, backend: str, values: dict[str, float]) -> Calibration:
    be = replace(cal.backend(backend), **values)
    return replace(cal, backends={**cal.backends, backend: be})


def predict_peak(s: Sample, cal: Calibration) -> int:
    """measured weights + predicted caches and transient at the predicted peak moment."""
    from mlxfit.core import totals_at

    return totals_at(s.cfg, s.weights, s.run, cal).total


def predicted_caches(s: Sample, cal: Calibration) -> int:
    from mlxfit.core import totals_at

    t = totals_at(s.cfg, s.weights, s.run, cal)
    return t.kv + t.state


# --------------------------------------------------------------------------- least squares


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            f = m[r][c] / m[c][c]
            if f:
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))) / m[r][r]
    return x


def _residuals(samples: list[Sample], cal: Calibration, backend: str,
               values: dict[str, float]) -> list[float]:
    c = _with_backend(cal, backend, values)
    return [(predict_peak(s, c) - s.peak) / s.peak for s in samples]


def _cost(res: list[float], values: dict[str, float], prior: dict[str, float]) -> float:
    pen = sum(((values[k] - v0) / max(abs(v0), 1.0)) ** 2 for k, v0 in prior.items())
    return sum(r * r for r in res) + PRIOR_WEIGHT * pen


def least_squares(residuals: Callable[[dict[str, float]], list[float]],
                  start: dict[str, float], lower: dict[str, float] | None = None,
                  max_iter: int = 60) -> tuple[dict[str, float], tuple[str, ...]]:
    """Damped least squares (Levenberg-Marquardt) of ``residuals(values)`` over the keys of
    ``start``, each kept >= its ``lower`` bound (default 0), with a small pull towards its start
    value. Finite-difference Jacobian: the predictions are piecewise linear in the constants
    (a max over phases and layer layouts). Returns (values, the keys any residual depends on;
    the others keep their start value)."""
    lower = lower or {}
    keys = tuple(start)
    r0 = residuals(start)

    def jacobian(vals: dict[str, float], res: list[float], ks) -> dict[str, list[float]]:
        cols = {}
        for k in ks:
            h = max(abs(vals[k]) * 1e-3, 1e-3)
            rk = residuals(dict(vals, **{k: vals[k] + h}))
            cols[k] = [(a - b) / h for a, b in zip(rk, res)]
        return cols

    cols = jacobian(start, r0, keys)
    active = tuple(k for k in keys if any(abs(x) > 1e-12 for x in cols[k]))
    if not active:
        return dict(start), ()
    prior = {k: start[k] for k in active}
    vals, res = dict(start), r0
    cost = _cost(res, vals, prior)
    mu = 1e-3
    for it in range(max_iter):
        if it:
            cols = jacobian(vals, res, active)
        n = len(active)
        jtj = [[sum(x * y for x, y in zip(cols[a], cols[b])) for b in active] for a in active]
        grad = [sum(x * r for x, r in zip(cols[a], res)) for a in active]
        for i, k in enumerate(active):  # the prior's curvature and gradient
            s2 = max(abs(prior[k]), 1.0) ** 2
            jtj[i][i] += PRIOR_WEIGHT / s2
            grad[i] += PRIOR_WEIGHT * (vals[k] - prior[k]) / s2
        improved = done = False
        for _ in range(12):
            a = [[jtj[i][j] + (mu * (jtj[i][i] or 1.0) if i == j else 0.0) for j in range(n)]
                 for i in range(n)]
            step = _solve(a, [-g for g in grad])
            if step is None:
                mu *= 10
                continue
            trial = dict(vals)
            for i, k in enumerate(active):
                trial[k] = max(lower.get(k, 0.0), vals[k] + step[i])
            tres = residuals(trial)
            tcost = _cost(tres, trial, prior)
            if tcost < cost:
                done = (cost - tcost) < 1e-12 * max(cost, 1e-30)
                vals, res, cost = trial, tres, tcost
                mu = max(mu / 3, 1e-12)
                improved = True
                break
            mu *= 10
        if not improved or done:
            break
    return vals, active


def fittable(cal: Calibration, backend: str, params: tuple[str, ...] = FIT_PARAMS
             ) -> tuple[str, ...]:
    """The requested constants this calibration's backend has."""
    have = set(cal.backend(backend).__dataclass_fields__)
    return tuple(k for k in params if k in have)


def fit_memory(samples: list[Sample], cal: Calibration, backend: str,
               params: tuple[str, ...] = FIT_PARAMS, max_iter: int = 60
               ) -> tuple[dict[str, float], tuple[str, ...], tuple[str, ...]]:
    """Least-squares constants of ``backend`` for these samples.

    Returns (new values of every parameter in ``params``, the ones fitted, the ones no sample
    exercises, which keep their value)."""
    be = cal.backend(backend)
    params = fittable(cal, backend, params)
    start = {k: float(getattr(be, k)) for k in params}
    vals, active = least_squares(lambda v: _residuals(samples, cal, backend, v), start,
                                 max_iter=max_iter)
    return vals, active, tuple(k for k in params if k not in active)


def _decode_rows(records: list[dict]) -> list[tuple[str, Any, Any, Any, float, float, str]]:
    """(name, cfg, run, weights read, bandwidth GB/s, measured seconds/token, machine name) of
    the Metal records that measured a decode speed on a known bandwidth. The machine name is
    the record's (``machine_info.name``): an Ultra record is predicted with the Ultra factor,
    as ``fit`` predicts it, so the fitted eta does not absorb that factor a second time."""
    from mlxfit.config import parse_config
    from mlxfit.memory import Run
    from mlxfit.speed import WeightsRead

    rows = []
    for i, rec in enumerate(records):
        mach = rec.get("machine_info") or {}
        bw, tps, wr = mach.get("bandwidth_gbs"), rec.get("decode_tok_s"), rec.get("weights_read")
        if _backend_of(rec) != "metal" or not bw or not tps or not wr or rec.get("error"):
            continue
        try:
            cfg = parse_config(rec["config"], act_bytes=int(rec["act_bytes"]))
            run = Run(ctx=int(rec["ctx"]), gen=int(rec.get("gen_tokens") or 0),
                      prefill_step_size=int(rec["prefill_step_size"]), kv_bits=rec.get("kv_bits"),
                      kv_group=int(rec.get("kv_group_size") or 64),
                      quantized_kv_start=int(rec.get("quantized_kv_start", 5000)),
                      max_kv_size=rec.get("max_kv_size"), backend="metal")
            rows.append((_record_name(rec, i), cfg, run, WeightsRead(**wr), float(bw),
                         1.0 / float(tps), str(mach.get("name") or "")))
        except (ValueError, TypeError, KeyError, MlxfitError):
            continue
    return rows


def fit_decode(records: list[dict], cal: Calibration) -> DecodeFit | None:
    """eta and fixed_s from Metal records with a measured decode speed (least squares on the
    relative error of the seconds per token; the other decode constants are kept); None
    without any such record."""
    from mlxfit.speed import predicted_decode_seconds

    rows = _decode_rows(records)
    if not rows:
        return None

    def seconds(d, row) -> float:
        _, cfg, run, w, bw, _, machine_name = row
        return predicted_decode_seconds(cfg, run, w, bw, cal, machine_name, decode=d)[0]

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
class CalibrationResult:
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
            cal = _with_backend(cal, b.backend, {k: b.new[k] for k in b.fitted})
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


def _user_doc(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise MlxfitError(f"{path}: cannot read calibration file ({e})") from None


def _toml_for(result_backends: tuple[BackendFit, ...], decode: DecodeFit | None,
              existing: dict[str, Any], source: str) -> str:
    doc: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v)
                           for k, v in existing.items()}
    doc["backend"] = {k: dict(v) for k, v in (existing.get("backend") or {}).items()}
    comments: dict[tuple[str, ...], str] = {}
    when = time.strftime("%Y-%m-%d", time.gmtime())
    for b in result_backends:
        tbl = doc["backend"].setdefault(b.backend, {})
        if b.fitted:
            o, n = b.old_stats, b.new_stats
            comments[("backend", b.backend)] = (
                f"Fitted {when} by least squares to {b.n_runs} measured runs "
                f"({b.n_records} distinct) of {source}:\n"
                f"|peak error| median {100 * o.median:.1f} -> {100 * n.median:.1f} %, "
                f"p90 {100 * o.p90:.1f} -> {100 * n.p90:.1f} %, "
                f"max {100 * o.max:.1f} -> {100 * n.max:.1f} %.")
        for k in b.fitted:
            tbl[k] = round(b.new[k], 6)
            comments[("backend", b.backend, k)] = f"was {_fmt(b.old[k])}"
    if decode is not None and decode.fitted:
        tbl = doc.setdefault("decode", {})
        for k in decode.fitted:
            tbl[k] = decode.new[k]
            comments[("decode", k)] = (
                f"fitted {when} to {decode.n_records} Metal tok/s records "
                f"(was {_fmt(decode.old[k])})")
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
    from mlxfit import api
    from mlxfit.measure import results_path

    bad = [p for p in params if p not in FIT_PARAMS]
    if bad:
        raise UsageError(f"cannot fit {', '.join(bad)} (fittable: {', '.join(FIT_PARAMS)})")
    src = Path(from_file).expanduser() if from_file is not None else results_path()
    target = Path(user_file).expanduser() if user_file is not None else api.user_calibration()
    cal = calibration or load_calibration(target)
    samples, skipped = load_records(src)
    samples = merge_repeats(samples)
    if backends is not None:
        unknown = [b for b in backends if b not in cal.backends]
        if unknown:
            raise UsageError(f"--backend {unknown[0]!r}: unknown (known: "
                             f"{', '.join(sorted(cal.backends))})")
        samples = [s for s in samples if s.backend in backends]
    if not samples:
        why = f" ({len(skipped)} skipped: {skipped[0][1]})" if skipped else ""
        raise NoMeasurements(f"{src}: no usable measurement to fit{why}")

    fits: list[BackendFit] = []
    rows: list[Row] = []
    for b in sorted({s.backend for s in samples}):
        group = [s for s in samples if s.backend == b]
        new_vals, fitted, unused = fit_memory(group, cal, b, params)
        new_cal = _with_backend(cal, b, {k: new_vals[k] for k in fitted})
        old_peaks = [predict_peak(s, cal) for s in group]
        new_peaks = [predict_peak(s, new_cal) for s in group]
        kv_ok = [predicted_caches(s, cal) == s.caches for s in group]
        for s, o, n, ok in zip(group, old_peaks, new_peaks, kv_ok):
            rows.append(Row(s.name, b, s.peak, o, n, ok, s.repeats))
        be = cal.backend(b)
        fits.append(BackendFit(
            backend=b, n_records=len(group),
            old={k: float(getattr(be, k)) for k in fittable(cal, b, params)}, new=new_vals,
            fitted=fitted, unused=unused,
            old_stats=ErrorStats.of([(o - s.peak) / s.peak for s, o in zip(group, old_peaks)]),
            new_stats=ErrorStats.of([(n - s.peak) / s.peak for s, n in zip(group, new_peaks)]),
            kv_mismatches=sum(not ok for ok in kv_ok),
            n_runs=sum(s.repeats for s in group),
        ))
    decode = fit_decode([s.record for s in samples], cal)
    toml = _toml_for(tuple(fits), decode, _user_doc(target), str(src))
    written = None
    if write:
        try:
            tomllib.loads(toml)  # never write a file the loader would reject
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(toml, encoding="utf-8")
        except OSError as e:
            raise MlxfitError(f"{target}: cannot write ({e.strerror or e})") from None
        load_calibration(target)  # raises if the merged constants do not parse
        written = str(target)
    return CalibrationResult(source=str(src), calibration=cal.source, backends=tuple(fits),
                             decode=decode, rows=tuple(rows), skipped=tuple(skipped),
                             toml=toml, written_to=written)


def result_to_json(r: CalibrationResult) -> dict[str, Any]:
    def stats(s: ErrorStats) -> dict[str, Any]:
        return {"n": s.n, "median": s.median, "p90": s.p90, "max": s.max}

    return {
        "schema_version": 1,
        "source": r.source,
        "calibration": r.calibration,
        "backends": [
            {"backend": b.backend, "n_records": b.n_records, "n_runs": b.n_runs,
             "fitted": list(b.fitted),
             "unused": list(b.unused), "old": b.old, "new": b.new,
             "old_peak_error": stats(b.old_stats), "new_peak_error": stats(b.new_stats),
             "kv_mismatches": b.kv_mismatches}
            for b in r.backends
        ],
        "decode": None if r.decode is None else {
            "n_records": r.decode.n_records, "fitted": list(r.decode.fitted),
            "old": r.decode.old, "new": r.decode.new,
            "old_tps_error": stats(r.decode.stats("old")),
            "new_tps_error": stats(r.decode.stats("new")),
        },
        "records": [
            {"name": x.name, "backend": x.backend, "measured_peak": x.measured,
             "old_peak": x.old, "new_peak": x.new, "old_error": x.old_error,
             "new_error": x.new_error, "kv_exact": x.kv_exact, "repeats": x.repeats}
            for x in r.rows
        ],
        "skipped": [{"record": a, "reason": b} for a, b in r.skipped],
        "written_to": r.written_to,
    }


__all__ = [
    "FIT_PARAMS",
    "CalibrationResult",
    "calibrate",
    "fit_decode",
    "fit_memory",
    "load_records",
    "result_to_json",
]
