"""Claims about vLLM behaviour, shown against the real engine (the CPU build in CI)."""

from __future__ import annotations

import signal
import time

import pytest

from pytest_vllm_perf.config import profiles, workloads
from pytest_vllm_perf.core import trace
from pytest_vllm_perf.measure import capacity_search, measure
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool
from pytest_vllm_perf.verdict import thresholds
from tests.conftest import REPO
from tests.real_engine import require_engine, start_pytest, tagged_processes, vllm_processes

pytestmark = pytest.mark.engine
QUICK = workloads.named("mixed").override(
    {
        "duration_s": 6,
        "warmup_requests": 1,
        "chat": {"users": 2, "output_tokens": 16},
        "long": {"rate": 1.0, "prompt_tokens": 512, "output_tokens": 4},
    }
)
PERF_TEST = """
import pytest

@pytest.mark.vllm_perf(workload="mixed", duration_s=6, warmup_requests=1, repeat=1,
                       chat={{"users": 2, "output_tokens": 16}},
                       long={{"rate": 1.0, "prompt_tokens": 512, "output_tokens": 4}},
                       thresholds={thresholds})
def test_perf(vllm_perf):
    vllm_perf.run()
"""


def test_workload_measures_real_tokens(real_server):
    # gauges every 0.5 s: this checks that they are read during the load; at the default
    # 2 s, a 6 s pass on a stalled 2-core VM once got no reading while a request was in
    # flight (KV usage 0 in every reading)
    result = measure(real_server, QUICK, gauges_every_s=0.5)
    checks = thresholds.check(result.metrics, {"failed": 0})
    assert all(c.passed for c in checks), result.failures[:3]
    assert result.metrics["chat.completed"] >= 2
    assert result.metrics["long.completed"] >= 1
    for record in result.records:
        # exact lengths: ignore_eos + max_tokens on the served model's own tokenizer
        assert record.output_tokens == record.expected_output_tokens
        assert record.prompt_tokens == {"chat": 64, "long": 512}[record.cls]
        assert 0 < record.ttft < record.e2el
        # one gap per streamed chunk; vLLM may merge tokens into a chunk when it lags
        assert 1 <= len(record.itl) <= record.output_tokens - 1
    assert result.metrics["ttft_p50_ms"] > 0
    assert result.metrics["preemptions"] == 0
    counters = result.passes[0].counters  # read at the pass boundaries
    assert counters["preemptions"] == 0.0
    assert counters["prefix_cache_queries"] >= counters["prefix_cache_hits"] >= 0
    assert result.gauges, "KV usage and queue are sampled during the run"
    assert any(r.kv_cache_usage for r in result.gauges)


def test_threshold_pass_and_fail_against_real_engine(real_server, perf_project):
    perf_project.makepyfile(
        test_ok=PERF_TEST.format(thresholds="{'ttft_p99_ms': 60000, 'itl_p99_ms': 60000}"),
        test_bad=PERF_TEST.format(thresholds="{'itl_p50_ms': 0.001}"),
    )
    result = perf_project.runpytest_subprocess(
        f"--vllm-url={real_server.base_url}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAIL itl_p50_ms:*(limit <= 0.001)*"])


# The first port the plugin picks is held by a listener, as another process could take it
# between the pick and vLLM's bind: vLLM must fail with its own "address already in use"
# and the plugin retry on a new port (tests/unit/test_server_lifecycle.py covers the
# retry logic with a stub; this shows vLLM's real message is recognised). It rides on
# the preemption test's boot, since CI pays for every boot (issue 24).
PORT_TAKEN = """
import socket

from pytest_vllm_perf.serving import server

HELD = socket.socket()
HELD.bind(("127.0.0.1", 0))
HELD.listen()
_real, _calls = server.free_port, []


def _first_taken(host="127.0.0.1"):
    _calls.append(host)
    return HELD.getsockname()[1] if len(_calls) == 1 else _real(host)


server.free_port = _first_taken
"""


CONVERSATIONS = workloads.named("multi_turn").override(
    {"duration_s": 5, "warmup_requests": 1, "chat": {"users": 2, "output_tokens": 8}}
)


def test_conversations_are_served_from_the_prefix_cache_and_a_trace_is_replayed(
    real_server, tmp_path
):
    """Issue 26 on the real engine. Multi-turn: each turn resends the history, and vLLM's
    prefix cache (on by default) serves most of it; with no-prefix-cache (one more boot)
    it serves none. Trace: the shipped synthetic trace at twice its speed, every request
    sent with its traced length. Broken on purpose (the history dropped from later
    turns), the hit rate falls to about 0 and the first check fails."""
    on = measure(real_server, CONVERSATIONS)
    assert on.metrics["failed"] == 0
    assert on.metrics["chat.turn3.ttft_p50_ms"] > 0  # conversations reached turn 3
    # at most ~0.59 (turn 1 misses; later turns hit the previous prompt's full blocks)
    assert on.metrics["prefix_cache_hit_rate"] > 0.4, on.passes[0].counters
    pool = ServerPool(PoolConfig(tmp_path / "cache"), print)
    try:
        off = measure(pool.get(profiles.load("no-prefix-cache", REPO / "profiles")), CONVERSATIONS)
    finally:
        pool.stop()
    assert off.metrics["failed"] == 0
    assert off.metrics["prefix_cache_hit_rate"] < 0.05, off.passes[0].counters
    replay = workloads.named("trace").override(
        {"duration_s": 5, "warmup_requests": 1, "requests": {"time_scale": 0.5}}
    )
    played = measure(real_server, replay)
    traced = trace.load(replay.classes[0].trace)
    sent = sorted(r.prompt_tokens for r in played.records)
    expected = sorted(r.input_tokens for r in traced if r.arrival_s * 0.5 < 5)
    assert played.metrics["failed"] == 0 and sent == expected


