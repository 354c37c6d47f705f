"""Least squares for the calibration constants: predicted peaks of measured runs against their
measured peaks (a small Gauss-Newton / Levenberg-Marquardt loop; no SciPy on the install path)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mlxfit.calibration.constants import Calibration
from mlxfit.estimate.solve import totals_at
from mlxfit.records import Sample

PRIOR_WEIGHT = 1e-4  # pull towards the current value, per (relative change)^2


def with_backend(cal: Calibration, backend: str, values: dict[str, float]) -> Calibration:
    be = replace(cal.backend(backend), **values)
    return replace(cal, backends={**cal.backends, backend: be})


def predict_peak(s: Sample, cal: Calibration) -> int:
    """measured weights + predicted caches and transient at the predicted peak moment."""
    return totals_at(s.cfg, s.weights, s.run, cal).total


def predicted_caches(s: Sample, cal: Calibration) -> int:
    t = totals_at(s.cfg, s.weights, s.run, cal)
    return t.kv + t.state


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


def relative_residuals(samples: list[Sample], cal: Calibration, backend: str,
               values: dict[str, float]) -> list[float]:
    c = with_backend(cal, backend, values)
    return [(predict_peak(s, c) - s.peak) / s.peak for s in samples]


def jacobian_columns(residuals: Callable[[dict[str, float]], list[float]],
                     start: dict[str, float]) -> dict[str, list[float]]:
    """d residual_i / d key at ``start``, by forward differences (as least_squares takes them)."""
    r0 = residuals(start)
    cols = {}
    for k, v in start.items():
        h = max(abs(v) * 1e-3, 1e-3)
        rk = residuals(dict(start, **{k: v + h}))
        cols[k] = [(a - b) / h for a, b in zip(rk, r0)]
    return cols


def numeric_rank(cols: list[list[float]], tol: float = 1e-6) -> int:
    """How many of these columns are independent (Gram-Schmidt on the columns scaled to unit
    length; a remainder under ``tol`` is dependent): how many constants the records determine."""
    basis: list[list[float]] = []
    for c in cols:
        norm = sum(x * x for x in c) ** 0.5
        if norm == 0:
            continue
        v = [x / norm for x in c]
        for b in basis:
            d = sum(x * y for x, y in zip(v, b))
            v = [x - d * y for x, y in zip(v, b)]
        rest = sum(x * x for x in v) ** 0.5
        if rest > tol:
            basis.append([x / rest for x in v])
    return len(basis)


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
