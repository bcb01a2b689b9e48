"""Capacity under an SLO: the highest open-loop request rate at which the SLO holds,
with a 95% interval: the statistics (the search that feeds them is ``capacity_search``).

**The model.** A pass at rate ``r`` has an SLO margin ``m``: the largest of its measured
values over their limits (p99 TTFT over the TTFT limit, p99 ITL over the ITL limit), so
the SLO holds when ``m <= 1``. Near the boundary, latency grows as a power of the rate,
so ``log m = a + b log r + e``, with ``e`` independent and normal across passes (the
pass-to-pass noise). The capacity is the rate whose expected log margin is 0:
``exp(-a / b)``.

**The interval.** The ordinary least-squares fit of ``log m`` on ``log r`` over the
passes, and Fieller's interval for the ratio ``-a / b`` (exact under the model's normal
errors, with Student's t on n - 2 degrees of freedom). It is bounded only when the slope
is significant: passes that do not tell a rising margin from noise give an unbounded
interval, never a made-up one. ``bench/capacity_coverage.py`` checks its coverage in a
seeded simulation of the model, including heavier-tailed noise.

**Two capacities** (``judge``: an A/B run, or a stored baseline) are compared as a
ratio with a 95% interval on the log scale: each fit's standard error of log capacity
(the delta method's, or Fieller's half-width where that is wider) in quadrature, with
Student's t on Welch-Satterthwaite's degrees of freedom. ``interleave`` alternates the
two sides' searches pass by pass. Seeded coverage of the ratio: 0.93-0.98
(``bench/results/capacity_coverage.md``). ``regressed`` is a one-sided test at the
test's share of the run's false-alarm budget (``alpha``): the interval's upper bound at
1 - alpha below 1 / (1 + a quarter of the tolerance), the margin of every metric's rule;
at the default 2.5% that is the 95% interval's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from pytest_vllm_perf.core.capacity import METRIC, Capacity, Search
from pytest_vllm_perf.core.records import MetricVerdict, Verdict
from pytest_vllm_perf.verdict import intervals
from pytest_vllm_perf.verdict.decide import FUTILITY
from pytest_vllm_perf.verdict.sequential import DEFAULT_INDIFFERENCE

__all__ = [
    "METRIC",
    "Capacity",
    "Search",
    "fit",
    "judge",
    "margin",
    "t_975",
]


@functools.lru_cache(maxsize=256)
def t_975(df: int) -> float:
    """Student's t 0.975 quantile with ``df`` degrees of freedom (``intervals.t_quantile``,
    cached: a search fits after every pass, and the coverage simulation a million times)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return intervals.t_quantile(0.975, df)


def margin(measured: dict[str, float], limits: dict[str, float]) -> float:
    """A pass's SLO margin: the largest measured value over its limit (inf when a
    limited value is missing or infinite, as a failed request's TTFT is)."""
    ratios = []
    for key, limit in limits.items():
        value = measured.get(key, math.inf)
        ratios.append(math.inf if not math.isfinite(value) else value / limit)
    return max(ratios)


def _fieller(
    num: float, den: float, v_nn: float, v_nd: float, v_dd: float, t2: float
) -> tuple[float, float] | None:
    """Fieller's interval for the ratio ``num / den`` of two normal estimates with
    (co)variances ``v_nn``, ``v_nd``, ``v_dd``: the thetas with
    ``(num - theta den)^2 <= t2 (v_nn - 2 theta v_nd + theta^2 v_dd)``. None when the
    set is not a bounded interval (the denominator is not told from zero)."""
    qa = den * den - t2 * v_dd
    qb = -2 * (num * den - t2 * v_nd)
    qc = num * num - t2 * v_nn
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return None
    root = math.sqrt(disc)
    return (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)