def test_the_capacity_search_brackets_the_real_engines_slo_boundary(real_server):
    """Issue 26 on the real engine, on the shared server: from 4 req/s of 256-token
    prompts, 3 s passes, the search finds a rate that keeps the SLO and one that breaks
    it within 5 passes, and the margin is higher at the fastest rate than at the
    slowest (session 10 measured 0.74 at 8 req/s and 2.04 at 16 on this VM). A 95%
    interval needs more passes than CI spends; examples/test_capacity.py runs the whole
    search. Broken on purpose (the rate not doubled while the SLO holds), no pass
    breaks the SLO and the bracket check fails."""
    load = workloads.named("capacity").override(
        {
            "duration_s": 3,
            "warmup_requests": 1,
            "requests": {"rate": 4.0, "prompt_tokens": 256, "output_tokens": 16},
        }
    )
    slo = {"ttft_p99_ms": 1_500, "itl_p99_ms": 1_000}
    found = capacity_search(real_server, load, slo, tolerance=0.2, max_passes=5)
    search = found.search
    rates = dict(zip(search.rates, search.margins, strict=True))
    assert search.held > 0 and search.broke < float("inf"), found.line()
    assert rates[max(rates)] > rates[min(rates)], found.line()
    assert search.passes <= 5 and "capacity of 'requests'" in found.line()


def test_preemptions_counted_a_taken_port_retried_and_no_process_left(perf_project):
    require_engine()
    perf_project.makeconftest(PORT_TAKEN)
    perf_project.makepyfile(
        test_kv="""
        import pytest

        @pytest.mark.vllm_perf(workload="kv_pressure", profile="small-kv", duration_s=8, repeat=1,
                               seq={"users": 8, "prompt_tokens": 256, "output_tokens": 128},
                               thresholds={"min_preemptions": 1})
        def test_kv(vllm_perf):
            outcome = vllm_perf.run()
            print("PREEMPTIONS", outcome.result.metrics["preemptions"])
    """
    )
    result = perf_project.runpytest_subprocess("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*port * was taken before vLLM bound it; retrying on *",
            "*ready at http://127.0.0.1:*",
            "*PREEMPTIONS *",
        ]
    )
    assert vllm_processes(str(perf_project.path)) == []


def test_rejected_engine_flag_fails_fast_with_vllm_message(perf_project):
    require_engine()
    (perf_project.path / "profiles" / "bad.yaml").write_text("engine: {no_such_flag: 3}\n")
    perf_project.makepyfile(PERF_TEST.format(thresholds="{}"))
    result = perf_project.runpytest_subprocess("--vllm-profile=bad", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    # failed when vLLM exited, not after the 600 s boot timeout (a clock bound of 90 s
    # here failed on a busy machine)
    result.stdout.fnmatch_lines(["*exited with code*", "*--no-such-flag*"])
    assert "not healthy after" not in result.stdout.str()
    assert vllm_processes(str(perf_project.path)) == []


@pytest.mark.parametrize(
    "signals",
    [
        # make, timeout and CI runners may TERM a whole group, so a TERM can come twice
        # and land during the teardown the first one started. SIGTERM is turned into
        # KeyboardInterrupt, Ctrl-C's own path from there on; Ctrl-C itself is sent
        # during a boot in test_faults_engine.py (sigint-during-boot). A ctrl-c case
        # here cost CI a boot and 70 s for the same path (issue 24).
        pytest.param((signal.SIGTERM, signal.SIGTERM), id="sigterm-twice"),
    ],
)
def test_interrupt_during_load_leaves_no_vllm_process(perf_project, signals):
    require_engine()
    tag = f"{perf_project.path.name}-{len(signals)}"
    started = perf_project.path / "second-started"
    perf_project.makepyfile(
        test_slow=f"""
        import pathlib
        import pytest

        @pytest.mark.vllm_perf(duration_s=600)
        def test_a_slow(vllm_perf):
            vllm_perf.run()

        @pytest.mark.vllm_perf(duration_s=600)
        def test_b_second(vllm_perf):
            pathlib.Path({str(started)!r}).write_text("started")
            vllm_perf.run()
    """
    )
    proc = start_pytest(perf_project.path, tag)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            if " done, " in line or time.monotonic() > deadline:  # the workload is running
                break
        assert vllm_processes(str(perf_project.path)), "the server should be up by now"
        assert len(tagged_processes(tag)) >= 2  # pytest and the server, at least
        signalled = time.monotonic()
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.3)
        out, _ = proc.communicate(timeout=120)
        stopped_s = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    # the documented status: 2, interrupted, whether Ctrl-C or SIGTERM; the whole
    # session ends, so the second test never starts (SystemExit inside the first test
    # once failed it and went on to boot the second one's server)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    # the documented bound (README, issue 24): the server gets TERM, and KILL 5 s later
    # if it lingers, so the session ends well within 15 s (measured: see the message)
    assert stopped_s < 15, f"the session took {stopped_s:.1f} s to end after SIGTERM"
    print(f"session ended {stopped_s:.1f} s after the first SIGTERM")
    assert not started.exists()
    deadline = time.monotonic() + 30  # KILL reaches stragglers 5 s after TERM
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(1)
    assert tagged_processes(tag) == []
