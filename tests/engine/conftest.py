"""One orphan check for every engine test.

Each test runs under its own ``VLLM_PERF_TEST_TAG``, which every process it starts
inherits (pytester's subprocesses, the plugin's servers). From the test's first
moment a watcher records the session of every tagged session leader: each server is
started in a session of its own, and vLLM renames its engine core and workers with
setproctitle, which overwrites their environment (and the tag with it), so the
session is what still finds them, even after the leader died. At teardown every
tagged process and every member of a recorded session must be gone within 30 s
(KILL follows TERM after 20 s); what is left is killed and the test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.real_engine import server_sessions, session_members, tagged_processes


@pytest.fixture(autouse=True)
def no_orphans(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    tag = f"orphan-check-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("VLLM_PERF_TEST_TAG", tag)
    sessions: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            sessions.update(server_sessions(tag))
            done.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    yield tag
    done.set()
    watcher.join()
    sessions.update(server_sessions(tag))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = sorted(set(tagged_processes(tag)) | set(session_members(sessions)))
        if not left:
            return
        time.sleep(1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pytest.fail(f"processes left behind by this test (killed now): {left}", pytrace=False)