def fit(rates: Sequence[float], margins: Sequence[float]) -> Capacity:
    """The capacity and its 95% Fieller interval from passes at ``rates`` with SLO
    ``margins``. Passes with an infinite margin (failures) are left out of the fit;
    the search places them above the capacity. Needs at least 3 finite passes at two or
    more rates."""
    r = np.asarray(rates, dtype=float)
    m = np.asarray(margins, dtype=float)
    keep = np.isfinite(m) & (m > 0) & (r > 0)
    x, y = np.log(r[keep]), np.log(m[keep])
    n = len(x)
    if n < 3 or len(set(x.tolist())) < 2:
        raise ValueError("a capacity fit needs 3 passes or more at two rates or more")
    xbar, ybar = float(x.mean()), float(y.mean())
    sxx = float(((x - xbar) ** 2).sum())
    b = float(((x - xbar) * (y - ybar)).sum() / sxx)
    resid = y - (ybar + b * (x - xbar))
    s2 = float((resid**2).sum() / (n - 2))
    t2 = t_975(n - 2) ** 2
    # theta = x* - xbar = -ybar / b, ybar and b independent
    theta = -ybar / b if b != 0 else math.inf
    rps = math.exp(xbar + theta) if math.isfinite(theta) else math.nan
    # delta method: var(theta) = (s2/n + theta^2 s2/sxx)/b^2
    se = math.sqrt((s2 / n + theta * theta * s2 / sxx) / (b * b)) if b != 0 else math.nan
    roots = _fieller(-ybar, b, s2 / n, 0.0, s2 / sxx, t2)
    if roots is None:  # the slope is not told from noise: no bounded interval
        return Capacity(rps, 0.0, math.inf, n, b, se, n - 2)
    # Fieller's half-width in t units, where wider than the delta method's: the
    # delta method leaves out the slope's own uncertainty near its root
    se = max(se, (roots[1] - roots[0]) / (2 * math.sqrt(t2)))
    low, high = (math.exp(min(xbar + root, 700.0)) for root in roots)  # 700: below overflow
    return Capacity(rps, low, high if high < math.exp(700.0) else math.inf, n, b, se, n - 2)


# A capacity verdict's one-sided false-alarm bound when no run budget is shared: the
# lower tail of the printed 95% interval.
ALPHA: Final = 0.025


def judge(base: Search, current: Search, tolerance: float, alpha: float = ALPHA) -> MetricVerdict:
    """The capacity of ``current`` against ``base``: their ratio with a 95% interval,
    and a verdict at ``tolerance`` (capacity is better higher).

    The interval is exp(log ratio +- t * se), se the two fits' delta-method standard
    errors of log capacity in quadrature, t on Welch-Satterthwaite's degrees of freedom
    (``bench/capacity_coverage.py`` checks its coverage). The verdict is every metric's
    rule (``_decide``) from the same t: ``regressed`` when the one-sided bound at
    1 - ``alpha`` (the test's share of a run's budget, at most 2.5%: the 95% interval's
    upper bound) lies below 1 / (1 + a quarter of the tolerance), so a true loss equal
    to that margin is flagged at most ``alpha`` of the time, and capacity tests spend
    the run's budget as metric tests do. A side without a bounded fit is
    ``inconclusive``, except
    a current side at which no pass held the SLO while the base's did: that is
    ``regressed``, not hidden."""
    b, c = base.capacity, current.capacity
    point = (c.rps if c else math.nan) / (b.rps if b else math.nan)
    if base.held > 0 and current.held == 0:
        return MetricVerdict(
            METRIC, base.held, 0.0, 0.0, math.nan, math.nan, tolerance, Verdict.REGRESSED,
            "no pass held the SLO on the current side; the base held at "
            f"{base.held:.3g} req/s",
        )  # fmt: skip
    if not (base.resolved and current.resolved and b and c):
        return _joint(base, current, tolerance, point, alpha)
    var_b, var_c = b.log_se**2, c.log_se**2
    df = (var_b + var_c) ** 2 / (var_b**2 / b.df + var_c**2 / c.df)
    dof = max(1, math.floor(df))
    se = math.sqrt(var_b + var_c)
    half = t_975(dof) * se
    ratio = c.rps / b.rps
    low, high = ratio * math.exp(-half), ratio * math.exp(half)

    def standardised(theta0: float) -> float:  # log ratio against theta0, in se
        return (math.log(ratio) - theta0) / se

    verdict, p = _decide(standardised, dof, tolerance, alpha)
    basis = f"fits of {b.passes} and {c.passes} passes, Welch df {df:.1f}{_level(alpha)}"
    return MetricVerdict(
        METRIC, b.rps, c.rps, ratio, low, high, tolerance, verdict, basis, p_value=p,
        p_holm=p, margin=DEFAULT_INDIFFERENCE * tolerance, level=alpha,
    )  # fmt: skip


