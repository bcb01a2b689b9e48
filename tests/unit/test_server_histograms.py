"""The engine's own latency histograms: read at pass boundaries, turned into per-pass
means, compared beside the client's figures only where every pass measured them."""

from __future__ import annotations

import math

import pytest

from pytest_vllm_perf.core.records import PassRecord, RequestRecord
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import boundary, scrape
from pytest_vllm_perf.metrics import compute
from pytest_vllm_perf.verdict import gate

# vLLM 0.32's exposition of two of its histograms, one engine, buckets abridged
EXPOSITION = """# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 40.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 90.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 90.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 1.8
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.5
"""
LOAD = Workload("w", (RequestClass("chat", 8, 10, users=2),))


def _record() -> RequestRecord:
    return RequestRecord("chat", 0.0, 0.05, (0.02,) * 9, 0.23, 8, 10, 10)


def test_a_pass_keeps_each_histograms_sum_and_count_deltas():
    before = scrape.parse(EXPOSITION, scrape.WANTED)
    after = scrape.parse(
        EXPOSITION.replace("90.0\nvllm:inter_token_latency_seconds_sum", "180.0\n"
                           "vllm:inter_token_latency_seconds_sum")
        .replace("} 1.8", "} 4.5"),
        scrape.WANTED,
    )  # fmt: skip
    deltas = boundary.counter_deltas(before, after)
    assert deltas["server_itl_count"] == 90.0
    assert deltas["server_itl_sum"] == pytest.approx(2.7)
    assert deltas["server_ttft_count"] == 0.0
    # bucket lines are not counters; a histogram the server lacks is absent, not NaN
    assert not any("bucket" in name for name in before)
    assert "server_tpot_sum" not in deltas and "server_queue_count" not in deltas


def test_before_v0_11_inter_token_latency_had_the_old_name():
    old = EXPOSITION.replace("inter_token_latency", "time_per_output_token")
    values = scrape.parse(old, scrape.WANTED)
    assert boundary.counter_deltas(values, values)["server_itl_count"] == 0.0


def test_a_pass_mean_is_the_delta_sum_over_the_delta_count_in_ms():
    p = PassRecord((_record(),), 5.0, counters={"server_itl_sum": 2.7, "server_itl_count": 90.0})
    m = compute.pass_metrics(LOAD, p)
    assert m["server_itl_mean_ms"] == pytest.approx(30.0)
    assert "server_ttft_mean_ms" not in m  # not exported: absent
    # nothing observed in the pass, or a read that failed: NaN, never a figure
    empty = PassRecord((_record(),), 5.0, counters={"server_itl_sum": 0.0, "server_itl_count": 0.0})
    assert math.isnan(compute.pass_metrics(LOAD, empty)["server_itl_mean_ms"])
    failed = PassRecord((_record(),), 5.0, counters={"server_itl_sum": 1.0,
                                                     "server_itl_count": math.nan})  # fmt: skip
    assert math.isnan(compute.pass_metrics(LOAD, failed)["server_itl_mean_ms"])


def test_a_runs_mean_pools_its_passes_sums_and_counts():
    a = PassRecord((_record(),), 5.0, counters={"server_tpot_sum": 0.2, "server_tpot_count": 10.0})
    b = PassRecord((_record(),), 5.0, counters={"server_tpot_sum": 0.6, "server_tpot_count": 10.0})
    bare = PassRecord((_record(),), 5.0)

    def pooled(*passes: PassRecord) -> dict[str, float]:
        per_pass = [compute.pass_metrics(LOAD, p) for p in passes]
        return compute.measure_metrics(LOAD, passes, {}, per_pass)

    assert pooled(a, b)["server_tpot_mean_ms"] == pytest.approx(40.0)
    assert "server_tpot_mean_ms" not in pooled(a, bare)


def test_server_means_are_compared_only_where_every_pass_of_both_sides_measured_them():
    measured = {"server_itl_mean_ms": 5.0, "server_tpot_mean_ms": 6.0}
    lacking = {"server_itl_mean_ms": 5.0}
    keys = gate.compared_metrics(("itl_p50_ms",), [measured, measured], [measured])
    assert keys[0] == "itl_p50_ms"
    assert {"server_itl_mean_ms", "server_tpot_mean_ms"} <= set(keys)
    keys = gate.compared_metrics(("itl_p50_ms",), [measured], [measured, lacking])
    assert "server_itl_mean_ms" in keys and "server_tpot_mean_ms" not in keys
    assert not {"server_itl_mean_ms", "server_ttft_mean_ms"} & set(gate.compared_metrics(()))
