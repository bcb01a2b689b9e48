from __future__ import annotations

import math

import pytest

from pytest_vllm_perf.report import text as report
from pytest_vllm_perf.verdict import thresholds


def test_upper_and_lower_bounds():
    metrics = {"ttft_p99_ms": 120.0, "preemptions": 3.0, "chat.itl_p99_ms": 40.0}
    checks = thresholds.check(
        metrics, {"ttft_p99_ms": 100, "min_preemptions": 1, "chat.itl_p99_ms": 50}
    )
    by_key = {c.key: c.passed for c in checks}
    assert by_key == {"ttft_p99_ms": False, "min_preemptions": True, "chat.itl_p99_ms": True}


def test_missing_or_infinite_values_fail():
    checks = thresholds.check({"ttft_p99_ms": math.inf}, {"ttft_p99_ms": 1e9, "itl_p99_ms": 5})
    assert [c.passed for c in checks] == [False, False]
    assert "missing" in report.describe_check(checks[0])


def test_unknown_metric_is_rejected():
    with pytest.raises(ValueError, match="unknown threshold 'ttft_p98_ms'"):
        thresholds.validate({"ttft_p98_ms": 1})
    with pytest.raises(ValueError, match=r"chat\.preemptions"):
        thresholds.validate({"chat.preemptions": 1})


def test_failure_message_lists_every_check():
    checks = thresholds.check(
        {"ttft_p99_ms": 120.0, "failed": 0.0}, {"ttft_p99_ms": 100, "failed": 0}
    )
    text = report.threshold_message(checks)
    assert text.splitlines() == [
        "1 of 2 vLLM perf thresholds failed:",
        "  ok   failed: 0 (limit <= 0)",
        "  FAIL ttft_p99_ms: 120 (limit <= 100)",
    ]
