"""The server lifecycle without vLLM: a stub launcher (tests/stub_launcher.py) boots,
hangs, crashes, loses its port or ignores SIGTERM, and the server and pool code must
turn each into the documented error, retry or clean stop (the lifecycle's untested list)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_vllm_perf.config.profiles import EngineSettings, Profile
from pytest_vllm_perf.core.errors import ServerError
from pytest_vllm_perf.serving import pool as pool_module
from pytest_vllm_perf.serving import server as server_module
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool
from pytest_vllm_perf.serving.server import (
    INTERRUPT_GRACE_S,
    PORT_ATTEMPTS,
    ServerSpec,
    VllmServer,
)

STUB = Path(__file__).resolve().parents[1] / "stub_launcher.py"


@pytest.fixture
def stub(tmp_path, monkeypatch):
    """Set the stub's mode; returns a function giving (mode, port, pid) per start."""
    starts = tmp_path / "starts"
    monkeypatch.setenv("STUB_STARTS", str(starts))

    def use(mode: str) -> None:
        monkeypatch.setenv("STUB_MODE", mode)

    def started() -> list[tuple[str, int, int]]:
        if not starts.exists():
            return []
        return [
            (m, int(p), int(pid))
            for m, p, pid in (ln.split() for ln in starts.read_text().splitlines())
        ]

    use.started = started  # type: ignore[attr-defined]
    return use


def server(tmp_path: Path, timeout_s: float = 60.0) -> VllmServer:
    spec = ServerSpec("m", (), launcher=(str(STUB),))
    return VllmServer(spec, tmp_path / "logs" / "server.log", timeout_s)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_a_boot_that_never_answers_times_out_and_leaves_nothing(tmp_path, stub):
    stub("never")
    vllm = server(tmp_path, timeout_s=2)
    with pytest.raises(ServerError, match=r"not healthy after 2s \(--vllm-boot-timeout\)") as err:
        vllm.start()
    assert "stub vLLM (never) starting" in str(err.value)  # the log's tail comes with it
    [(_, _, pid)] = stub.started()
    assert gone(pid)


def test_ctrl_c_during_a_boot_stops_the_server_with_the_short_grace(tmp_path, stub, monkeypatch):
    """Ctrl-C while the boot waits for ``/health``: the server is stopped with
    ``INTERRUPT_GRACE_S`` of TERM before KILL, not the 20 s a finished test's server
    gets (a booting vLLM on a loaded machine used all 20: the session took 22 s to
    end), and the interrupt goes on up. Broken on purpose (the interrupt stopping it
    like any other error), the grace read is 20 s and this fails."""
    stub("never")
    graces: list[float] = []
    real = server_module.stop_servers

    def spy(servers, grace_s=20.0):  # type: ignore[no-untyped-def]
        graces.append(grace_s)
        real(servers, grace_s)

    pids: list[int] = []

    def interrupted(*_args):  # type: ignore[no-untyped-def]
        assert vllm.process is not None
        pids.append(vllm.process.pid)
        raise KeyboardInterrupt

    monkeypatch.setattr(server_module, "stop_servers", spy)
    vllm = server(tmp_path)
    monkeypatch.setattr(vllm, "_wait_healthy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        vllm.start()
    assert graces == [INTERRUPT_GRACE_S] and INTERRUPT_GRACE_S <= 3
    assert gone(pids[0]) and vllm.process is None


def test_a_taken_port_is_retried_once_then_fails_naming_it(tmp_path, stub):
    stub("port-taken,ready")
    vllm = server(tmp_path)
    notes: list[str] = []
    vllm.start(notes.append)
    try:
        (_, first, _), (_, second, _) = stub.started()
        assert first != second == vllm.port
        assert [n for n in notes if "was taken" in n] == [
            f"port {first} was taken before vLLM bound it; retrying on {second}"
        ]
        assert (tmp_path / "logs" / f"server.port-{first}.log").is_file()  # kept beside
    finally:
        vllm.stop()
    stub("port-taken")
    again = server(tmp_path / "again")
    with pytest.raises(ServerError, match=f"address already in use, {PORT_ATTEMPTS} times"):
        again.start()
    assert len(stub.started()) == 2 + PORT_ATTEMPTS


def test_a_crash_during_boot_names_the_exit_code_and_the_log(tmp_path, stub):
    stub("crash")
    with pytest.raises(ServerError, match="exited with code 3 during boot") as err:
        server(tmp_path).start()
    assert "ValueError: stub engine failed" in str(err.value)


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path, stub):
    """TERM, then KILL after the grace period, to the whole group: the stubborn server
    and its stubborn child both go. Broken on purpose (no SIGKILL step in _stop_groups),
    both are still alive and the last assertion fails."""
    stub("stubborn")
    vllm = server(tmp_path)
    vllm.start()
    process = vllm.process
    assert process is not None
    [(_, _, pid)] = stub.started()
    children = [
        int(p.name)
        for p in Path("/proc").glob("[0-9]*")
        if (p / "stat").exists() and _pgrp(p) == pid and int(p.name) != pid
    ]
    assert children, "the stub starts a child in its group"
    vllm.stop(grace_s=0.5)
    assert process.returncode == -signal.SIGKILL  # TERM was ignored: KILL ended it
    assert all(gone(p) for p in [pid, *children])


