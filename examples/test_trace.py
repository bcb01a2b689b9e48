"""Trace replay: recorded arrivals and lengths, sent as they were recorded.

The built-in ``trace`` workload replays the shipped synthetic trace (40 requests in
Mooncake's JSON-lines format, some sharing a document's prefix blocks); point it at your
own with ``requests={"trace": "my-trace.jsonl"}`` (a path beside this file), and speed it
up or slow it down with ``time_scale``. A pass replays the trace from its start for
``duration_s``; keep that inside the trace's span (47.5 s here, times ``time_scale``), or
the pass's end is idle and throughput reads low.
"""

LOAD = {
    # the CPU engine: the trace as recorded, about one prompt of ~800 tokens a second
    "cpu": {"duration_s": 10, "requests": {"time_scale": 1.0}},
    # a GPU: five times as fast, 9 s of the 9.5 s the scaled trace spans
    "cuda": {"duration_s": 9, "requests": {"time_scale": 0.2}},
}
# The SLO of an interactive service fed this traffic: a first token within 2 s for 99%
# of requests and no visible stutter. The CPU limits only catch a broken engine.
LIMITS = {
    "cpu": {"ttft_p99_ms": 30_000, "itl_p99_ms": 10_000},
    "cuda": {"ttft_p99_ms": 2_000, "itl_p99_ms": 250},
}


def test_trace_replay(vllm_perf):
    platform = vllm_perf.server.platform
    outcome = vllm_perf.run("trace", thresholds=LIMITS[platform], **LOAD[platform])
    # the trace's requests were sent with their recorded lengths (256-1280 tokens)
    assert outcome.result.metrics["completed"] >= 1
    assert all(256 <= r.prompt_tokens <= 1280 for r in outcome.result.records)
