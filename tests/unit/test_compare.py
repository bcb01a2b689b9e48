from __future__ import annotations

import random

from pytest_vllm_perf import compare
from pytest_vllm_perf.records import RequestRecord


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


def verdicts(a, b):
    return {v.metric: v.verdict for v in compare.compare_samples(a, 12, b, 12, {})}


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
