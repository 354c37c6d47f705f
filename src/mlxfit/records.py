"""Measured vs predicted: a record's measured terms set term by term beside mlxfit's prediction.

``measured_terms`` turns one ``measure_run`` record into weights, KV cache, recurrent state,
transient and peak, all counted from the process's memory before the load (so that they add up
the way mlxfit predicts them; ``mlxfit calibrate`` reads records through it too);
``compare_terms`` pairs them (and the measured tok/s) with the predicted values as ``TermCheck``
rows, and ``measured_phase`` names the segment where the measured peak happened. Pure: no mlx.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlxfit.errors import MlxfitError, NoMeasurements
from mlxfit.estimate.memory import Run, run_from_record
from mlxfit.localfile import read_regular, why
from mlxfit.model.config import ModelConfig
from mlxfit.model.inputs import WeightsRead
from mlxfit.model.parse import parse_config
from mlxfit.model.tensors import float_bytes
from mlxfit.settings import MAX_FILE_BYTES, Settings, from_environ
from mlxfit.writefile import append_line


@dataclass(frozen=True)
class TermCheck:
    """One term, measured and predicted (bytes, or tokens/s for the speeds)."""

    name: str
    measured: float | None
    predicted: float | None
    unit: str = "bytes"
    exact: bool = False  # mlxfit claims this term to the byte (weights, KV, state)
    note: str = ""

    @property
    def diff(self) -> float | None:
        if self.measured is None or self.predicted is None:
            return None
        return self.predicted - self.measured

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured; None when either is missing or measured is 0."""
        if self.diff is None or not self.measured:
            return None
        return self.diff / self.measured

    @property
    def matches(self) -> bool | None:
        """For exact terms: equal to the byte."""
        return None if self.diff is None else self.diff == 0


def measured_phase(rec: dict) -> str:
    if rec["peak_phase"] == "decode":
        return "decode"
    i = max(range(len(rec["chunks"])), key=lambda j: rec["chunks"][j]["peak_bytes"])
    return f"prefill chunk {i + 1} ({rec['chunks'][i]['tokens']} tokens)"


def measured_terms(rec: dict) -> dict:
    """Weights, caches, transient and peak of a record, all counted from the process's memory
    before the load (so that peak = weights + kv + state + transient, as predicted)."""
    base = rec.get("active_before_load_bytes", 0) or 0
    weights = rec.get("weights_measured_bytes", rec["active_after_load_bytes"] - base)
    peak = rec["peak_bytes"] - base
    state = rec.get("state_bytes_end")
    if state is None:  # older records: ArraysCache layers from the layer descriptions
        state = sum(_described_state(d) for d in rec.get("cache_layers", []))
    caches = rec["cache_bytes_end"]
    return {"weights": weights, "kv": caches - state, "state": state,
            "transient": peak - weights - caches, "peak": peak}


def _described_state(d: dict) -> int:
    if "parts" in d:
        return sum(_described_state(p) for p in d["parts"])
    return d["nbytes"] if "arrays" in d else 0


def compare_terms(rec: dict, *, weights: int, kv: int, state: int, transient: int, peak: int,
                  decode_tps: float | None, prefill_tps: float | None = None
                  ) -> tuple[TermCheck, ...]:
    mt = measured_terms(rec)
    terms = [
        TermCheck("weights", mt["weights"], weights, exact=True,
                  note="active memory added by the load"),
        TermCheck("kv_cache", mt["kv"], kv, exact=True, note="bytes of the caches' arrays"),
    ]
    if mt["state"] or state:
        terms.append(TermCheck("recurrent_state", mt["state"], state, exact=True,
                               note="ArraysCache arrays"))
    terms += [
        TermCheck("transient", mt["transient"], transient,
                  note="peak - weights - final caches"),
        TermCheck("peak", mt["peak"], peak, note="mx.get_peak_memory() over the generation"),
        TermCheck("prefill_tok_s", rec.get("prefill_tok_s"), prefill_tps, unit="tok/s",
                  note="the P-1 chunked prompt tokens over the chunks' time"
                  if prefill_tps is not None else "not predicted (no compute figure)"),
        TermCheck("decode_tok_s", rec.get("decode_tok_s"), decode_tps, unit="tok/s",
                  note=f"{rec.get('decode_steps')} steps at the end of the context"),
    ]
    return tuple(terms)


@dataclass(frozen=True)
class Sample:
    """One measured run, ready to predict."""

    name: str
    backend: str
    cfg: ModelConfig
    run: Run
    weights: int  # measured
    peak: int  # measured, from the process's memory before the load
    caches: int  # measured bytes of all caches at the end
    record: dict = field(repr=False, default_factory=dict)
    repeats: int = 1  # identical runs merged into this one (their largest peak)


def _record_name(rec: dict, i: int) -> str:
    if rec.get("name"):
        return str(rec["name"])[:200]
    src = rec.get("source") or {}
    if not isinstance(src, dict):
        src = {}
    model = src.get("name") or src.get("model") or rec.get("model_type") or f"line {i}"
    tag = f"ctx{rec.get('ctx')}/step{rec.get('prefill_step_size')}/gen{rec.get('gen_tokens')}"
    if rec.get("kv_bits"):
        tag += f"/kv{rec['kv_bits']}"
    if rec.get("max_kv_size"):
        tag += f"/max_kv{rec['max_kv_size']}"
    return f"{model}/{tag}"


def _backend_of(rec: dict) -> str | None:
    pred = rec.get("predicted") or {}
    b = (pred.get("backend") if isinstance(pred, dict) else None) or rec.get("backend")
    return b if isinstance(b, str) and b in ("cpu", "metal") else None