def _decide(
    standardised: Callable[[float], float], dof: int, tolerance: float, alpha: float
) -> tuple[Verdict, float]:
    """Every metric's rule (``decide``), capacity better higher: ``regressed`` when a loss
    beyond the margin (a quarter of the tolerance) is significant at the test's one-sided
    level ``alpha`` (held at 2.5%, the 95% interval's own tail), ``improved`` the mirror,
    ``unchanged`` when a loss or gain of the whole tolerance is ruled out at
    ``decide.FUTILITY``; with the p of no loss beyond the margin. ``standardised``: the
    log ratio's distance from a log ratio, in standard errors, Student's t with ``dof``
    degrees of freedom under it. A capacity a third of its baseline's whose interval
    cleared the tolerance was ``inconclusive`` under the rule of a change significantly
    beyond the tolerance (a fake server's capacity test, 4 of 15 runs)."""
    level = min(alpha, ALPHA)
    margin, at_tol = math.log1p(DEFAULT_INDIFFERENCE * tolerance), math.log1p(tolerance)
    lost = intervals.t_sf(-standardised(-margin), dof)
    gained = intervals.t_sf(standardised(margin), dof)
    within = max(intervals.t_sf(standardised(-at_tol), dof),
                 intervals.t_sf(-standardised(at_tol), dof))  # fmt: skip
    if lost < level:
        return Verdict.REGRESSED, lost
    if gained < level:
        return Verdict.IMPROVED, lost
    if within < max(level, FUTILITY):
        return Verdict.UNCHANGED, lost
    return Verdict.INCONCLUSIVE, lost


def _level(alpha: float) -> str:
    return "" if alpha >= ALPHA else f", regressed at one-sided level {alpha:.3g}"


def _joint(
    base: Search, current: Search, tolerance: float, point: float, alpha: float = ALPHA
) -> MetricVerdict:
    """When a side's own fit is unbounded: both sides' passes in one fit with a common
    slope, ``log m = a_side + b log r``, so the log ratio of capacities is
    ``(a_base - a_current) / b`` and Fieller's interval applies to it. A noisy side
    borrows the slope the other side measured; a 4x slower fake server, unresolved on
    its own, was called ``inconclusive`` before this, which never fails a run. Still
    unbounded: ``inconclusive``, saying why."""
    rows = [
        (side, r, m)
        for side, found in enumerate((base, current))
        for r, m in zip(found.rates, found.margins, strict=True)
        if math.isfinite(m) and m > 0 and r > 0
    ]
    counts = [sum(1 for side, _, _ in rows if side == k) for k in (0, 1)]
    points = (base.capacity.rps if base.capacity else math.nan,
              current.capacity.rps if current.capacity else math.nan)  # fmt: skip
    unresolved = MetricVerdict(
        METRIC, *points, point, math.nan, math.nan, tolerance, Verdict.INCONCLUSIVE,
        "not resolved: a side's fit and the joint fit have no bounded interval "
        f"(single passes held up to {base.held:.3g} / {current.held:.3g} req/s)",
    )  # fmt: skip
    if min(counts) < 2 or len(rows) < 5:
        return unresolved
    n, d, vnn, vnd, vdd, dof = _common_slope(rows)
    roots = _fieller(n, d, vnn, vnd, vdd, t_975(dof) ** 2)
    if roots is None:
        return unresolved
    ratio = math.exp(n / d)
    low, high = (math.exp(min(root, 700.0)) for root in roots)

    def standardised(theta0: float) -> float:  # Fieller's statistic, signed as theta
        return (
            math.copysign(1.0, d)
            * (n - theta0 * d)
            / math.sqrt(vnn - 2 * theta0 * vnd + theta0 * theta0 * vdd)
        )

    verdict, p = _decide(standardised, dof, tolerance, alpha)
    basis = f"a side unresolved: joint fit of {len(rows)} passes with a common slope{_level(alpha)}"
    return MetricVerdict(
        METRIC, *points, ratio, low, high, tolerance, verdict, basis, p_value=p,
        p_holm=p,  # one gated metric: Holm leaves its p as it is
        margin=DEFAULT_INDIFFERENCE * tolerance, level=alpha,
    )  # fmt: skip


def _common_slope(
    rows: Sequence[tuple[int, float, float]],
) -> tuple[float, float, float, float, float, int]:
    """The fit ``log m = a_side + b log r`` over both sides' (side, rate, margin) rows:
    the log ratio's numerator ``a_base - a_current`` and denominator ``b``, their
    variances and covariance, and the residual degrees of freedom."""
    x = np.array([[side == 0, side == 1, math.log(r)] for side, r, _ in rows], dtype=float)
    y = np.log([m for _, _, m in rows])
    xtx_inv = np.linalg.pinv(x.T @ x)
    coef = xtx_inv @ x.T @ y
    dof = len(rows) - 3
    cov = float(((y - x @ coef) ** 2).sum() / dof) * xtx_inv
    # theta = log(current / base) = (a_base - a_current) / b = n / d
    return (
        float(coef[0] - coef[1]), float(coef[2]),
        float(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]), float(cov[0, 2] - cov[1, 2]),
        float(cov[2, 2]), dof,
    )  # fmt: skip
