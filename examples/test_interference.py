"""Prefill/decode interference: long prompts arrive while chat users stream tokens."""

import pytest


@pytest.mark.vllm_perf(
    workload="interference",
    duration_s=20,
    thresholds={"chat.ttft_p99_ms": 10_000, "chat.itl_p99_ms": 5_000},
)
def test_interference(vllm_perf):
    outcome = vllm_perf.run()
    metrics = outcome.result.metrics
    # Both request classes really ran, and every chat stream produced its tokens.
    assert metrics["long.completed"] >= 1
    assert metrics["chat.completed"] >= 4
    assert metrics["chat.itl_max_ms"] >= metrics["chat.itl_p50_ms"]
