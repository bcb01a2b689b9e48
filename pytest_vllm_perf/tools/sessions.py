"""The gate's steps as pytest sessions in subprocesses (``vllm-perf prgate``): each
session's stderr passed through with its usage errors kept, and Ctrl-C or SIGTERM
handed on so that the session stops its servers and writes its report."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["GRACE_S", "INTERRUPTED", "Step", "interrupt", "run", "stop"]

# the note of a step that Ctrl-C or SIGTERM cut short (its status is then 2)
INTERRUPTED: Final = "interrupted"


@dataclass(frozen=True)
class Step:
    """One pytest session of the gate, as it ran."""

    name: str
    argv: tuple[str, ...]
    status: int | None  # pytest's exit status; None when skipped
    wall_s: float
    report_md: str  # the session's --vllm-markdown report ("" if none)
    note: str = ""


def run(name: str, argv: list[str], out: Path) -> Step:
    """One pytest session, its stderr passed through and its usage errors kept (a
    missing baseline is named in the verdict line, not only 200 lines above it). On
    Ctrl-C or SIGTERM the session gets SIGINT (if the terminal's did not reach it) and
    up to ``GRACE_S`` to stop its servers and write its report; the step is then
    marked interrupted and no further step starts."""
    report = out / f"{name}.md"
    started = time.monotonic()
    print(f"[prgate] {name}: {' '.join(argv)}", flush=True)
    # the session's own job-summary table would repeat the one this gate writes
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    errors: list[str] = []
    note = ""
    with subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) as proc:  # noqa: S603
        copier = threading.Thread(target=relay, args=(proc, errors), daemon=True)
        copier.start()
        try:
            status = proc.wait()
        except KeyboardInterrupt:
            note = INTERRUPTED
            status = stop(proc)
        copier.join(timeout=5)
    wall = time.monotonic() - started
    print(f"[prgate] {name}: exit {status} after {wall / 60:.1f} min", flush=True)
    text = report.read_text(encoding="utf-8") if report.is_file() else ""
    if not note and status == 4 and errors:
        note = errors[0]
    return Step(name, tuple(argv), status, wall, text, note)


GRACE_S: Final = 30.0  # a session stops its servers in under 5 s (bench/ctrl_c_boot.py)


def relay(proc: subprocess.Popen[str], errors: list[str]) -> None:
    """Copy the session's stderr to ours, keeping its ``ERROR:`` lines."""
    assert proc.stderr is not None
    for line in proc.stderr:
        sys.stderr.write(line)
        if line.startswith("ERROR: "):
            errors.append(line.strip().removeprefix("ERROR: "))
    sys.stderr.flush()


def stop(proc: subprocess.Popen[str]) -> int:
    with contextlib.suppress(ProcessLookupError):
        if proc.poll() is None:
            time.sleep(0.5)  # the terminal's Ctrl-C reaches the whole process group
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        proc.terminate()  # its own SIGTERM handler stops its servers too
        return proc.wait()


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
