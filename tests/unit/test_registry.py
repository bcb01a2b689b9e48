"""The metric registry is the one place metric names, units and directions come from."""

from __future__ import annotations

import json
import math

import pytest

from pytest_vllm_perf.core import registry
from pytest_vllm_perf.core.errors import ThresholdError
from pytest_vllm_perf.report import sides, text


def test_every_metric_carries_its_unit_and_bench_serve_key():
    m = registry.metric("itl_p99_ms")
    assert (m.unit, m.statistic, m.field, m.bench_serve_key) == ("ms", "p99", "itl", "p99_itl_ms")
    assert registry.metric("chat.ttft_p50_ms").bench_serve_key == "median_ttft_ms"
    assert registry.metric("output_throughput").higher_is_better
    assert not registry.metric("tpot_mean_ms").higher_is_better


def test_threshold_keys():
    assert registry.threshold_target("chat.min_itl_p99_ms") == ("chat.itl_p99_ms", True)
    assert registry.threshold_target("preemptions") == ("preemptions", False)
    with pytest.raises(ThresholdError, match=r"unknown threshold 'chat\.preemptions'"):
        registry.threshold_target("chat.preemptions")  # a server metric has no class


def test_tolerances_only_for_compared_metrics():
    registry.validate_tolerances({"itl_p99_ms": 0.2, "chat.tpot_mean_ms": 0.1})
    with pytest.raises(ThresholdError, match="not a compared metric"):
        registry.validate_tolerances({"ttft_p90_ms": 0.2})
    with pytest.raises(ThresholdError, match="unknown metric 'itl_p98_ms'"):
        registry.validate_tolerances({"itl_p98_ms": 0.2})
    assert (
        registry.default_tolerances("cpu")["itl_p50_ms"]
        > registry.default_tolerances("cuda")["itl_p50_ms"]
    )


def test_reports_read_the_registry():
    keys = registry.metrics_to_report(
        {"ttft_p50_ms": 1.0, "chat.itl_p99_ms": 2.0, "completed": 3.0}
    )
    assert keys == {"median_ttft_ms": 1.0, "chat.p99_itl_ms": 2.0, "completed": 3.0}
    for key in (*text.COLUMNS, *sides.SIDE_BY_SIDE, *registry.COMPARED):
        assert key in registry.METRICS


def test_the_summary_columns_are_the_metrics_that_name_a_place_in_it():
    """A metric joins the summary table by its ``column``, one metric a place, so that a
    new column is one registry entry; the table's header and cells follow it."""
    places = [m.column for m in registry.METRICS.values() if m.column is not None]
    assert sorted(places) == list(range(len(places)))
    assert text.COLUMNS == registry.SUMMARY_COLUMNS
    assert text.COLUMNS[:3] == ("completed", "failed", "ttft_p50_ms")
    assert text.summary_headers()[2:5] == ["n", "failed", "TTFT p50"]
    assert "e2el_p99_ms" not in text.COLUMNS


def test_report_metrics_read_back_as_written():
    # what a JSON report holds (NaN as null, infinities as text) reads back to our figures
    ours = {"ttft_p50_ms": 1.5, "chat.itl_p999_ms": math.inf, "itl_p99_ms": math.nan}
    written = json.loads(json.dumps(registry.metrics_to_report(ours)))
    assert written == {"median_ttft_ms": 1.5, "chat.p99.9_itl_ms": "inf", "p99_itl_ms": None}
    back = registry.metrics_from_report({**written, "flag": True, "note": "text", "list": [1]})
    assert back.keys() == ours.keys()
    assert back["ttft_p50_ms"] == 1.5 and back["chat.itl_p999_ms"] == math.inf
    assert math.isnan(back["itl_p99_ms"])
