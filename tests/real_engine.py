"""Helpers for tests against the real vLLM engine."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def require_engine() -> None:
    """Skip without vLLM on a developer machine; in CI a missing engine is a failure."""
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("CI"):
            pytest.fail("vLLM is not installed, and CI must run the engine tests")
        pytest.skip("vLLM is not installed (make setup installs the CPU engine)")


def sigint_restored() -> None:
    """A child's ``preexec_fn``: a background job of a non-interactive shell starts with
    SIGINT ignored, and a Python child started so ignores Ctrl-C; the child gets the
    default back, so that a test can interrupt it however the suite itself was started
    (a fresh-clone CI run started with ``&`` from a script failed the Ctrl-C test of
    ``prgate``: its 200 passes ran to the end)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_pytest(folder: Path, tag: str) -> subprocess.Popen[str]:
    """A pytest child in ``folder`` whose processes carry ``VLLM_PERF_TEST_TAG=tag``,
    interruptible however the suite was started (``sigint_restored``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "VLLM_PERF_TEST_TAG": tag},
        preexec_fn=sigint_restored,
    )


@contextlib.contextmanager
def pytest_child(folder: Path, tag: str) -> Iterator[subprocess.Popen[str]]:
    """``start_pytest``'s child for the body of a ``with``. If the body leaves while the
    child still runs (a failed assertion, a timeout), the child is killed and drained, and
    so is every process it started: its servers run in sessions of their own and would
    outlive it. A child that has ended is left alone, so that the orphan checks after the
    ``with`` see what it left."""
    proc = start_pytest(folder, tag)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
            for pid in tagged_processes(tag):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def read_until(
    proc: subprocess.Popen[str], output: list[str], stop: Callable[[str], bool], timeout_s: float
) -> None:
    """Read the child's lines into ``output`` until one makes ``stop`` true, the child's
    output ends, or ``timeout_s`` has passed (looked at as each line comes)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:
        output.append(line)
        if stop(line) or time.monotonic() > deadline:
            return


def vllm_processes(marker: str) -> list[str]:
    """Full command lines of live processes that mention ``marker`` (read from /proc)."""
    found = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        args = _cmdline(int(pid_dir.name))
        if marker in args and "pytest_vllm_perf.serving.launch" in args:
            found.append(args)
    return found


def _stat(pid_dir: Path) -> tuple[str, int] | None:
    """(state, session id) of a process, None if it is gone."""
    try:
        fields = (pid_dir / "stat").read_text().split(")")[-1].split()
    except OSError:
        return None
    return fields[0], int(fields[3])  # state, then ppid, pgrp, session


def server_sessions(tag: str) -> set[int]:
    """Sessions led by a tagged process: each server runs in its own (start_new_session)."""
    return {pid for pid in _tagged(tag) if (st := _stat(Path(f"/proc/{pid}"))) and st[1] == pid}


def session_members(sessions: set[int]) -> list[int]:
    """Live (not zombie) processes of these sessions, even after their leader died."""
    found = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        st = _stat(pid_dir)
        if st and st[1] in sessions and st[0] != "Z":
            found.append(int(pid_dir.name))
    return found


def _tagged(tag: str) -> list[int]:
    found = []
    needle = f"VLLM_PERF_TEST_TAG={tag}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                st = _stat(environ.parent)
                if st and st[0] != "Z":  # a zombie holds nothing
                    found.append(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return found


def tagged_processes(tag: str) -> list[int]:
    """Live processes started under ``VLLM_PERF_TEST_TAG=tag``: those whose environment
    carries it, and every process in a server's session. vLLM renames its engine core
    and workers with setproctitle, which overwrites their environment, so the tag is
    not readable there: the session (the server's process group leader's) finds them."""
    return sorted(set(_tagged(tag)) | set(session_members(server_sessions(tag))))


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def engine_core(tag: str) -> list[int]:
    """vLLM renames its engine core process (setproctitle): seen in cmdline, or comm."""
    return [
        p
        for p in tagged_processes(tag)
        if "VLLM::EngineCore" in _cmdline(p) or _comm(p).startswith("VLLM::EngineCor")
    ]


def describe(pids: list[int]) -> str:
    """Who each process is, for a failed orphan check: a leftover whose parent, group or
    session is not a server's says which path left it."""
    out = []
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
        except OSError:
            out.append(f"{pid}: gone")
            continue
        state, ppid, pgrp, session = fields[0], fields[1], fields[2], fields[3]
        out.append(
            f"{pid} {_comm(pid)!r} state {state} ppid {ppid} pgrp {pgrp} session {session}: "
            f"{_cmdline(pid)[:200]}"
        )
    return "; ".join(out)
