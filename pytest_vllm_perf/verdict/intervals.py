"""Confidence intervals and p-values for a change between two sets of passes.

All work on log values, so a shift is a ratio. The methods, by what the data allow:

- ``mean_shift``: the mean of paired differences (pass k of every run replays the
  same seeded schedule, so the log ratio of pass k to pass k removes what the
  schedule decides) with Student's t, and a variance component added where the passes
  cannot show all of the noise (``drift``), on Welch-Satterthwaite degrees of freedom.
  A pass's metric is a mean, median or percentile over hundreds of requests, close to
  normal on the log scale, and the t test reaches a small p with few pairs, which the
  signed-rank test it replaced cannot (its best one-sided p with 8 pairs is 1/256).
- ``welch_shift``: the same for two unpaired groups of passes.
- ``unpaired``: the Hodges-Lehmann shift of the current passes against the baseline
  passes, with the exact Mann-Whitney interval and p-value: for passes whose value is
  infinite (a failed request's latency), which a mean cannot take.
- ``bootstrap``: with a single pass on a side there is no spread of passes to use;
  a moving-block bootstrap over time blocks of the pass stands in, and
  understates run-to-run noise (the gate says so).

``holm`` adjusts the p-values of a test's gated metrics, so that the chance of any
false regression over all of them stays at the nominal level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from pytest_vllm_perf.metrics.passes import Floats

__all__ = [
    "CONFIDENCE",
    "Estimate",
    "block_bootstrap",
    "holm",
    "mean_shift",
    "rank_sum_null",
    "satterthwaite",
    "t_pdf",
    "t_quantile",
    "t_sf",
    "unpaired",
    "welch_shift",
]

# float arrays of pass values and their logs, as every verdict module passes them

CONFIDENCE: Final = 0.95
BOOTSTRAP: Final = 1000


@dataclass(frozen=True)
class Estimate:
    """A log-scale shift, its 95% interval and a two-sided p-value: of no shift, or with a
    margin, of no shift beyond it (:func:`unpaired`, :func:`paired`)."""

    shift: float
    low: float
    high: float
    p_value: float


@functools.lru_cache(maxsize=256)
def rank_sum_null(m: int, n: int) -> tuple[int, ...]:
    """How many orderings of ``m`` vs ``n`` values give each Mann-Whitney U = 0..m*n."""
    if m == 0 or n == 0:
        return (1,)
    with_last_m = rank_sum_null(m - 1, n)  # the largest value is one of the m: U += n
    with_last_n = rank_sum_null(m, n - 1)
    out = [0] * (m * n + 1)
    for u, count in enumerate(with_last_m):
        out[u + n] += count
    for u, count in enumerate(with_last_n):
        out[u] += count
    return tuple(out)


def _critical(counts: Sequence[int]) -> int:
    """The largest k with P(stat < k) <= (1 - CONFIDENCE) / 2: the interval's order statistic."""
    allowed = (1 - CONFIDENCE) / 2 * sum(counts)
    k, cumulative = 0, 0
    while cumulative + counts[k] <= allowed:
        cumulative += counts[k]
        k += 1
    return k


def _at_least(counts: Sequence[int], stat: float) -> float:
    """P(S >= stat) under the null counts."""
    return sum(c for s, c in enumerate(counts) if s >= stat) / sum(counts)


def _at_most(counts: Sequence[int], stat: float) -> float:
    """P(S <= stat) under the null counts."""
    return sum(c for s, c in enumerate(counts) if s <= stat) / sum(counts)


def _widen(estimate: float, low: float, high: float, p: float, margin: float) -> Estimate:
    return Estimate(estimate, low - margin, high + margin, p)


