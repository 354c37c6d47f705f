"""The band table (data/bands.toml, written by bench/fit_bands.py): per predicted figure, the
quantiles of mlxfit's out-of-sample errors, pooled and by segment. Parsed here, used by
mlxfit.estimate.bands."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlxfit.errors import MlxfitError

LEVEL = 0.9  # the share of real figures a band is meant to hold
SHRINK_N = 10  # prior strength (in runs) of the pooled band when shrinking a segment's
UNVERIFIED_WIDEN = 1.5  # see data/bands.toml
DIMS = ("chip", "kind", "size", "ctx")
FIGURES = ("peak", "decode", "prefill", "peak_cpu")

Pair = tuple[float, float]


@dataclass(frozen=True)
class FigureBands:
    pooled: Pair
    unseen_kind: Pair
    scale: Pair
    segments: Mapping[str, Mapping[str, tuple[float, float, int]]]


class BandTable:
    """The parsed band table: per figure, its pooled, unseen-kind and per-segment quantiles."""

    def __init__(self, figures: Mapping[str, Any], shrink_n: float = SHRINK_N,
                 unverified_widen: float = UNVERIFIED_WIDEN):
        self.shrink_n = float(shrink_n)
        self.unverified_widen = float(unverified_widen)
        self._figs: dict[str, FigureBands] = {}
        # The widening already folded into each figure's scale so that a source left out of
        # the table is held 90 % too (bench/fit_bands.py generalize): kept for the report.
        self.generalize = {name: float(t.get("generalize", 1.0)) for name, t in figures.items()}
        for name, t in figures.items():
            segs = {d: {str(v): (float(e[0]), float(e[1]), int(e[2]))
                        for v, e in t.get(d, {}).items()} for d in DIMS}
            self._figs[name] = FigureBands(_pair(t["pooled"]), _pair(t["unseen_kind"]),
                                           _pair(t.get("scale", (1.0, 1.0))), segs)

    def figures(self) -> list[str]:
        return list(self._figs)

    def get(self, figure: str) -> FigureBands | None:
        return self._figs.get(figure)


def _pair(v: Any) -> Pair:
    return float(v[0]), float(v[1])


def parse_bands(doc: Mapping[str, Any], where: str) -> BandTable:
    """data/bands.toml's document -> BandTable; a malformed table is one error naming it."""
    try:
        figs = {k: v for k, v in doc.items() if k in FIGURES}
        table = BandTable(figs, doc.get("shrink_n", SHRINK_N),
                          doc.get("unverified_widen", UNVERIFIED_WIDEN))
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise MlxfitError(f"{where}: malformed band table ({e})") from None
    if not figs:
        raise MlxfitError(f"{where}: the band table has none of {', '.join(FIGURES)}")
    return table


