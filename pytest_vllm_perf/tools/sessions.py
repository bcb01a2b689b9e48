"""The gate's steps as pytest sessions in subprocesses (``vllm-perf prgate``): each
session's stderr passed through with its usage errors kept, and Ctrl-C or SIGTERM
handed on so that the session stops its servers and writes its report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pytest_vllm_perf.core.errors import VllmPerfError
from pytest_vllm_perf.core.report import Report

__all__ = [
    "GRACE_S",
    "INIT_HINT",
    "INTERRUPTED",
    "STORED_MODES",
    "Step",
    "interrupt",
    "own_words",
    "regressions",
    "run",
    "stop",
]

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
    report_json: str = ""  # the session's --vllm-json report ("" if none): what is read


def run(name: str, argv: list[str], out: Path) -> Step:
    """One pytest session, its stderr passed through and its usage errors kept (a
    missing baseline is named in the verdict line, not only 200 lines above it). The
    session runs in a process group of its own, so a terminal's Ctrl-C reaches this
    gate alone: a session still importing its plugins answered the terminal's SIGINT
    with Python's traceback and exit -2. On Ctrl-C or SIGTERM the session gets SIGTERM,
    which ends it quietly before the plugin is configured and afterwards stops its
    servers and writes its report (``plugin._on_sigterm``), within ``GRACE_S``; the
    step is then marked interrupted (status 2) and no further step starts."""
    report = out / f"{name}.md"
    started = time.monotonic()
    print(f"[prgate] {name}: {' '.join(argv)}", flush=True)
    # the session's own job-summary table would repeat the one this gate writes
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    errors: list[str] = []
    note = ""
    with subprocess.Popen(  # noqa: S603 - the gate's own argv, no shell
        argv, env=env, stderr=subprocess.PIPE, text=True, process_group=0
    ) as proc:
        copier = threading.Thread(target=relay, args=(proc, errors), daemon=True)
        copier.start()
        try:
            status = proc.wait()
        except KeyboardInterrupt:
            note = INTERRUPTED
            stop(proc)
            status = 2  # pytest's "interrupted", whatever the signal made of the session
        copier.join(timeout=5)
    wall = time.monotonic() - started
    print(f"[prgate] {name}: exit {status} after {wall / 60:.1f} min", flush=True)
    text = report.read_text(encoding="utf-8") if report.is_file() else ""
    data = report.with_suffix(".json")
    found = data.read_text(encoding="utf-8") if data.is_file() else ""
    if not note and status == 4 and errors:
        note = errors[0]
    return Step(name, tuple(argv), status, wall, text, note, found)


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
    """End a session: SIGTERM, then SIGKILL to its process group after ``GRACE_S``."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)  # the plugin stops its servers on it
    try:
        return proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# prgate's --stored-mode values and the plugin's flags each runs, one session a flag
STORED_MODES: Final = {
    "require": ("--vllm-require-baseline",),
    "add-boot": ("--vllm-add-boot",),
    "save": ("--vllm-save-baseline",),
    # a store that can gate: a save, then one more boot (a gate needs two to learn its drift)
    "init": ("--vllm-save-baseline", "--vllm-add-boot"),
}
# the plugin's flags that a hint may name, as a prgate user gives them
_OWN_WORDS: Final = {
    flags[0]: f"--stored-mode {mode}" for mode, flags in STORED_MODES.items() if len(flags) == 1
}
INIT_HINT: Final = (
    "no stored baseline yet: run once with --no-ab --stored-mode init (a save and one "
    "more boot) and commit .vllm-perf/"
)


def own_words(text: str) -> str:
    """A session's hint in prgate's own options (``--stored-mode add-boot``, not the
    plugin's ``--vllm-add-boot``)."""
    for flag, own in _OWN_WORDS.items():
        text = text.replace(flag, own)
    return text


def regressions(step: Step) -> list[str]:
    """``TEST[PROFILE] METRIC xRATIO`` of each gated regression in the step's JSON report
    (never its printed text); one that cannot be read names itself."""
    if not step.report_json:
        return []
    try:
        report = Report.from_json(json.loads(step.report_json), f"{step.name}.json")
    except (ValueError, VllmPerfError) as exc:
        return [f"({step.name}.json unreadable: {exc})"]
    return [
        f"{r.test.rpartition('::')[2]}[{r.profile}] {v.metric} x{v.ratio:.3f}"
        for r in report.results
        if r.baseline is not None
        for v in r.baseline.regressions
    ]
