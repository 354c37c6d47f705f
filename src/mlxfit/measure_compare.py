"""Measured vs predicted: a record's measured terms set term by term beside mlxfit's prediction.

``measured_terms`` turns one ``measure_run`` record into weights, KV cache, recurrent state,
transient and peak, all counted from the process's memory before the load (so that they add up
the way mlxfit predicts them; ``mlxfit calibrate`` reads records through it too);
``compare_terms`` pairs them (and the measured tok/s) with the predicted values as ``TermCheck``
rows, and ``_measured_phase`` names the segment where the measured peak happened. Pure: no mlx.
"""

from __future__ import annotations

from dataclasses import dataclass


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


def _measured_phase(rec: dict) -> str:
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
                  decode_tps: float | None) -> tuple[TermCheck, ...]:
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
        TermCheck("prefill_tok_s", rec.get("prefill_tok_s"), None, unit="tok/s",
                  note="not predicted"),
        TermCheck("decode_tok_s", rec.get("decode_tok_s"), decode_tps, unit="tok/s",
                  note=f"{rec.get('decode_steps')} steps at the end of the context"),
    ]
    return tuple(terms)