def unpaired(base: Floats, cur: Floats, margin: float = 0.0) -> Estimate:
    """Hodges-Lehmann shift ``cur - base``, exact Mann-Whitney 95% interval and p-value.

    The interval is the k-th smallest and k-th largest of the m*n pairwise
    differences, k from the Mann-Whitney null distribution, so its coverage is at
    least 95% whatever the shape of the per-pass distribution (only a shift of it
    is assumed). With too few passes (fewer than 4 per side when equal) no such k
    exists and the interval is unbounded.

    A ``margin`` (a drift that is not to count as a change) widens the interval on
    both sides, and the p-value then tests for a shift beyond it: the larger of
    "shift > margin" and "shift < -margin", doubled.
    """
    diffs = np.sort(np.subtract.outer(cur, base).ravel())
    counts = rank_sum_null(len(base), len(cur))

    def u(shift: float) -> float:  # pairs where the current, moved by ``shift``, is larger
        moved = diffs - shift
        return float(np.sum(moved > 0) + 0.5 * np.sum(moved == 0))

    p = min(1.0, 2 * min(_at_least(counts, u(margin)), _at_most(counts, u(-margin))))
    k = _critical(counts)
    estimate = float(np.median(diffs))
    if k == 0:
        return _widen(estimate, -math.inf, math.inf, p, margin)
    return _widen(estimate, float(diffs[k - 1]), float(diffs[len(diffs) - k]), p, margin)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    out = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            out *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return out


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )  # fmt: skip
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1 - math.exp(log_front) * _beta_fraction(b, a, 1 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T >= t) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1 - tail


