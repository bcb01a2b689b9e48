"""``vllm-perf prgate`` where a new user trips: the first gate in a repository with no
stored baselines, and Ctrl-C in the middle of a step. Against the fake server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.real_engine import sigint_restored
from tests.scratch_git import commit_all

REPO = Path(__file__).resolve().parents[2]


def prgate(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest_vllm_perf.tools.prgate",
        ".",
        "--base",
        "HEAD",
        "--out",
        "gate-out",
        *args,
    ]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_the_first_gate_without_baselines_names_the_missing_one_on_its_last_line(
    project, fake_vllm
):
    """The README's flow never saved a baseline, so the stored step always failed with
    exit 4 and a last line that only said "usage error". Seen failing with the
    session's ERROR line not kept (the note empty)."""
    commit_all(project.path)
    done = subprocess.run(
        prgate("--stored", "p", "--", f"--vllm-url={fake_vllm.url}", "-p", "no:cacheprovider"),
        cwd=project.path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    head = "[prgate] FAIL: stored usage error or a baseline that cannot gate ("
    assert last.startswith(head), last
    assert "--stored-mode require (no baseline): no baseline at" in last, last
    assert "--stored-mode init" in last, last


def test_the_baseline_advice_followed_literally_leads_to_a_gate(project, fake_vllm):
    """From an empty repository: the first gate fails naming the missing baseline and
    the one command that makes a store that can gate; that command run as printed,
    its baselines committed, the next gate passes, and no hint names a pytest flag
    where prgate has its own. The advice was "--stored-mode save", after which the
    next gate failed again with one boot and "add a boot (--vllm-add-boot)". Seen
    failing with ``init`` as a plain save (the third gate: exit 4, one boot)."""
    commit_all(project.path)
    url = (f"--vllm-url={fake_vllm.url}", "-p", "no:cacheprovider")

    def gate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            prgate("--stored", "p", *args, "--", *url),
            cwd=project.path, env=env(), capture_output=True, text=True, timeout=600,
            check=False,
        )  # fmt: skip

    first = gate()
    assert first.returncode == 4, first.stdout + first.stderr
    last = first.stdout.strip().splitlines()[-1]
    assert "--vllm-" not in last.split("no stored baseline yet", 1)[1], last
    advice = last.split("run once with ", 1)[1].split(" (", 1)[0].split()
    assert advice == ["--no-ab", "--stored-mode", "init"], last
    made = gate(*advice)
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stdout.strip().splitlines()[-1].startswith("[prgate] PASS"), made.stdout
    subprocess.run(["git", "add", "-A", ".vllm-perf"], cwd=project.path, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "baselines"],
        cwd=project.path, check=True,
    )  # fmt: skip
    third = gate()
    assert third.returncode == 0, third.stdout + third.stderr
    assert third.stdout.strip().splitlines()[-1].startswith("[prgate] PASS: stored passed")


@pytest.mark.parametrize(
    ("moment", "group"),
    [("measuring", False), ("measuring", True), ("starting", True)],
    ids=["measuring-gate-alone", "measuring-terminal", "starting-terminal"],
)
def test_ctrl_c_ends_the_gate_with_a_summary_and_no_traceback(project, fake_vllm, moment, group):
    """Ctrl-C printed a Python traceback and wrote no summary. SIGINT to prgate alone
    (as a CI's cancel reaches only the job's process), or to its whole process group
    as a terminal's Ctrl-C does, once the session measures or while it still starts:
    the session is interrupted in turn, the summary is written, the gate exits 2 and
    its last line says FAIL with the step interrupted. Seen failing with prgate's
    KeyboardInterrupt handling removed from the step (the session, not signalled, ran
    on to its end), and, for the terminal's Ctrl-C while the session started, with
    the session in prgate's process group (exit 254, the session's traceback, "stored
    exit -2")."""
    commit_all(project.path)
    args = (
        "--stored",
        "p",
        "--stored-mode",
        "save",
        "--",
        f"--vllm-url={fake_vllm.url}",
        "--vllm-repeat=200",
        "-p",
        "no:cacheprovider",
    )
    wait_for = "[vllm-perf] --vllm-url: measuring" if moment == "measuring" else "[prgate] stored:"
    with subprocess.Popen(
        prgate(*args),
        cwd=project.path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_restored,
        start_new_session=True,
    ) as proc:
        assert proc.stdout is not None
        seen = []
        # until the session measures: a fixed 2 s after the step began once reached
        # pytest still importing its plugins beside two CPU burners (a fresh-clone CI
        # run), where Ctrl-C is Python's traceback, not the session's
        for line in proc.stdout:
            seen.append(line)
            if wait_for in line:
                break
        time.sleep(0.5 if moment == "measuring" else 0.2)
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    log = "".join(seen) + rest
    assert proc.returncode == 2, log
    assert "Traceback" not in log, log
    # the session itself was interrupted (not left to run its 200 passes to the end)
    assert " passed" not in log, log
    if moment == "measuring":
        assert "KeyboardInterrupt" in log, log
    assert (
        log.strip().splitlines()[-1] == "[prgate] FAIL: stored interrupted; ab skipped "
        "(no profile changed since HEAD)"
    ), log
    summary = (project.path / "gate-out" / "summary.md").read_text()
    assert "| stored | 2 |" in summary and "interrupted" in summary
