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


def test_paired_coverage_is_at_least_95_percent():
    rng = np.random.default_rng(7)
    misses = 0
    for _ in range(400):
        est = intervals.paired(rng.normal(0.3, 1.0, 8))
        misses += not (est.low <= 0.3 <= est.high)
    assert misses / 400 <= 0.05 + 0.03  # 95% nominal, binomial slack for 400 draws


def test_holm():
    assert intervals.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert intervals.holm([0.5]) == [0.5]
    adjusted = intervals.holm([math.nan, 0.01])
    assert math.isnan(adjusted[0]) and adjusted[1] == pytest.approx(0.02)
