"""Faults a server can throw at one request: each is that request's failure, counted and
shown, and the pass goes on (fake server: the engine tier covers dying servers)."""

from __future__ import annotations

import time

import pytest

PERF_TEST = """
import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=2, warmup_requests=0, repeat=1,
                       request_timeout_s=1.5, chat={"users": 3, "output_tokens": 8})
def test_perf(vllm_perf):
    vllm_perf.run()
"""


def run(pytester: pytest.Pytester, url: str) -> pytest.RunResult:
    pytester.makepyfile(PERF_TEST)
    return pytester.runpytest_inprocess(f"--vllm-url={url}", "-p", "no:cacheprovider")


def test_http_500_fails_those_requests_only(pytester, fake_vllm):
    fake_vllm.fail_every = 4
    result = run(pytester, fake_vllm.url)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL failed: *(limit <= 0)*", "*request errors: *500*"])
    # the pass went on: most requests completed around the failed ones
    assert len(fake_vllm.requests) > 8


def test_a_stream_stalled_past_the_request_timeout_is_a_bounded_failure(pytester, fake_vllm):
    fake_vllm.stall_every = 5
    started = time.monotonic()
    result = run(pytester, fake_vllm.url)
    elapsed = time.monotonic() - started
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL failed: *(limit <= 0)*", "*request errors: *"])
    # 2 s of load plus the 1.5 s request timeout of the last stalled stream, not the
    # hour a stalled stream would hold without it: a bound 30 times the expected
    # 3.5 s, so that a busy machine does not fail it
    assert elapsed < 120, elapsed
