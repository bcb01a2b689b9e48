"""Throughput over the steady window, and the bench-serve load shape.

Counting every token to the last response put the drain (concurrency falling to
zero while the last requests finish) into the measured time: on an H200, 8 s
passes of decode read 13% below 25 s ones, and the bias grows with E2EL.
"""

from __future__ import annotations

import asyncio

import pytest

from pytest_vllm_perf.core.records import PassRecord, RequestRecord
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import runner
from pytest_vllm_perf.metrics import compute


def stream(start: float, tokens: int, gap: float, cls: str = "chat") -> RequestRecord:
    """A request whose chunks arrive every ``gap`` seconds from ``start + gap``."""
    return RequestRecord(cls, start, gap, (gap,) * (tokens - 1), gap * tokens, 8, tokens, tokens)


def closed_loop(users: int, until: float, tokens: int, gap: float) -> list[RequestRecord]:
    """Users sending back to back until ``until``, out of step (user j starts j/users of a
    request late, and the first starts its first at -1 request's time), so that
    concurrency falls one user at a time while the last requests drain."""
    out = []
    for j in range(users):
        t = (j / users - 1) * tokens * gap
        while t < until:
            out.append(stream(t, tokens, gap))
            t += tokens * gap
    return out


def test_throughput_counts_tokens_inside_the_window_not_the_drain():
    # 4 users, 1 token every 10 ms each: 400 tok/s whatever the pass length
    for until in (2.2, 8.2):  # the last requests start before it and end 0.3 s after
        records = closed_loop(4, until, 50, 0.01)
        ramp = tuple(r for r in records if r.start < 0)
        kept = tuple(r for r in records if r.start >= 0)
        p = PassRecord(kept, duration_s=until, ramp_records=ramp)  # window [0, until]
        rates = compute.window_rates((p,))
        assert rates["output_throughput"] == pytest.approx(400, rel=0.01)
        # the old definition: tokens of requests started after the ramp-up over the
        # time to the last response, which counted the drain's falling concurrency
        last = max(r.start + r.e2el for r in records)
        old = sum(r.output_tokens for r in kept) / last
        assert old < 0.95 * 400 if until < 5 else old < 400


def test_ramp_up_requests_count_for_what_they_streamed_inside_the_window():
    records = [r for r in closed_loop(1, 4.0, 50, 0.01) for _ in range(2)]
    ramp = tuple(r for r in records if r.start < 1.0)
    kept = tuple(r for r in records if r.start >= 1.0)
    p = PassRecord(kept, duration_s=3.0, ramp_s=1.0, ramp_records=ramp)  # window [1, 4]
    assert compute.window_rates((p,))["output_throughput"] == pytest.approx(200, rel=0.01)
    # completed inside the window: requests ending in [1, 4], at 1.0, 1.5 .. 4.0 a user
    assert compute.window_rates((p,))["request_throughput"] == pytest.approx(2 * 7 / 3.0)


def test_the_window_starts_when_the_ramp_up_ends():
    """Nothing streams during a 1 s ramp-up here, then 100 tok/s: a window opened at the
    pass's start instead (broken on purpose) reads 2/3 of it."""
    user = [stream(1.0 + 0.5 * k, 50, 0.01) for k in range(6)]  # 1.0 .. 4.0, back to back
    p = PassRecord(tuple(user), duration_s=3.0, ramp_s=1.0)
    assert p.window == (1.0, 4.0)
    assert compute.window_rates((p,))["output_throughput"] == pytest.approx(100, rel=0.01)


def test_window_counts_a_chunk_of_several_tokens_as_all_of_them():
    r = RequestRecord("c", 0.0, 0.1, (0.1,), 0.2, 8, 10, 10)  # 2 chunks of 5 tokens
    assert compute.window_counts([r], 0.0, 0.15) == (5.0, 0)
    assert compute.window_counts([r], 0.0, 1.0) == (10.0, 1)
    failed = RequestRecord("c", 0.0, 0.1, (0.1,), 0.2, 8, 10, 10, error="HTTP 500")
    assert compute.window_counts([failed], 0.0, 1.0) == (0.0, 0)


def test_preemptions_per_second_use_the_whole_pass_the_counter_covered():
    load = Workload("w", (RequestClass("chat", 8, 50, users=1),))
    p = PassRecord(
        tuple(closed_loop(1, 4.0, 50, 0.01)), 3.0, ramp_s=1.0, drain_s=1.0, elapsed_s=5.0,
        counters={"preemptions": 10.0},
    )  # fmt: skip
    assert compute.pass_metrics(load, p)["preemptions_per_s"] == pytest.approx(2.0)


def _run(fake_vllm, workload: Workload) -> runner.Recording:
    return asyncio.run(runner.run(workload, fake_vllm.url, "fake-model", repeat=1))


def test_short_and_long_passes_read_the_same_throughput_as_the_server_streamed(fake_vllm):
    """On the fake server (no batching: each stream runs at its own pace) a 1 s pass
    and a 3 s pass each read the rate at which the server streamed inside the pass's
    window: the server's own chunk times, put on the run's clock by the last chunk
    (the drain's end on both clocks), counted between the window's ends. Both sides
    count the same stretch of time, so the machine's pace cancels: the server's middle
    60% was the reference before, and on a loaded machine the pace changed between
    that stretch and the window (read x0.85, then x2.23, against 1 +- 0.15). Broken on
    purpose (the window counted to the last response), the 1 s pass reads about x0.7
    of the server's rate and the check fails."""
    fake_vllm.delay_s = 0.01
    for seconds in (1.0, 3.0):
        load = Workload(
            "w", (RequestClass("chat", 8, 50, users=4),), duration_s=seconds, ramp_s=0.1,
            warmup_requests=1,
        )  # fmt: skip
        fake_vllm.written.clear()
        [p] = _run(fake_vllm, load).passes
        assert p.duration_s == pytest.approx(seconds - 0.1)
        assert p.ramp_records and all(r.start < p.start_s + 0.1 for r in p.ramp_records)
        assert p.elapsed_s > seconds  # the drain ran past the deadline
        last = max(r.start + r.e2el for r in (*p.ramp_records, *p.records) if r.ok)
        offset = max(fake_vllm.written) - last
        begin, end = p.window
        inside = sum(begin <= w - offset <= end for w in fake_vllm.written)
        streamed = inside / p.duration_s
        read = compute.window_rates((p,))["output_throughput"]
        assert read / streamed == pytest.approx(1.0, abs=0.15), (seconds, read, streamed)


def test_bench_serve_shape_starts_every_user_at_once_and_leaves_nothing_out(fake_vllm):
    load = Workload(
        "w", (RequestClass("chat", 8, 20, users=4),), duration_s=1.0, ramp_s=0.5,
        shape="bench-serve", warmup_requests=1,
    )  # fmt: skip
    [p] = _run(fake_vllm, load).passes
    assert p.ramp_s == 0 and not p.ramp_records and p.ramp_requests == 0
    first = sorted(r.start for r in p.records)[:4]
    assert first[-1] - first[0] < 0.1  # together, not staggered over ramp_s
    assert p.duration_s == pytest.approx(p.elapsed_s)  # to the last response, as vB


def test_the_shape_is_checked_and_counts_in_the_hash_only_when_set():
    chat = (RequestClass("chat", 8, 20, users=4),)
    assert Workload("w", chat).hash == Workload("w", chat, shape="steady").hash
    assert Workload("w", chat).hash != Workload("w", chat, shape="bench-serve").hash
    with pytest.raises(Exception, match="shape must be one of steady, bench-serve"):
        Workload("w", chat, shape="waves")  # type: ignore[arg-type]
