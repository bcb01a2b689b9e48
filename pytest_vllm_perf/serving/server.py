"""Start, health-check and stop a vLLM OpenAI server, or attach to a running one.

The server runs in its own process group so that stopping it also stops the
engine-core and worker processes vLLM forks; a process that dies during boot
fails at once with the end of its log instead of waiting for the boot timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pytest_vllm_perf.core import redact
from pytest_vllm_perf.core.errors import ServerError
from pytest_vllm_perf.core.records import Progress
from pytest_vllm_perf.serving.launch import PARENT_ENV, group_alive

__all__ = ["ExternalServer", "ServerError", "ServerSpec", "VllmServer", "stop_all", "stop_servers"]

LOG_TAIL_LINES = 30
# TERM's grace for a server whose boot Ctrl-C interrupted, then KILL
INTERRUPT_GRACE_S = 2.0
_LIVE: set[VllmServer] = set()

# The engine must not reach for a model hub or phone home; the network is not ours.
QUIET_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server: model, engine flags, environment, address (port picked at start)."""

    model: str
    engine_argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    python: str = sys.executable
    # how ``python`` finds the launcher: the module here, a lone script for another venv
    launcher: tuple[str, ...] = ("-m", "pytest_vllm_perf.serving.launch")

    def argv(self, port: int) -> list[str]:
        return [
            self.python,
            *self.launcher,
            "serve",
            self.model,
            "--host",
            self.host,
            "--port",
            str(port),
            *self.engine_argv,
        ]


PORT_ATTEMPTS = 2


class _PortTaken(Exception):
    """vLLM exited during boot because its port was in use."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def healthy(base_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=timeout) as resp:  # noqa: S310
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class VllmServer:
    """One vLLM server process group, started on ``start()`` and ended on ``stop()``."""

    def __init__(self, spec: ServerSpec, log_path: Path, boot_timeout_s: float = 600.0) -> None:
        self.spec = spec
        self.log_path = log_path
        self.boot_timeout_s = boot_timeout_s
        self.port = free_port(spec.host)
        self.process: subprocess.Popen[bytes] | None = None
        self.boot_s: float | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    def start(self, progress: Progress | None = None) -> None:
        """Start the process and wait until ``/health`` answers, or raise ServerError.

        The port is picked free, but another process can take it before vLLM binds it
        (vLLM binds only after loading the model): then the boot is retried once on a
        new port, and the log of the failed attempt is kept beside the new one.
        """
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._start_once(progress)
                return
            except _PortTaken:
                if attempt == PORT_ATTEMPTS - 1:
                    raise ServerError(
                        f"vLLM server could not bind port {self.port}: address already in "
                        f"use, {PORT_ATTEMPTS} times{self._tail()}"
                    ) from None
                taken, self.port = self.port, free_port(self.spec.host)
                self.log_path.rename(self.log_path.with_suffix(f".port-{taken}.log"))
                if progress:
                    progress(
                        f"port {taken} was taken before vLLM bound it; retrying on {self.port}"
                    )

    def _start_once(self, progress: Progress | None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        # the launcher stops the server once this process is gone (launch.watch_parent)
        env = {**os.environ, **QUIET_ENV, **self.spec.env, PARENT_ENV: str(os.getpid())}
        started = time.monotonic()
        self.process = subprocess.Popen(  # noqa: S603 - argv list, never a shell
            self.spec.argv(self.port),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        _LIVE.add(self)
        try:
            self._wait_healthy(started, progress)
        except KeyboardInterrupt:
            # Ctrl-C (or TERM, turned into it): the user is waiting. A booting vLLM
            # answered TERM only after the 20 s grace on a loaded 2-core machine (the
            # session took 21.9 and 22.5 s to end); nothing of a boot is worth keeping
            self.stop(grace_s=INTERRUPT_GRACE_S)
            raise
        except BaseException:
            self.stop()
            raise
        self.boot_s = time.monotonic() - started

    def _wait_healthy(self, started: float, progress: Progress | None) -> None:
        assert self.process is not None
        next_note = started + 15
        while not healthy(self.base_url):
            code = self.process.poll()
            now = time.monotonic()
            if code is not None:
                if any("address already in use" in line.lower() for line in self.log_lines()):
                    raise _PortTaken
                raise ServerError(f"vLLM server exited with code {code} during boot{self._tail()}")
            if now - started > self.boot_timeout_s:
                raise ServerError(
                    f"vLLM server not healthy after {self.boot_timeout_s:.0f}s "
                    f"(--vllm-boot-timeout){self._tail()}"
                )
            if progress and now >= next_note:
                progress(f"vLLM server booting on {self.base_url}: {now - started:.0f}s")
                next_note = now + 15
            time.sleep(0.5)

    def _tail(self) -> str:
        if self._log:
            self._log.flush()
        lines = deque(self.log_lines(), maxlen=LOG_TAIL_LINES)
        body = "\n".join("    " + redact.value(line) for line in lines)
        return f"\n  last lines of {self.log_path}:\n{body}"

    def log_lines(self) -> list[str]:
        if not self.log_path.is_file():
            return []
        return self.log_path.read_text(errors="replace").splitlines()

    def running(self) -> bool:
        """Whether the server process is still up (cheap: no request)."""
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        """Raise ServerError if the process has died since it became healthy."""
        if self.process is not None and self.process.poll() is not None:
            raise ServerError(f"vLLM server died (exit {self.process.returncode}){self._tail()}")

    def stop(self, grace_s: float = 20.0) -> None:
        """TERM the whole process group, KILL what is left after ``grace_s``."""
        stop_servers([self], grace_s)


def stop_servers(servers: Sequence[VllmServer], grace_s: float = 20.0) -> None:
    """Stop several servers at once: TERM every group, then wait for all of them, and KILL
    what is left after ``grace_s``. vLLM's CPU server takes about 4 s to go down after
    TERM, and in turn an A/B run's two took 8.5 s of every session's end (measured on
    tests/engine/test_pr_gate.py's scenario alone); at once they take one shutdown."""
    processes = []
    for server in servers:
        _LIVE.discard(server)
        if server.process is not None:
            processes.append(server.process)
            server.process = None
    _stop_groups(processes, grace_s)
    for server in servers:
        if server._log:
            server._log.close()
            server._log = None


def _stop_groups(processes: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    # start_new_session made each server its group's leader: its pid is the group's id
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        live = [p for p in processes if group_alive(p.pid)]
        if not live:
            break
        for process in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and live:
            for process in live:
                process.poll()  # reaps the leader: a zombie still counts in its group
            live = [p for p in live if group_alive(p.pid)]
            if live:
                time.sleep(0.2)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def stop_all() -> None:
    """Stop every server this process started: the last line of defence against orphans."""
    stop_servers(list(_LIVE), grace_s=5.0)


atexit.register(stop_all)


@dataclass(frozen=True)
class ExternalServer:
    """A server someone else runs (``--vllm-url``): measured, never started or stopped."""

    base_url: str

    def check_alive(self) -> None:
        if not healthy(self.base_url):
            raise ServerError(f"vLLM server at {self.base_url} does not answer /health")
