"""Multi-turn conversations: each turn sends the whole history, records carry
their turn, and the prefix cache's counters become a hit rate per pass."""

from __future__ import annotations

import asyncio
import math

import pytest

from pytest_vllm_perf.core.errors import WorkloadError
from pytest_vllm_perf.core.records import PassRecord
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import runner
from pytest_vllm_perf.metrics import compute


def conversation_load(users: int = 1) -> Workload:
    return Workload(
        "w", (RequestClass("chat", 8, 4, users=users, turns=3),),
        duration_s=1.0, warmup_requests=0, ramp_s=0.0,
    )  # fmt: skip


def test_each_turn_sends_the_history_and_a_new_message(fake_vllm):
    """One user: turn k's prompt starts with turn k-1's prompt, then a stand-in reply
    (4 ids), then 8 new ids; after the third turn a new conversation starts afresh.
    Broken on purpose (the history dropped), the prefix checks fail."""
    asyncio.run(runner.run(conversation_load(), fake_vllm.url, "fake-model"))
    prompts = [b["prompt"] for b in fake_vllm.requests]
    assert [len(p) for p in prompts[:4]] == [8, 20, 32, 8]
    assert prompts[1][:8] == prompts[0] and prompts[2][:20] == prompts[1]
    assert prompts[3][:8] != prompts[2][:8]  # a new conversation


def test_records_carry_their_turn_and_ttft_is_reported_by_turn(fake_vllm):
    recording = asyncio.run(runner.run(conversation_load(2), fake_vllm.url, "fake-model"))
    [p] = recording.passes
    turns = {r.turn for r in p.records}
    assert turns == {1, 2, 3}
    metrics = compute.measure_metrics(conversation_load(2), recording.passes, {}, [])
    for turn in (1, 2, 3):
        assert metrics[f"chat.turn{turn}.ttft_p50_ms"] > 0


def test_prefix_cache_counters_become_a_hit_rate(fake_vllm):
    """The fake server's cache serves what a prompt shares with the previous one: one
    user's turns share their history, so the rate is well above zero; with the counters
    at zero lookups (caching off) the rate is 0, and without counters it is absent."""
    fake_vllm.prefix_cache = True
    load = conversation_load()
    recording = asyncio.run(runner.run(load, fake_vllm.url, "fake-model"))
    [p] = recording.passes
    assert p.counters["prefix_cache_queries"] > p.counters["prefix_cache_hits"] > 0
    rate = compute.pass_metrics(load, p)["prefix_cache_hit_rate"]
    assert 0.3 < rate < 1.0
    off = PassRecord((), 1.0, counters={"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0})
    assert compute.pass_metrics(load, off)["prefix_cache_hit_rate"] == 0.0
    assert "prefix_cache_hit_rate" not in compute.pass_metrics(load, PassRecord((), 1.0))
    nan = PassRecord((), 1.0, counters={"prefix_cache_queries": math.nan, "prefix_cache_hits": 1})
    assert math.isnan(compute.pass_metrics(load, nan)["prefix_cache_hit_rate"])


def test_turns_are_held_by_closed_loop_users():
    with pytest.raises(WorkloadError, match="turns are held by closed-loop users"):
        RequestClass("c", 8, 4, rate=1.0, turns=2)
    with pytest.raises(WorkloadError, match="turns must be >= 1"):
        RequestClass("c", 8, 4, users=1, turns=0)
    # a class without turns hashes as before the field existed
    assert RequestClass("c", 8, 4, users=1) == RequestClass("c", 8, 4, users=1, turns=1)
