"""SIGTERM during the load, on the real engine, from a user folder with two perf tests
(the interrupt acceptance): the servers are gone within 15 s, the whole session ends
with exit 2, the second test never starts, and no vLLM process is left. The same boot
shows vLLM's prefix cache off: broken on purpose (``no-prefix-cache`` turning caching
on), vLLM's counters read 7680 hits of 13664 queried tokens and the last check fails."""

from __future__ import annotations

import math
import re
import signal
import threading
import time

import pytest

from pytest_vllm_perf.load import scrape
from tests.real_engine import (
    pytest_child,
    read_until,
    require_engine,
    server_sessions,
    session_members,
    tagged_processes,
    vllm_processes,
)

pytestmark = pytest.mark.engine

# The first test's pass runs multi-turn conversations on the no-prefix-cache profile: the
# SIGTERM case needs a booted server under load, and the same boot shows that with the
# prefix cache off vLLM serves none of the resent history (the cache-on half is
# tests/engine/test_engine.py's; a boot of its own cost CI 50 s).
SIGTERM_TESTS = """
import pathlib
import pytest

@pytest.mark.vllm_perf(workload="multi_turn", profile="no-prefix-cache", duration_s=600,
                       warmup_requests=1, chat={{"users": 2, "output_tokens": 8}})
def test_a_slow(vllm_perf):
    vllm_perf.run()

@pytest.mark.vllm_perf(profile="no-prefix-cache", duration_s=600)
def test_b_second(vllm_perf):
    pathlib.Path({started!r}).write_text("started")
    vllm_perf.run()
"""


def _done(line: str) -> int:
    """Requests done, from a progress line; 0 for other lines."""
    found = re.search(r" (\d+) done, ", line)
    return int(found.group(1)) if found else 0


@pytest.mark.parametrize(
    "signals",
    [
        # make, timeout and CI runners may TERM a whole group, so a TERM can come twice
        # and land during the teardown the first one started. SIGTERM is turned into
        # KeyboardInterrupt, Ctrl-C's own path from there on; Ctrl-C itself is sent
        # during a boot in test_faults_boot.py (sigint-during-boot). A ctrl-c case
        # here cost CI a boot and 70 s for the same path.
        pytest.param((signal.SIGTERM, signal.SIGTERM), id="sigterm-twice"),
    ],
)
def test_interrupt_during_load_leaves_no_vllm_process(perf_project, no_orphans, signals):
    require_engine()
    started = perf_project.path / "second-started"
    perf_project.makepyfile(test_slow=SIGTERM_TESTS.format(started=str(started)))
    lines: list[str] = []
    with pytest_child(perf_project.path, no_orphans) as proc:
        # the workload is running, past the conversations' second turns
        read_until(proc, lines, lambda line: _done(line) >= 4, timeout_s=300)
        assert vllm_processes(str(perf_project.path)), "the server should be up by now"
        assert len(tagged_processes(no_orphans)) >= 2  # pytest and the server, at least
        [url] = re.findall(r"ready at (http://127\.0\.0\.1:\d+)", "".join(lines))
        counters = scrape.scrape(url)
        sessions = server_sessions(no_orphans)
        assert sessions, "the server's session should be found"
        # the child's output drained meanwhile: a full pipe would hold its exit up
        drained: list[str] = []
        stdout = proc.stdout
        assert stdout is not None
        reader = threading.Thread(target=lambda: drained.append(stdout.read()))
        reader.start()
        signalled = time.monotonic()
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.3)
        servers_gone_s = exited_s = math.inf
        while time.monotonic() - signalled < 120 and math.inf in (servers_gone_s, exited_s):
            now = time.monotonic() - signalled
            if servers_gone_s == math.inf and not session_members(sessions):
                servers_gone_s = now
            if exited_s == math.inf and proc.poll() is not None:
                exited_s = now
            time.sleep(0.1)
        reader.join(timeout=30)
        out = "".join(drained)
    # the documented status: 2, interrupted, whether Ctrl-C or SIGTERM; the whole
    # session ends, so the second test never starts (SystemExit inside the first test
    # once failed it and went on to boot the second one's server)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    print(f"servers gone {servers_gone_s:.1f} s and session ended {exited_s:.1f} s after SIGTERM")
    # The servers get TERM at once and KILL 5 s later (server.stop_all): gone within
    # seconds whatever the machine's load. The session's end also waits on pytest's and
    # the interpreter's teardown, which load stretches: 2.5 s on an idle 2-core machine,
    # 15.7 s once in a fresh-clone CI run at load average 5.6, where a 15 s bound on it
    # failed (which part took the time was not recorded: both are printed now). It is
    # held to ending at all, well before a second test's boot would.
    assert servers_gone_s < 15, (
        f"servers still up {servers_gone_s:.1f} s after SIGTERM: {out[-3000:]}"
    )
    assert exited_s < 60, f"the session took {exited_s:.1f} s to end after SIGTERM: {out[-3000:]}"
    assert not started.exists()
    deadline = time.monotonic() + 30  # KILL reaches stragglers 5 s after TERM
    while tagged_processes(no_orphans) and time.monotonic() < deadline:
        time.sleep(1)
    assert tagged_processes(no_orphans) == []
    # no-prefix-cache: prompts were looked up (or the counter is not kept), none was found
    assert counters is not None, "the server's /metrics could not be read"
    print("no-prefix-cache counters:", counters)
    assert scrape.first(counters, scrape.PREFIX_HITS) in (None, 0.0), counters
