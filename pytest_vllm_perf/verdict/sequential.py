"""The A/B decision: a one-sided test against an indifference margin, decided in looks.

A tolerance is the smallest change that matters. The rule it replaces called a change
``regressed`` only when it was significantly *beyond* the tolerance, so a change of
exactly the tolerance failed at most 2.5% of the time: on an H200 a decode step
5.6% slower read ITL p50 x1.056 (95% CI x1.043..x1.061) and passed as
``inconclusive``. Here, for the paired passes of an A/B run:

- **Regressed** when the change is significantly worse than the *indifference
  margin*, a quarter of the tolerance (x1.0125 at 5%), one-sided: an improvement
  never fails. The margin absorbs the steady offset two resident servers show in an
  A/A (ITL p50 x0.995-x0.996 over 8 pairs in both of the H200's resident A/A tests,
  bench/results/h200/ab-modes-aa/resident/ab.json), so that an A/A is not a regression
  however many pairs measure it. A true x1.0 (or any change up to the margin) fails
  with probability at most ``alpha`` over all of a test's gated metrics and looks.
- **Unchanged** when a change of the tolerance or more is ruled out at one-sided 1%
  (``decide.FUTILITY``; the upper bound of a one-sided interval lies below 1 +
  tolerance): a missed regression, not a false alarm, so it spends none of ``alpha``.
- **Improved** mirrors regressed; otherwise **inconclusive**.
- **Looks.** The first look comes after ``first`` pairs (``--vllm-repeat``). While a
  gated metric is inconclusive, ``step`` more pairs are run, up to ``most``
  (``--vllm-ab-max-pairs``); a metric that regressed at a look stays regressed, and
  the looks go on for the others, so that a failed test names each metric that moved
  (on the H200 a 34-layer plant failed on ITL p50 at the first look with TPOT and
  throughput still open, bench/results/h200/plant/l34.log). Each look spends its share of ``alpha``,
  ``alpha * (pairs added) / most``, and Holm's correction runs over the test's gated
  metrics inside a look: by the union bound the chance of any false regression over
  all metrics and looks stays at most ``alpha``. Spending by pairs leaves most of it
  to the later, larger looks, where the pairs that need it are.
- **The test.** For a metric that is a mean, a median or a rate over a pass's many
  requests (``CENTRAL``), Student's t on the log ratios of pass k to pass k; for a
  tail (p99, max) or a count, the exact signed-rank test, which assumes no shape but
  cannot reach a small p with few pairs (its best one-sided p over 8 pairs is 1/256).

Whether a change of the tolerance is then caught depends on the noise: with sd ``s``
of a pair's log ratio it needs about ((t_alpha + t_0.1) s / (log(1 + tol) - margin))^2
pairs for 90% (``pairs_for``). bench/operating_characteristic.py tables the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from pytest_vllm_perf.verdict import intervals

__all__ = [
    "CALL_SHARE",
    "CENTRAL",
    "DEFAULT_ALPHA",
    "DEFAULT_MOST",
    "SPENDING",
    "Design",
    "Look",
    "pairs_for",
]

DEFAULT_ALPHA: Final = 0.01
DEFAULT_INDIFFERENCE: Final = 0.25
DEFAULT_MOST: Final = 20
# The share of a test's false-alarm budget its first vllm_perf call spends (each later
# call, the same share of what is left): a test that called twice once had two chances
# of a false alarm. At 0.9 of 1%, a x1.05 change of interference's long TTFT p50 was
# still caught 91.8% of 2000 times (bench/scenarios.py).
CALL_SHARE: Final = 0.9
SPENDING: Final = 3.0  # alpha spent by a look: alpha * (pairs / most) ** SPENDING
# pass statistics that average over many requests, close to normal across passes
CENTRAL: Final = frozenset({"mean", "p50", "rate"})


@dataclass(frozen=True)
class Look:
    """One look of a sequential A/B: which, of how many, and the level it may spend."""

    number: int
    of: int
    pairs: int
    level: float
    indifference: float = DEFAULT_INDIFFERENCE

    @property
    def last(self) -> bool:
        return self.number == self.of

    def describe(self) -> str:
        if self.of == 1:
            return f"level {self.level:.3g}"
        return f"look {self.number} of {self.of}, level {self.level:.3g}"


@dataclass(frozen=True)
class Design:
    """A sequential A/B design: the first look, the step, the budget and the error rate."""

    first: int = 8
    most: int = DEFAULT_MOST
    step: int = 4
    alpha: float = DEFAULT_ALPHA
    indifference: float = DEFAULT_INDIFFERENCE

    def __post_init__(self) -> None:
        if not (self.first >= 2 and self.step >= 1 and 0 < self.alpha < 1):
            raise ValueError(f"a sequential design needs first >= 2, step >= 1: {self}")

    def pair_counts(self) -> tuple[int, ...]:
        """The pairs measured at each look: ``first``, then ``step`` more, up to ``most``."""
        counts = [self.first]
        while counts[-1] < self.most:
            counts.append(min(self.most, counts[-1] + self.step))
        return tuple(counts)

    def looks(self) -> tuple[Look, ...]:
        counts = self.pair_counts()
        total = counts[-1]
        out, spent = [], 0.0
        for i, n in enumerate(counts):
            by_now = self.alpha * (n / total) ** SPENDING
            out.append(Look(i + 1, len(counts), n, by_now - spent, self.indifference))
            spent = by_now
        return tuple(out)


def pairs_for(sd: float, tolerance: float, level: float, power: float = 0.9,
              indifference: float = DEFAULT_INDIFFERENCE) -> int:  # fmt: skip
    """The fewest pairs with which a t test at one-sided ``level`` catches a change of
    ``tolerance`` with probability about ``power``, for pair log-ratio sd ``sd``: the
    smallest n with (t_{1-level} + t_power) sd / sqrt(n) <= the gap from the margin to
    the tolerance, t on n - 1 degrees of freedom (the left side falls as n grows)."""
    gap = math.log1p(tolerance) - math.log1p(indifference * tolerance)
    if not gap > 0:
        raise ValueError(f"no pairs catch a change of {tolerance:.3g} with a margin of it all")
    n = 2
    while n < 100_000:
        df = n - 1
        critical = intervals.t_quantile(1 - level, df) + intervals.t_quantile(power, df)
        if critical * sd <= gap * math.sqrt(n):
            return n
        n += 1
    return n
