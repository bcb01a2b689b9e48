from __future__ import annotations

import math

import pytest

from pytest_vllm_perf.core.records import RequestRecord
from pytest_vllm_perf.metrics import compute


def record(ttft=0.1, itl=(0.01, 0.03), e2el=0.2, tokens=3, expected=3, error=None, cls="chat"):
    return RequestRecord(cls, 0.0, ttft, tuple(itl), e2el, 10, tokens, expected, error)


def test_percentile_matches_numpy_linear_definition():
    assert compute.percentile([1, 2, 3, 4], 50) == 2.5
    assert compute.percentile([10.0], 99) == 10.0
    assert math.isnan(compute.percentile([], 50))


def test_infinite_samples_stay_infinite():
    values = [1.0] * 98 + [math.inf, math.inf]
    assert compute.percentile(values, 99) == math.inf
    assert compute.percentile(values, 50) == 1.0


def test_percentile_at_a_whole_index_is_that_value_even_beside_infinity():
    """numpy's a + 0 * (inf - a) is NaN; the median of [1, 2, inf] is 2, not inf."""
    assert compute.percentile([1.0, 2.0, math.inf], 50) == 2.0
    assert compute.percentile([1.0, 2.0, math.inf], 100) == math.inf
    assert compute.percentile([1.0, 2.0, math.inf], 75) == math.inf  # interpolates towards inf
    assert compute.percentile([3.0, 1.0, 2.0], 25) == 1.5


def test_tpot_definition():
    r = record(ttft=0.1, e2el=0.5, tokens=5, expected=5)
    assert r.tpot == pytest.approx(0.1)
    assert record(tokens=1, expected=1).tpot is None


def test_failed_requests_count_and_are_not_dropped():
    ok = [record() for _ in range(9)]
    broken = record(ttft=None, itl=(), e2el=5.0, tokens=0, error="HTTP 500")
    summary = compute.summarize([*ok, broken], duration_s=10)
    assert summary["completed"] == 9
    assert summary["failed"] == 1
    # the failed request never answered: the worst TTFT and E2EL are infinite
    assert summary["ttft_max_ms"] == math.inf
    assert summary["e2el_p99_ms"] == math.inf
    assert summary["ttft_p50_ms"] == pytest.approx(100)


def test_summary_values():
    records = [
        record(ttft=0.1 * i, itl=(0.01 * i,), e2el=0.2 * i, tokens=2, expected=2)
        for i in range(1, 5)
    ]
    s = compute.summarize(records, duration_s=2)
    assert s["ttft_mean_ms"] == pytest.approx(250)
    assert s["itl_max_ms"] == pytest.approx(40)
    assert s["output_throughput"] == pytest.approx(4)
    assert s["request_throughput"] == pytest.approx(2)


def test_summarize_covers_the_registry_and_value_agrees_with_it():
    from pytest_vllm_perf.core.registry import METRICS

    records = [
        record(ttft=0.1 * i, itl=(0.01 * i, 0.02), e2el=0.2 * i, tokens=3, expected=3)
        for i in range(1, 9)
    ] + [record(ttft=None, itl=(), e2el=1.0, tokens=0, error="HTTP 500")]
    summary = compute.summarize(records, duration_s=2)
    per_pass = {"bursty_passes"}  # a flag of a pass (pass_metrics), not of records
    assert set(summary) == {k for k, m in METRICS.items() if m.source == "request"} - per_pass
    for name, expected in summary.items():
        assert compute.value(name, records, 2) == pytest.approx(expected, nan_ok=True), name


def test_a_class_that_streamed_in_bursts_has_no_per_chunk_metrics_in_that_pass():
    """A starved API server sends queued chunks together: gaps near 0 would make the
    pass look fast on ITL and TPOT, so those are left out; TTFT and throughput stay."""
    from pytest_vllm_perf.core.records import PassRecord
    from pytest_vllm_perf.core.workload import RequestClass, Workload

    load = Workload(
        "w", (RequestClass("chat", 8, 11, users=2), RequestClass("long", 64, 2, rate=1))
    )
    burst = tuple(record(ttft=0.9, itl=(0.00001,) * 10, e2el=0.9, tokens=11, expected=11)
                  for _ in range(4))  # fmt: skip
    steady = tuple(record(ttft=0.01, itl=(0.003,) * 10, e2el=0.04, tokens=11, expected=11)
                   for _ in range(4))  # fmt: skip
    long = (record(itl=(0.00001,), cls="long", tokens=2, expected=2),)
    starved = compute.pass_metrics(load, PassRecord(burst + long, 5.0))
    assert compute.bursts(load, PassRecord(burst + long, 5.0)) == {"chat": pytest.approx(0.00001)}
    for key in ("chat.itl_p99_ms", "chat.tpot_mean_ms"):
        assert math.isnan(starved[key]), key
    assert starved["chat.bursty_passes"] == 1 and starved["bursty_passes"] == 0
    # all requests: over the class that streamed normally only (finding 1)
    assert starved["itl_p50_ms"] == starved["long.itl_p50_ms"] == pytest.approx(0.01)
    assert starved["chat.ttft_p50_ms"] == pytest.approx(900)
    assert starved["chat.output_throughput"] == pytest.approx(44 / 5)
    assert not math.isnan(starved["long.itl_p50_ms"])  # one gap: too few to judge
    healthy = compute.pass_metrics(load, PassRecord(steady + long, 5.0))
    assert healthy["chat.itl_p50_ms"] == pytest.approx(3)
    assert compute.bursts(load, PassRecord(steady + long, 5.0)) == {}


def test_a_starved_stream_of_mostly_zero_gaps_and_a_few_long_ones_is_bursty():
    """A starved API server's real stream: most chunks queued together (gaps near 0),
    and a few long waits between the batches. 36 gaps of 0 and 4 of 30 ms have a mean
    of 3 ms, a median of 0: the median is what tells them apart from a steady stream
    (seen failing with the mean in its place)."""
    from pytest_vllm_perf.core.records import PassRecord
    from pytest_vllm_perf.core.workload import RequestClass, Workload

    load = Workload("w", (RequestClass("chat", 8, 41, users=1),))
    gaps = (0.0,) * 9 + (0.03,)
    starved = tuple(record(itl=gaps * 4, e2el=0.2, tokens=41, expected=41) for _ in range(2))
    assert compute.bursts(load, PassRecord(starved, 5.0)) == {"chat": 0.0}
    metrics = compute.pass_metrics(load, PassRecord(starved, 5.0))
    assert metrics["chat.bursty_passes"] == 1 and math.isnan(metrics["chat.itl_p50_ms"])
