"""KV-cache pressure: the same load preempts on a small KV cache and not on a roomy one."""

import pytest

LOAD = {"duration_s": 6, "seq": {"users": 8, "prompt_tokens": 256, "output_tokens": 128}}


@pytest.mark.vllm_perf(
    workload="kv_pressure", profile="small-kv", thresholds={"min_preemptions": 1}
)
def test_small_kv_cache_preempts(vllm_perf):
    outcome = vllm_perf.run(**LOAD)
    assert outcome.result.metrics["kv_cache_usage_peak"] > 0.5


@pytest.mark.vllm_perf(workload="kv_pressure", profile="roomy-kv", thresholds={"preemptions": 0})
def test_roomy_kv_cache_does_not_preempt(vllm_perf):
    vllm_perf.run(**LOAD)
