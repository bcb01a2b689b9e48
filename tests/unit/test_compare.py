from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pytest_vllm_perf import compare
from pytest_vllm_perf.records import Repetition, RequestRecord


def run(scale: float, seed: int, n: int = 120) -> list[RequestRecord]:
    rng = random.Random(seed)
    return [
        RequestRecord(
            "c",
            i * 0.1,
            0.1 * scale * rng.uniform(0.8, 1.5),
            tuple(0.01 * scale * rng.uniform(0.5, 2) for _ in range(31)),
            0.5 * scale * rng.uniform(0.9, 1.1),
            16,
            32,
            32,
        )
        for i in range(n)
    ]


def one_pass(records: list[RequestRecord]) -> list[Repetition]:
    return [Repetition(tuple(records), 12.0)]


def verdicts(a, b):
    return {v.metric: v.verdict for v in compare.compare_runs(one_pass(a), one_pass(b), {})}


def passes(levels: list[float], seed: int) -> list[Repetition]:
    """Passes whose whole level differs, as whole runs on a shared machine drift."""
    return [Repetition(tuple(run(level, seed + i)), 12.0) for i, level in enumerate(levels)]


def test_same_distribution_is_not_a_regression():
    result = verdicts(run(1.0, 0), run(1.0, 1))
    assert compare.REGRESSED not in result.values()
    assert result["itl_p50_ms"] == compare.UNCHANGED


def test_clear_slowdown_regresses_and_speedup_improves():
    slower = verdicts(run(1.0, 0), run(1.5, 1))
    assert slower["itl_p50_ms"] == slower["tpot_mean_ms"] == compare.REGRESSED
    faster = verdicts(run(1.5, 0), run(1.0, 1))
    assert faster["itl_p50_ms"] == compare.IMPROVED


def test_small_significant_change_below_tolerance_is_not_regressed():
    result = verdicts(run(1.0, 0), run(1.05, 0))
    assert result["itl_p99_ms"] != compare.REGRESSED


def test_classify_rules():
    assert compare.classify(1.3, 1.2, 1.4, 0.1, False) == compare.REGRESSED
    assert compare.classify(1.3, 0.9, 1.7, 0.1, False) == compare.INCONCLUSIVE
    assert compare.classify(1.02, 0.98, 1.05, 0.1, False) == compare.UNCHANGED
    # throughput: a drop is the regression
    assert compare.classify(0.7, 0.6, 0.8, 0.1, True) == compare.REGRESSED


def test_preemption_count_rule():
    assert compare.compare_count("preemptions", 0, 5, 0.5).verdict == compare.REGRESSED
    assert compare.compare_count("preemptions", 10, 12, 0.5).verdict == compare.UNCHANGED
    assert compare.compare_count("preemptions", 20, 2, 0.5).verdict == compare.IMPROVED


def test_rank_sum_null_counts_every_ordering():
    assert compare.rank_sum_null(2, 2) == (1, 1, 2, 1, 1)
    assert sum(compare.rank_sum_null(5, 5)) == math.comb(10, 5)


def test_shift_interval_is_exact_for_few_passes():
    low_b, high_c = np.log([1.0, 1.1, 0.9, 1.05]), np.log([2.0, 2.1, 1.9, 2.2])
    est, low, high = compare.shift_interval(low_b, high_c)
    # 4 vs 4: only "every current pass beyond every baseline pass" is significant,
    # so the interval runs from the smallest to the largest pairwise difference.
    assert (low, high) == pytest.approx((np.log(1.9 / 1.1), np.log(2.2 / 0.9)))
    assert low < est < high
    # 3 vs 3 can never reach 95%: the interval is unbounded, never a false verdict.
    assert compare.shift_interval(low_b[:3], high_c[:3])[1:] == (-math.inf, math.inf)
    assert not compare.can_be_significant(3, 3)
    assert compare.can_be_significant(4, 4) and compare.can_be_significant(3, 5)


def test_one_hiccup_pass_does_not_hide_a_consistent_slowdown():
    base = passes([1.0, 1.03, 0.97, 1.01, 0.99, 1.02, 0.98, 2.5], 0)  # one machine stall
    cur = passes([1.3, 1.33, 1.28, 1.35, 1.31, 1.29, 1.34, 1.32], 10)
    found = {v.metric: v for v in compare.compare_runs(base, cur, {})}
    assert found["itl_p50_ms"].verdict == compare.REGRESSED
    # A t interval on the same values is swamped by the outlier: t(7) = 2.36.
    lb = np.log([1.0, 1.03, 0.97, 1.01, 0.99, 1.02, 0.98, 2.5])
    lc = np.log([1.3, 1.33, 1.28, 1.35, 1.31, 1.29, 1.34, 1.32])
    se = np.sqrt(lb.var(ddof=1) / 8 + lc.var(ddof=1) / 8)
    assert lc.mean() - lb.mean() < 2.36 * se


def test_drift_between_passes_widens_the_interval_that_one_pass_cannot_see():
    # Each pass as a whole is 20% faster or slower than the others, as on a shared CPU.
    base, cur = passes([0.8, 1.2, 0.9, 1.1], 0), passes([1.15, 0.85, 1.25, 0.95], 10)
    by_pass = {v.metric: v for v in compare.compare_runs(base, cur, {})}
    assert by_pass["itl_p50_ms"].basis == "4 vs 4 passes"
    assert by_pass["itl_p50_ms"].low < 1 < by_pass["itl_p50_ms"].high
    assert compare.REGRESSED not in {v.verdict for v in by_pass.values()}
    # The same data judged on one pass per side calls noise a regression.
    single = verdicts(list(base[0].records), list(cur[0].records))
    assert single["itl_p50_ms"] == compare.REGRESSED


def test_consistent_slowdown_across_passes_regresses():
    base, cur = passes([1.0, 1.05, 0.95, 1.02], 0), passes([1.3, 1.35, 1.28, 1.32], 10)
    found = {v.metric: v for v in compare.compare_runs(base, cur, {})}
    assert found["itl_p99_ms"].verdict == compare.REGRESSED
    assert found["tpot_mean_ms"].verdict == compare.REGRESSED
    assert found["itl_p99_ms"].low > 1


def test_failures_fall_back_to_blocks_and_still_regress():
    base = passes([1.0, 1.0], 0)
    broken = [RequestRecord("c", 1.2 * i, None, (), 5.0, 16, 0, 32, "timeout") for i in range(10)]
    cur = [Repetition(rep.records + tuple(broken), 12.0) for rep in passes([1.0, 1.0], 5)]
    found = {v.metric: v for v in compare.compare_runs(base, cur, {})}
    assert math.isinf(found["ttft_p99_ms"].current)
    assert found["ttft_p99_ms"].basis == compare.BLOCKS
    assert found["ttft_p99_ms"].verdict == compare.REGRESSED
