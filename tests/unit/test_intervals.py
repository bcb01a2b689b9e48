"""Exact rank-based intervals and p-values, and Holm's correction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_vllm_perf.verdict import intervals


def test_null_distributions():
    assert intervals.rank_sum_null(2, 2) == (1, 1, 2, 1, 1)
    assert sum(intervals.rank_sum_null(5, 5)) == math.comb(10, 5)
    assert intervals.signed_rank_null(3) == (1, 1, 1, 2, 1, 1, 1)
    assert sum(intervals.signed_rank_null(8)) == 2**8


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
    assert not intervals.can_be_significant(3, 3)
    assert intervals.can_be_significant(4, 4) and intervals.can_be_significant(3, 5)


def test_margin_widens_and_tests_beyond_it():
    b = np.log(np.array([10.0, 10.2, 10.4, 10.6, 10.8, 11.0]))
    c = b + math.log(1.1)
    plain = intervals.unpaired(b, c)
    wide = intervals.unpaired(b, c, margin=math.log(1.2))
    assert wide.low == pytest.approx(plain.low - math.log(1.2))
    assert plain.p_value < 0.05 and wide.p_value == 1.0  # a 10% shift is inside a 20% drift


def test_paired_interval_needs_six_pairs():
    diffs = np.log(np.array([1.2, 1.21, 1.19, 1.22, 1.18, 1.2]))
    est = intervals.paired(diffs)
    assert math.exp(est.shift) == pytest.approx(1.2, rel=0.01)
    assert est.low > 0 and est.p_value == pytest.approx(2 / 2**6)
    five = intervals.paired(diffs[:5])
    assert (five.low, five.high) == (-math.inf, math.inf)
    noise = intervals.paired(np.array([0.1, -0.1, 0.05, -0.05, 0.02, -0.02]))
    assert noise.low < 0 < noise.high and noise.p_value > 0.5


def test_paired_coverage_is_what_its_null_distribution_says():
    rng = np.random.default_rng(7)
    draws, misses = 2000, 0
    for _ in range(draws):
        est = intervals.paired(rng.normal(0.3, 1.0, 8))
        misses += not (est.low <= 0.3 <= est.high)
    counts = intervals.signed_rank_null(8)
    expected = 2 * sum(counts[: _order_statistic(counts)]) / 2**8  # 0.039
    slack = 3 * math.sqrt(expected * (1 - expected) / draws)  # 3 binomial SEs: 0.013
    assert misses / draws <= expected + slack


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


@pytest.mark.parametrize("n", [6, 8, 10])
def test_paired_interval_is_the_kth_walsh_average_from_each_end(n):
    """The exact signed-rank interval: one Walsh average narrower covered 0.939 where it
    should cover 0.959 (8 pairs), inside the coverage test's slack."""
    rng = np.random.default_rng(n)
    diffs = rng.normal(size=n)
    counts = intervals.signed_rank_null(n)
    k = _order_statistic(counts)
    i, j = np.triu_indices(n)
    walsh = np.sort((diffs[i] + diffs[j]) / 2)
    est = intervals.paired(diffs)
    assert (est.low, est.high) == (walsh[k - 1], walsh[len(walsh) - k])
    covered = 1 - 2 * sum(counts[:k]) / sum(counts)
    narrower = 1 - 2 * sum(counts[: k + 1]) / sum(counts)
    assert covered >= 0.95 > narrower