# The byte counts a record carries (mx.get_peak_memory() and friends): whole numbers 0..2^53,
# checked before they are subtracted or int()-ed (1e400 overflowed, "NaN" was a peak).
_BYTE_COUNTS = ("peak_bytes", "cache_bytes_end", "active_after_load_bytes",
                "active_before_load_bytes", "weights_measured_bytes", "state_bytes_end")


def _check_byte_counts(rec: dict) -> None:
    for key in _BYTE_COUNTS:
        v = rec.get(key)
        if v is None and key not in ("peak_bytes", "cache_bytes_end", "active_after_load_bytes"):
            continue
        if type(v) is float and v.is_integer():
            v = int(v)
        if type(v) is not int or not 0 <= v <= MAX_FILE_BYTES:
            raise ValueError(f"'{key}' is {str(v)[:40]!r}, not a byte count (0 to 2^53)")


def prepare(rec: dict, i: int = 0) -> Sample:
    """A record -> Sample; raises ValueError naming what is missing."""
    if rec.get("error"):
        raise ValueError(f"mlx-lm failed on this run ({str(rec['error'])[:60]})")
    for key in ("config", "ctx", "prefill_step_size", "peak_bytes", "cache_bytes_end",
                "active_after_load_bytes"):
        if key not in rec:
            raise ValueError(f"no '{key}'")
    _check_byte_counts(rec)
    backend = _backend_of(rec)
    if backend is None:
        raise ValueError(f"backend {rec.get('backend')!r} is neither cpu nor metal")
    act = rec.get("act_bytes") or float_bytes(rec.get("dtype"))
    if not act:
        raise ValueError(f"activation dtype unknown ({rec.get('dtype')!r})")
    cfg = parse_config(rec["config"], act_bytes=int(act), where=_record_name(rec, i))
    run = run_from_record(rec, backend)
    mt = measured_terms(rec)
    return Sample(name=_record_name(rec, i), backend=backend, cfg=cfg, run=run,
                  weights=int(mt["weights"]), peak=int(mt["peak"]),
                  caches=int(rec["cache_bytes_end"]), record=rec)


def load_records(path: Path) -> tuple[list[Sample], list[tuple[str, str]]]:
    """Usable samples of a JSON-lines file, and (record, reason) for those skipped."""
    try:  # a FIFO or /dev/zero as --from is refused, neither waited on nor read forever
        text = read_regular(path, MAX_RECORDS_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise NoMeasurements(f"{path}: no measurements there (mlxfit measure MODEL --ctx N "
                             "--save writes them)") from None
    except OSError as e:
        raise MlxfitError(f"{path}: cannot read ({why(e)})") from None
    except UnicodeDecodeError as e:
        raise MlxfitError(f"{path}: cannot read (not UTF-8: {e.reason} at byte {e.start})") \
            from None
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
        except (ValueError, RecursionError):  # 5,000 digits; 100,000 nested "["
            skipped.append((f"line {i}", "not JSON mlxfit reads (a huge number or deep nesting)"))
            continue
        if not isinstance(rec, dict):
            skipped.append((f"line {i}", "not a JSON object"))
            continue
        try:
            samples.append(prepare(rec, i))
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError,
                MlxfitError) as e:
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


def decode_rows(records: list[dict]) -> list[tuple[str, Any, Any, Any, float, float, str]]:
    """(name, cfg, run, weights read, bandwidth GB/s, measured seconds/token, machine name) of
    the Metal records that measured a decode speed on a known bandwidth. The machine name is
    the record's (``machine_info.name``): an Ultra record is predicted with the Ultra factor,
    as ``fit`` predicts it, so the fitted eta does not absorb that factor a second time."""
    rows = []
    for i, rec in enumerate(records):
        mach = rec.get("machine_info") or {}
        if not isinstance(mach, dict):
            continue
        bw, tps, wr = mach.get("bandwidth_gbs"), rec.get("decode_tok_s"), rec.get("weights_read")
        if _backend_of(rec) != "metal" or not wr or rec.get("error"):
            continue
        # speeds and bandwidths are finite positive numbers, or the record says nothing of them
        if not all(type(x) in (int, float) and 0 < x < math.inf for x in (bw, tps)):
            continue
        try:
            cfg = parse_config(rec["config"], act_bytes=int(rec["act_bytes"]))
            run = run_from_record(rec, "metal")
            rows.append((_record_name(rec, i), cfg, run, WeightsRead(**wr), float(bw),
                         1.0 / float(tps), str(mach.get("name") or "")[:200]))
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError,
                RecursionError, MlxfitError):
            continue
    return rows


RECORD_SCHEMA = 1

# The largest measurements file read: a record is ~2-4 KB, so 256 MB is ~100,000 runs, far
# past anything measured by hand.
MAX_RECORDS_BYTES = 256_000_000


def results_path(settings: Settings | None = None) -> Path:
    """Where ``--save`` appends: ``~/.cache/mlxfit/measurements.jsonl`` (``Settings.results_file``)."""
    path = (settings or from_environ()).results_file
    if path is None:
        raise MlxfitError("no home directory to keep measurements in "
                          "(~/.cache/mlxfit/measurements.jsonl): name a results file")
    return path


def append_record(rec: dict, results_file: str | Path | None = None, *,
                  settings: Settings | None = None) -> Path:
    """Append one record as a JSON line (default: ``~/.cache/mlxfit/measurements.jsonl``)."""
    path = (Path(results_file).expanduser() if results_file is not None
            else results_path(settings))
    try:
        append_line(path, json.dumps(rec, default=str), make_parents=True)
    except OSError as e:
        raise MlxfitError(f"{path}: cannot append the measurement ({e.strerror or e})") from None
    return path
