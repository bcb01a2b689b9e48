"""The engine tier's orphan checks (tests/real_engine.py), without vLLM: they must see a
server's processes even where vLLM hides them (checks that matched only the
launcher's command line, or looked after the session leader died, could not fail).

A stand-in server: a session leader started with the test's tag in its environment,
whose child drops the tag, as vLLM's engine core does when setproctitle rewrites its
environment. Broken on purpose (``tagged_processes`` reading only the tagged
environments, ``vllm_processes`` matching another module name), the child, or the
launcher, goes unseen and these tests fail."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.real_engine import server_sessions, session_members, tagged_processes, vllm_processes

# The leader starts a child without the tag, prints its pid, and waits; both sleep.
LEADER = """
import os, subprocess, sys, time
env = {k: v for k, v in os.environ.items() if k != "VLLM_PERF_TEST_TAG"}
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def server() -> Iterator[tuple[str, subprocess.Popen[str], int]]:
    tag = f"orphan-unit-{uuid.uuid4().hex[:12]}"
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, "pytest_vllm_perf.serving.launch", tag],
        env={**os.environ, "VLLM_PERF_TEST_TAG": tag},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    try:
        yield tag, leader, child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_the_session_finds_a_child_whose_environment_lost_the_tag(server):
    tag, leader, child = server
    assert server_sessions(tag) == {leader.pid}
    assert set(tagged_processes(tag)) == {leader.pid, child}


def test_the_session_still_finds_the_child_after_its_leader_died(server):
    tag, leader, child = server
    sessions = server_sessions(tag)  # recorded before the leader dies, as the checks do
    leader.kill()
    leader.wait()
    assert session_members(sessions) == [child]
    os.kill(child, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while session_members(sessions) and time.monotonic() < deadline:
        time.sleep(0.05)  # reaped by init once its parent is gone
    assert session_members(sessions) == []


def test_the_launchers_command_line_is_found_by_its_marker(server):
    tag, leader, _ = server
    [found] = vllm_processes(tag)
    assert "pytest_vllm_perf.serving.launch" in found
    assert vllm_processes(f"{tag}-other") == []
    leader.kill()
    leader.wait()
    assert vllm_processes(tag) == []
