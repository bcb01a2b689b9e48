"""The fault matrix on the real engine: each case ends in bounded time with nothing left
running. Faults without a dying process (HTTP 500, a stalled stream, a full disk, a
refused folder, a corrupt baseline) are in tests/plugin/test_faults.py,
tests/unit/test_baseline_store.py and tests/plugin/test_gate.py; Ctrl-C and SIGTERM
during load are in tests/engine/test_engine.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.real_engine import (
    require_engine,
    server_sessions,
    session_members,
    start_pytest,
    tagged_processes,
)

pytestmark = pytest.mark.engine

SLOW = """
import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=600, chat={"users": 2})
def test_slow(vllm_perf):
    vllm_perf.run()
"""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def engine_core(tag: str) -> list[int]:
    """vLLM renames its engine core process (setproctitle): seen in cmdline, or comm."""
    return [
        p
        for p in tagged_processes(tag)
        if "VLLM::EngineCore" in _cmdline(p) or _comm(p).startswith("VLLM::EngineCor")
    ]


def kill(pids: list[int]) -> None:
    assert pids, "no such process to kill"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def api_server(tag: str) -> list[int]:
    return [p for p in tagged_processes(tag) if "pytest_vllm_perf.launch serve" in _cmdline(p)]


FAULTS = {
    # (what to wait for in the output, what to do then, the exit code expected)
    "sigint-during-boot": ("booting vLLM", lambda proc, tag: proc.send_signal(signal.SIGINT), 2),
    "engine-core-killed": (
        " done, ",
        lambda proc, tag: kill(engine_core(tag)),
        1,
    ),
    "api-server-killed": (
        " done, ",
        lambda proc, tag: kill(api_server(tag)),
        1,
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_ends_the_run_in_bounded_time_with_nothing_left(perf_project, fault):
    """A 600 s pass: only noticing the fault can end the run within the bound."""
    require_engine()
    wait_for, act, code = FAULTS[fault]
    tag = f"{perf_project.path.name}-{fault}"
    perf_project.makepyfile(test_slow=SLOW)
    proc = start_pytest(perf_project.path, tag)
    output = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            output.append(line)
            if wait_for in line or time.monotonic() > deadline:
                break
        time.sleep(3)  # well inside the boot, or a few seconds into the load
        assert tagged_processes(tag), "the server should be starting or up by now"
        sessions = server_sessions(tag)  # known before a fault can kill their leader
        act(proc, tag)
        acted = time.monotonic()
        rest, _ = proc.communicate(timeout=120)
        output.append(rest)
        ended_s = time.monotonic() - acted
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
            for pid in tagged_processes(tag):  # a failed case must not orphan its server
                os.kill(pid, signal.SIGKILL)
    text = "".join(output)
    assert proc.returncode == code, text[-3000:]
    # bounded: the communicate above allows 120 s; the run ended on the fault itself,
    # not on the boot timeout (a clock bound of 90 s here failed on a busy machine)
    assert "not healthy after" not in text, (ended_s, text[-3000:])
    if code == 1:
        assert "vLLM server died" in text, text[-3000:]
    deadline = time.monotonic() + 30
    while (tagged_processes(tag) or session_members(sessions)) and time.monotonic() < deadline:
        time.sleep(1)
    assert tagged_processes(tag) == []
    assert session_members(sessions) == []
