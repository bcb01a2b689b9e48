from __future__ import annotations

from pytest_vllm_perf.core.records import GaugeReading
from pytest_vllm_perf.load import scrape as metrics

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


def test_parse_keeps_only_wanted_names():
    values = metrics.parse(TEXT, metrics.WANTED)
    assert values == {
        "vllm:num_preemptions_total": 5.0,
        "vllm:kv_cache_usage_perc": 0.5,
        "vllm:num_requests_waiting": 4.0,
    }
    assert metrics.parse(TEXT, ("vllm:num_requests_waiting",)) == {"vllm:num_requests_waiting": 4.0}


def test_gauge_peaks():
    readings = [
        GaugeReading(0.5, 0.2, 1.0),
        GaugeReading(1.0, 0.9, 0.0),
        GaugeReading(1.5, None, None),
    ]
    assert metrics.gauge_peaks(readings) == {
        "kv_cache_usage_peak": 0.9,
        "num_requests_waiting_peak": 1.0,
    }


def test_sampler_reads_in_its_own_thread(fake_vllm):
    import time

    with metrics.GaugeSampler(fake_vllm.url, time.perf_counter(), interval_s=0.05) as sampler:
        time.sleep(0.3)
    assert len(sampler.readings) >= 2
    assert sampler.readings[0].kv_cache_usage == 0.25
    assert metrics.first(metrics.scrape(fake_vllm.url), metrics.PREEMPTIONS) == 0.0
