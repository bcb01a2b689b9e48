"""Intervals and p-values: Student's t with a variance component, the exact rank-based
unpaired test, and Holm's correction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_vllm_perf.verdict import intervals


def test_null_distributions():
    assert intervals.rank_sum_null(2, 2) == (1, 1, 2, 1, 1)
    assert sum(intervals.rank_sum_null(5, 5)) == math.comb(10, 5)


def test_unpaired_interval_and_p():
    low_b = np.log(np.array([10.0, 10.5, 11.0, 11.5, 12.0]))
    high_c = low_b + math.log(1.5)
    est = intervals.unpaired(low_b, high_c)
    assert math.exp(est.shift) == pytest.approx(1.5)
    assert est.low > 0 and est.high > est.low
    assert est.p_value == pytest.approx(2 / math.comb(10, 5))  # all current above all baseline
    same = intervals.unpaired(low_b, low_b)
    assert same.p_value == 1.0 and same.low < 0 < same.high
    too_few = intervals.unpaired(low_b[:3], high_c[:3])
    assert (too_few.low, too_few.high) == (-math.inf, math.inf)


def test_margin_widens_and_tests_beyond_it():
    b = np.log(np.array([10.0, 10.2, 10.4, 10.6, 10.8, 11.0]))
    c = b + math.log(1.1)
    plain = intervals.unpaired(b, c)
    wide = intervals.unpaired(b, c, margin=math.log(1.2))
    assert wide.low == pytest.approx(plain.low - math.log(1.2))
    assert plain.p_value < 0.05 and wide.p_value == 1.0  # a 10% shift is inside a 20% drift


def test_a_variance_component_widens_the_t_interval_on_satterthwaites_df():
    diffs = np.array([0.01, 0.03, 0.02, 0.04, 0.0, 0.02, 0.03, 0.01])
    plain = intervals.mean_shift(diffs)
    own = float(np.var(diffs, ddof=1)) / 8
    assert plain.se == pytest.approx(math.sqrt(own)) and plain.df == pytest.approx(7)
    wide = intervals.mean_shift(diffs, extra=0.01**2, extra_df=20)
    assert wide.se == pytest.approx(math.sqrt(own + 1e-4))
    expected = (own + 1e-4) ** 2 / (own**2 / 7 + 1e-8 / 20)
    assert wide.df == pytest.approx(expected)
    assert wide.p_above(0.0) > plain.p_above(0.0)
    known = intervals.mean_shift(diffs, extra=1e-4)  # a component known exactly
    assert known.df > wide.df


def test_the_interval_with_a_component_covers_what_it_says():
    """Pairs of two servers whose steady offset is drawn afresh each run (sd 1%): the t
    interval of the pairs alone covers the true change far less than 95% of the time;
    with the offset as a component it covers at least that."""
    rng = np.random.default_rng(5)
    draws, alone, allowed = 2000, 0, 0
    for _ in range(draws):
        diffs = rng.normal(0, 0.01) + rng.normal(0, 0.01, 12)
        lo, hi = intervals.mean_shift(diffs).interval()
        alone += lo <= 0 <= hi
        lo, hi = intervals.mean_shift(diffs, extra=0.01**2, extra_df=math.inf).interval()
        allowed += lo <= 0 <= hi
    assert alone / draws < 0.8
    assert allowed / draws >= 0.95 - 3 * math.sqrt(0.05 * 0.95 / draws)


def test_welch_shift_is_the_difference_of_means_with_each_sides_variance():
    b, c = np.array([1.0, 1.1, 0.9, 1.0]), np.array([1.3, 1.5, 1.4, 1.2, 1.6])
    found = intervals.welch_shift(b, c)
    vb, vc = np.var(b, ddof=1) / 4, np.var(c, ddof=1) / 5
    assert found.mean == pytest.approx(np.mean(c) - np.mean(b))
    assert found.se == pytest.approx(math.sqrt(vb + vc))
    assert found.df == pytest.approx((vb + vc) ** 2 / (vb**2 / 3 + vc**2 / 4))


def test_holm():
    assert intervals.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert intervals.holm([0.5]) == [0.5]
    adjusted = intervals.holm([math.nan, 0.01])
    assert math.isnan(adjusted[0]) and adjusted[1] == pytest.approx(0.02)


def _order_statistic(counts: tuple[int, ...]) -> int:
    """The k of a 95% interval from its null counts, taken from its definition: the most
    extreme order statistic whose two tails hold at most 2.5% each."""
    below = np.cumsum(counts) / sum(counts)  # P(S <= s)
    return int(np.sum(below <= 0.025))  # P(S < k) <= 0.025 < P(S < k + 1)


@pytest.mark.parametrize("m,n", [(6, 6), (8, 8), (5, 7), (4, 4)])
def test_unpaired_interval_is_the_kth_pairwise_difference_from_each_end(m, n):
    """The exact Mann-Whitney interval: one order statistic narrower covers 0.935 where
    it should cover 0.959 (6 vs 6) and no coverage test at 400 draws tells them apart,
    so the order statistic itself is checked, and its exact coverage."""
    rng = np.random.default_rng(m * 10 + n)
    b, c = rng.normal(size=m), rng.normal(size=n)
    counts = intervals.rank_sum_null(m, n)
    k = _order_statistic(counts)
    diffs = np.sort(np.subtract.outer(c, b).ravel())
    est = intervals.unpaired(b, c)
    assert (est.low, est.high) == (diffs[k - 1], diffs[len(diffs) - k])
    covered = 1 - 2 * sum(counts[:k]) / sum(counts)
    narrower = 1 - 2 * sum(counts[: k + 1]) / sum(counts)
    assert covered >= 0.95 > narrower
