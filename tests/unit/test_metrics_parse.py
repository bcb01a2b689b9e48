from __future__ import annotations

from pytest_vllm_perf import metrics

TEXT = """# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
vllm:num_preemptions_total{engine="1",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
"""


def test_parse_sums_label_sets():
    values = metrics.parse(TEXT)
    assert values["vllm:num_preemptions_total"] == 5.0
    assert metrics.first(values, metrics.KV_USAGE) == 0.5


def test_counters_are_deltas_and_peaks():
    timeline = metrics.MetricsTimeline(
        before={"vllm:num_preemptions_total": 5.0}, after={"vllm:num_preemptions_total": 9.0}
    )
    timeline.samples += [metrics.Sample(0.5, 0.2, 1.0, 3.0), metrics.Sample(1.0, 0.9, 0.0, 4.0)]
    assert timeline.counters() == {
        "preemptions": 4.0,
        "kv_cache_usage_peak": 0.9,
        "num_requests_waiting_peak": 1.0,
    }
