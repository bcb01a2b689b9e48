"""Multi-turn conversations: the prefix cache serves each turn's history.

Each closed-loop user holds conversations of four turns; turn k sends everything said
so far plus a new message. With vLLM's automatic prefix caching (its default) the
history's full blocks come from the cache, so over half the prompt tokens are hits; the shipped
profile ``no-prefix-cache`` turns it off, and every turn prefills its whole history.
The two tests are pinned to those profiles by their markers, as the preemption pair is.
"""

import pytest

LOAD = {
    "cpu": {"duration_s": 8, "chat": {"users": 2, "prompt_tokens": 128, "output_tokens": 16}},
    "cuda": {"duration_s": 10, "chat": {"users": 16, "prompt_tokens": 512, "output_tokens": 64}},
}
# The SLO: the fourth turn of a conversation answers as promptly as the first would,
# within a second at p99 on a GPU; the CPU limits only catch a broken engine.
LIMITS = {"cpu": {"ttft_p99_ms": 30_000}, "cuda": {"ttft_p99_ms": 1_000}}


@pytest.mark.vllm_perf(workload="multi_turn", profile="default")
def test_history_comes_from_the_prefix_cache(vllm_perf):
    platform = vllm_perf.server.platform
    outcome = vllm_perf.run(thresholds=LIMITS[platform], **LOAD[platform])
    metrics = outcome.result.metrics
    assert metrics["chat.turn4.ttft_p50_ms"] > 0  # conversations reached their last turn
    # the ceiling is about 0.59: turn 1 is all misses, and each later turn can hit only
    # the previous prompt's full blocks (the stand-in reply differs from the model's);
    # the CPU engine measured 0.55 (docs/results.md), with caching off 0.0
    assert metrics["prefix_cache_hit_rate"] > 0.4


@pytest.mark.vllm_perf(workload="multi_turn", profile="no-prefix-cache")
def test_without_prefix_caching_every_turn_prefills_its_history(vllm_perf):
    platform = vllm_perf.server.platform
    outcome = vllm_perf.run(thresholds=LIMITS[platform], **LOAD[platform])
    assert outcome.result.metrics["prefix_cache_hit_rate"] < 0.05