def test_a_killed_api_server_is_noticed_and_its_orphaned_child_stopped(tmp_path, stub):
    """The API server killed (SIGKILL), its engine core left running in its group: the
    death is reported as the run's error, and stopping the server stops the orphan.
    On the real engine this cost CI a boot of its own; vLLM's engine core also exits
    when its parent dies, which would hide a stop that missed it, so the stub's child
    does not. Broken on purpose (``_stop_groups`` signalling the leader's pid instead
    of its group), the child survives and the last assertion fails."""
    stub("parent")
    vllm = server(tmp_path)
    vllm.start()
    [(_, _, pid), (_, _, child)] = stub.started()
    vllm.check_alive()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ServerError, match=r"vLLM server died \(exit -9\)"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the poll sees the death at once, or soon
            vllm.check_alive()
            time.sleep(0.05)
    assert not gone(child)  # orphaned, still running
    vllm.stop(grace_s=5)
    assert gone(child)


# a pytest process that starts a server and is then killed outright, as a pytest-xdist
# worker is when its controller ends after a SIGTERM
STARTER = """
import sys, time
from pathlib import Path
from pytest_vllm_perf.serving.server import ServerSpec, VllmServer

server = VllmServer(ServerSpec("m", (), launcher=(sys.argv[1],)), Path(sys.argv[2]), 60)
server.start()
print(server.process.pid, flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("mode", ["ready", "stubborn"])
def test_a_server_stops_when_the_process_that_started_it_is_killed(
    tmp_path, stub, monkeypatch, mode
):
    """SIGKILL to the process that started the server: no ``stop`` runs there, and the
    launcher stops its own group (TERM; KILL after the grace period for a group that
    ignores TERM, the stubborn server and its child). Under ``pytest -n 2`` a SIGTERM to
    the controller left both workers' vLLM servers running, six processes. Broken on
    purpose (``watch_parent`` returning at once), both cases leave the group alive."""
    stub(mode)
    monkeypatch.setenv("STUB_GRACE_S", "1")
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(STUB), str(tmp_path / "logs" / "s.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    pid = int(starter.stdout.readline())
    members = {pid, *(int(q.name) for q in Path("/proc").glob("[0-9]*") if _pgrp(q) == pid)}
    try:
        assert not gone(pid) and (len(members) > 1 or mode == "ready"), members
        starter.kill()
        starter.wait()
        deadline = time.monotonic() + 20
        while not all(gone(p) for p in members) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(gone(p) for p in members), [p for p in members if not gone(p)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # what a failure left
    log = (tmp_path / "logs" / "s.log").read_text()
    assert "that started this server is gone; stopping the server" in log, log


def test_a_pool_stops_its_servers_at_once(tmp_path, stub, monkeypatch):
    """An A/B run's two servers are stopped together: each gets TERM before either has
    gone (each stub takes a second to shut down after TERM). Broken on purpose (the pool
    stopping one slot, then the other), the second TERM comes after the first exit and
    the order check fails."""
    stub("slow-exit")
    pool = ServerPool(PoolConfig(tmp_path, model="m", platform="cpu"))
    spec = ServerSpec("m", (), launcher=(str(STUB),))
    monkeypatch.setattr(
        pool, "spec", lambda profile, python=None: (spec, EngineSettings({}, ()), "cpu")
    )
    handles = [pool.get(Profile(side, tmp_path / f"{side}.yaml"), slot=side) for side in "ab"]
    pool.stop()
    assert all(not h.server.running() for h in handles)
    events = [line.split() for line in (tmp_path / "starts").read_text().splitlines()]
    term = {pid: float(t) for kind, pid, t in events if kind == "term"}
    exit_ = {pid: float(t) for kind, pid, t in events if kind == "exit"}
    assert len(term) == len(exit_) == 2, events
    assert max(term.values()) < min(exit_.values()), events


def _pgrp(proc_dir: Path) -> int | None:
    try:
        return int((proc_dir / "stat").read_text().split(")")[-1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def test_a_failed_boot_is_remembered_and_not_retried(tmp_path, stub, monkeypatch):
    """The pool's memo: a profile whose boot failed fails its later tests at once."""
    stub("crash")
    pool = ServerPool(PoolConfig(tmp_path, model="m", platform="cpu"))
    spec = ServerSpec("m", (), launcher=(str(STUB),))
    monkeypatch.setattr(
        pool, "spec", lambda profile, python=None: (spec, EngineSettings({}, ()), "cpu")
    )
    profile = Profile("p", tmp_path / "p.yaml")
    with pytest.raises(ServerError, match="exited with code 3"):
        pool.get(profile)
    with pytest.raises(ServerError, match="profile 'p' failed to boot earlier"):
        pool.get(profile)
    assert len(stub.started()) == 1


def test_the_next_boot_waits_for_gpu_memory_to_be_released(tmp_path, monkeypatch):
    """A stand-in nvidia-smi reports 50 GB in use twice, then 100 MB: the wait says
    so and returns on the third reading; only CUDA_VISIBLE_DEVICES's GPU counts."""
    calls = tmp_path / "calls"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'n=$(wc -l < "{calls}")\n'
        'if [ "$n" -le 2 ]; then used=50000; else used=100; fi\n'
        'echo "0, $used"\necho "1, 90000"\n'
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # GPU 1's 90 GB is another job's
    notes: list[str] = []
    monkeypatch.setattr(pool_module.time, "sleep", lambda _s: None)
    pool_module.wait_for_gpu_memory(60, notes.append)
    assert notes == ["waiting for GPU memory to be released (50000 MiB in use)"] * 2
    assert len(calls.read_text().split()) == 3


def test_workers_booting_one_profile_in_one_second_write_two_logs(tmp_path):
    # pytest-xdist workers share the cache folder: same profile, same second, two processes
    first = pool_module.server_log(tmp_path, "default", 1765000000.2, pid=4001)
    second = pool_module.server_log(tmp_path, "default", 1765000000.7, pid=4002)
    assert first != second
    assert first.parent == second.parent == tmp_path / "logs"
    assert first.name.startswith("default-1765000000-")
