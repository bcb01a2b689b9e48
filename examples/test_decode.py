"""Steady streaming decode and nothing else: the steadiest figures a gate can hold.

TPOT, median ITL and output throughput move by about 1% from pass to pass on an
H200, so this is where a 10% regression of a vLLM release or a config shows first.
"""

LOAD = {
    "cpu": {"duration_s": 6, "chat": {"users": 8, "prompt_tokens": 64, "output_tokens": 64}},
    "cuda": {"duration_s": 8, "chat": {"users": 32, "prompt_tokens": 128, "output_tokens": 256}},
}
LIMITS = {
    "cpu": {"tpot_mean_ms": 5_000, "itl_p99_ms": 10_000},
    "cuda": {"tpot_mean_ms": 100, "itl_p99_ms": 250},
}


def test_decode(vllm_perf):
    platform = vllm_perf.server.platform
    outcome = vllm_perf.run("decode", thresholds=LIMITS[platform], **LOAD[platform])
    metrics = outcome.result.metrics
    assert metrics["completed"] >= 8
    # one class, closed loop: every streamed gap is a decode step (or a merged chunk)
    assert metrics["itl_p50_ms"] <= metrics["itl_p99_ms"] <= metrics["itl_max_ms"]