def t_pdf(t: float, df: float) -> float:
    """The density of Student's t with ``df`` degrees of freedom at ``t``."""
    log_front = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_front - (df + 1) / 2 * math.log1p(t * t / df))


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t: Newton's steps on :func:`t_sf`, kept inside a
    bracket that each step narrows (bisection where a step would leave it). A fixed 200
    bisections took 88% of the verdicts' time in the noise simulation (every A/B look
    and power note asks for its own level): 5-8 steps reach the same quantile to 1e-12."""
    if not 0 < q < 1:
        raise ValueError(f"a quantile needs 0 < q < 1, got {q}")
    if q < 0.5:
        return -t_quantile(1 - q, df)
    tail = 1 - q  # t_sf(x) = tail, t_sf falling in x
    low, high = 0.0, 1.0
    while t_sf(high, df) > tail:
        low, high = high, high * 2
    x = (low + high) / 2
    for _ in range(200):
        excess = t_sf(x, df) - tail
        if excess == 0:
            return x
        if excess > 0:
            low = x
        else:
            high = x
        step = x + excess / t_pdf(x, df)  # d t_sf / dx = -pdf
        following = step if low < step < high else (low + high) / 2
        if abs(following - x) <= 1e-14 * max(1.0, x) or high - low <= 1e-14 * max(1.0, x):
            return following
        x = following
    return x


@dataclass(frozen=True)
class MeanShift:
    """The mean of log differences with its standard error and degrees of freedom
    (Student's t; Welch-Satterthwaite where a variance component is added)."""

    mean: float
    se: float
    df: float

    def p_above(self, margin: float) -> float:
        """One-sided p of "the mean shift is at most ``margin``"."""
        if self.se == 0:
            return 0.0 if self.mean > margin else 1.0
        return t_sf((self.mean - margin) / self.se, self.df)

    def p_below(self, margin: float) -> float:
        """One-sided p of "the mean shift is at least ``margin``"."""
        if self.se == 0:
            return 0.0 if self.mean < margin else 1.0
        return t_sf((margin - self.mean) / self.se, self.df)

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        return self.bounds(1 - (1 - confidence) / 2)

    def bounds(self, q: float) -> tuple[float, float]:
        """The mean -/+ the ``q`` quantile of t times the standard error."""
        half = t_quantile(q, self.df) * self.se if self.se else 0.0
        return self.mean - half, self.mean + half


def satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """The degrees of freedom of a sum of variances, each ``(variance, its df)``."""
    total = sum(v for v, _ in parts)
    spread = sum(v * v / df for v, df in parts if v > 0 and math.isfinite(df))
    return total * total / spread if spread > 0 else math.inf


def mean_shift(diffs: Floats, extra: float = 0.0, extra_df: float = math.inf) -> MeanShift:
    """Student's t for the mean of paired ``diffs`` (two or more), with a variance
    component ``extra`` (known to ``extra_df`` degrees of freedom) added to the mean's."""
    n = len(diffs)
    if n < 2:
        raise ValueError("a t interval needs two or more differences")
    own = float(np.var(diffs, ddof=1)) / n
    df = satterthwaite([(own, n - 1), (extra, extra_df)])
    return MeanShift(float(np.mean(diffs)), math.sqrt(own + extra), min(df, 1e6))


def welch_shift(
    base: Floats, cur: Floats, extra: float = 0.0, extra_df: float = math.inf
) -> MeanShift:
    """Welch's t for the difference of the means of two unpaired groups of log values
    (two or more each), with a variance component ``extra`` as in :func:`mean_shift`."""
    if min(len(base), len(cur)) < 2:
        raise ValueError("Welch's t needs two or more values a side")
    vb, vc = (float(np.var(x, ddof=1)) / len(x) for x in (base, cur))
    df = satterthwaite([(vb, len(base) - 1), (vc, len(cur) - 1), (extra, extra_df)])
    shift = float(np.mean(cur) - np.mean(base))
    return MeanShift(shift, math.sqrt(vb + vc + extra), min(df, 1e6))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values: reject where adjusted p < alpha to control family-wise error."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    adjusted = [math.nan] * m
    running = 0.0
    for rank, i in enumerate(order):
        p = p_values[i]
        if math.isnan(p):
            continue
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


Statistic = Callable[[Any, float], float]
# a time block: (its records, or an array of their samples; its seconds)
Block = tuple[Any, float]


def block_bootstrap(
    base_blocks: Sequence[Block],
    cur_blocks: Sequence[Block],
    statistic: Statistic,
    seed: int = 0,
    bound: float = 1.0,
) -> tuple[float, float, float, float]:
    """Ratio current / baseline of ``statistic`` over resampled time blocks, and its interval.

    Each block is (records, seconds), or (an array of samples, seconds), which are
    concatenated rather than listed. A replicate draws as many blocks as there are,
    with replacement, on each side. Returns (point ratio of all blocks, low, high, p),
    p being twice the share of replicates on the near side of ``bound`` or of
    1 / ``bound`` (a change beyond a tolerance: ``bound`` = 1 + tolerance), at least
    1/BOOTSTRAP; infinite ratios (failures) stay infinite.
    """
    rng = np.random.default_rng(seed)

    def value(blocks: Sequence[Block]) -> float:
        payloads = [b[0] for b in blocks]
        joined: Any
        if payloads and all(isinstance(x, np.ndarray) for x in payloads):
            joined = np.concatenate(payloads)
        else:
            joined = [r for x in payloads for r in x]
        return statistic(joined, sum(b[1] for b in blocks))

    def ratio(b: float, c: float) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.divide(c, b))

    ratios = np.empty(BOOTSTRAP)
    for i in range(BOOTSTRAP):
        b = [base_blocks[j] for j in rng.integers(0, len(base_blocks), len(base_blocks))]
        c = [cur_blocks[j] for j in rng.integers(0, len(cur_blocks), len(cur_blocks))]
        ratios[i] = ratio(value(b), value(c))
    known = np.sort(ratios[~np.isnan(ratios)])
    point = ratio(value(base_blocks), value(cur_blocks))
    if not len(known):
        return point, math.nan, math.nan, math.nan
    alpha = (1 - CONFIDENCE) / 2
    at = np.array([alpha, 1 - alpha]) * (len(known) - 1)
    low, high = known[np.floor(at).astype(int)], known[np.ceil(at).astype(int)]
    far = min(np.mean(known <= bound), np.mean(known >= 1 / bound))
    p = min(1.0, max(2 * float(far), 1 / BOOTSTRAP))
    return point, float(low[0]), float(high[1]), p
