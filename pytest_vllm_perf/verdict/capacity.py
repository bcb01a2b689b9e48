"""Capacity under an SLO: the highest open-loop request rate at which the SLO holds,
with a 95% interval (issue 26; the statistics, ahead of the search that feeds them).

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

**The search** (:func:`search`) spends passes where they inform the fit: it brackets
the capacity by doubling or halving the rate, bisects the bracket in log rate, then
runs rounds of passes at x0.9, x1 and x1.1 of the current estimate, fitting the passes
within x1.3 of it (close, because a margin that bends over a wide range misplaces the
crossing), until the interval is narrower than the tolerance or the passes run out.
Every pass counts in the fit that is near enough; none is repeated for its own sake.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

__all__ = ["Capacity", "Search", "fit", "margin", "search", "t_975"]

# Student's t 0.975 quantiles by degrees of freedom (standard tables); between 30 and
# infinity, interpolated linearly in 1/df, which is accurate to 0.001 there.
_T975: Final = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
_Z975: Final = 1.959964


def t_975(df: int) -> float:
    """Student's t 0.975 quantile with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df in _T975:
        return _T975[df]
    known = sorted(_T975)
    lower = max(k for k in known if k < df)
    upper = min((k for k in known if k > df), default=None)
    if upper is None:  # beyond 120: toward the normal quantile, linear in 1/df
        w = (1 / df) / (1 / lower)
        return _Z975 + w * (_T975[lower] - _Z975)
    w = (1 / df - 1 / upper) / (1 / lower - 1 / upper)
    return _T975[upper] + w * (_T975[lower] - _T975[upper])


def margin(measured: dict[str, float], limits: dict[str, float]) -> float:
    """A pass's SLO margin: the largest measured value over its limit (inf when a
    limited value is missing or infinite, as a failed request's TTFT is)."""
    ratios = []
    for key, limit in limits.items():
        value = measured.get(key, math.inf)
        ratios.append(math.inf if not math.isfinite(value) else value / limit)
    return max(ratios)


@dataclass(frozen=True)
class Capacity:
    """A capacity estimate: the rate, its 95% interval, and what it was fitted from."""

    rps: float
    low: float
    high: float
    passes: int
    slope: float  # d log m / d log r: how steeply the margin rises with the rate

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


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
    # theta = x* - xbar solves ybar + b theta = 0; Fieller: the thetas with
    # (ybar + b theta)^2 <= t^2 s2 (1/n + theta^2/sxx)
    qa = b * b - t2 * s2 / sxx
    qb = 2 * ybar * b
    qc = ybar * ybar - t2 * s2 / n
    theta = -ybar / b if b != 0 else math.inf
    rps = math.exp(xbar + theta) if math.isfinite(theta) else math.nan
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:  # the slope is not told from noise: no bounded interval
        return Capacity(rps, 0.0, math.inf, n, b)
    roots = sorted(((-qb - math.sqrt(disc)) / (2 * qa), (-qb + math.sqrt(disc)) / (2 * qa)))
    return Capacity(rps, math.exp(xbar + roots[0]), math.exp(xbar + roots[1]), n, b)


@dataclass(frozen=True)
class Search:
    """What a capacity search found, and what it spent: every pass's rate and margin."""

    capacity: Capacity | None  # None: no fit was possible within the passes allowed
    rates: tuple[float, ...]
    margins: tuple[float, ...]
    converged: bool  # the interval got narrower than the tolerance

    @property
    def passes(self) -> int:
        return len(self.rates)

    @property
    def held(self) -> float:
        """The highest rate at which a single pass kept the SLO (0 if none did)."""
        return max(
            (r for r, m in zip(self.rates, self.margins, strict=True) if m <= 1), default=0.0
        )

    @property
    def broke(self) -> float:
        """The lowest rate at which a single pass broke the SLO (inf if none did)."""
        return min(
            (r for r, m in zip(self.rates, self.margins, strict=True) if not m <= 1),
            default=math.inf,
        )

    @property
    def resolved(self) -> bool:
        """Whether the fit gave a bounded interval: its point is then the capacity."""
        return self.capacity is not None and self.capacity.bounded

    @property
    def lower_evidence(self) -> float:
        """What a minimum is checked against: the fitted capacity when its interval is
        bounded, else the highest rate a single pass held at (the fit's point, with an
        unbounded interval, may be anywhere)."""
        return self.capacity.rps if self.resolved and self.capacity else self.held


NEAR: Final = 1.3  # passes within this factor of the estimate enter the fit
ROUND: Final = (0.9, 1.0, 1.1)  # one round of passes around the estimate
BISECTIONS: Final = 2


def search(
    trial: Callable[[float], float],
    start_rps: float,
    tolerance: float = 0.1,
    max_passes: int = 30,
) -> Search:
    """Find the capacity by calling ``trial(rate)`` (one pass at that rate, returning
    its SLO margin) at most ``max_passes`` times; stop when the 95% interval's
    high / low is within ``1 + tolerance``."""
    if start_rps <= 0 or tolerance <= 0 or max_passes < 3:
        raise ValueError("a capacity search needs a rate > 0, a tolerance > 0 and 3 passes")
    rates: list[float] = []
    margins: list[float] = []

    def run(rate: float) -> float:
        found = trial(rate)
        rates.append(rate)
        margins.append(found)
        return found

    def done(capacity: Capacity | None, converged: bool) -> Search:
        return Search(capacity, tuple(rates), tuple(margins), converged)

    # bracket: the highest rate seen to hold, the lowest seen to break
    low = high = math.nan
    rate = start_rps
    while len(rates) < max_passes:
        if run(rate) <= 1:
            low = rate
            if math.isfinite(high):
                break
            rate *= 2
        else:
            high = rate
            if math.isfinite(low):
                break
            rate /= 2
    if not (math.isfinite(low) and math.isfinite(high)):
        return done(None, False)
    for _ in range(BISECTIONS):
        if len(rates) >= max_passes:
            break
        mid = math.sqrt(low * high)
        if run(mid) <= 1:
            low = mid
        else:
            high = mid
    estimate = math.sqrt(low * high)
    found: Capacity | None = None
    while len(rates) + len(ROUND) <= max_passes:
        for factor in ROUND:
            run(estimate * factor)
        near = [
            (r, m)
            for r, m in zip(rates, margins, strict=True)
            if estimate / NEAR <= r <= estimate * NEAR
        ]
        try:
            found = fit([r for r, _ in near], [m for _, m in near])
        except ValueError:
            continue
        if found.bounded and found.high / found.low <= 1 + tolerance:
            return done(found, True)
        if math.isfinite(found.rps) and found.rps > 0:
            # move toward the fit, but no further than the bracket allows
            estimate = min(max(found.rps, low / 2), high * 2)
    return done(found, False)
