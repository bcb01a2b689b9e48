"""Faults a server can throw at one request: each is that request's failure, counted and
shown, and the pass goes on (fake server: the engine tier covers dying servers)."""

from __future__ import annotations

import signal
import time

import pytest

from tests.real_engine import pytest_child, read_until

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
    # hour a stalled stream would hold without it: a bound 8 times the expected 3.5 s,
    # so that a busy machine does not fail it
    assert elapsed < 30, elapsed


SIGTERM_TESTS = """
import pathlib

import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=30, warmup_requests=0, repeat=1,
                       chat={{"users": 2, "output_tokens": 8}})
def test_a_slow(vllm_perf):
    vllm_perf.run()

def test_b_second(vllm_perf):
    pathlib.Path({started!r}).write_text("started")
"""


def test_sigterm_during_a_test_ends_the_session_as_interrupted(pytester, fake_vllm):
    """SIGTERM in the middle of a perf test ends the whole session with exit 2, the next
    test never starting. Broken on purpose (the handler raising SystemExit, as it once
    did), pytest recorded the first test as failed and ran the second. The real
    engine's servers and their process groups: tests/engine/test_interrupt.py."""
    started = pytester.path / "second-started"
    pytester.makepyfile(test_term=SIGTERM_TESTS.format(started=str(started)))
    pytester.makeini(f"[pytest]\naddopts = --vllm-url={fake_vllm.url}\n")
    lines: list[str] = []
    with pytest_child(pytester.path, "sigterm-fake") as proc:
        read_until(proc, lines, lambda line: " done, " in line, timeout_s=60)
        assert any(" done, " in line for line in lines), "".join(lines)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert time.monotonic() - signalled < 20  # the load is cut, not run to its 30 s
    assert not started.exists(), out[-3000:]
