"""One pytest session's state and its pytest-xdist roles: the stash keys the plugin's
hooks share, progress lines (a worker's relayed to its controller's terminal), a
worker's own devices, and the controller's one summary of every worker's results."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Final

import pytest

from pytest_vllm_perf.core.errors import VllmPerfError
from pytest_vllm_perf.core.records import Outcome, Progress
from pytest_vllm_perf.core.report import Report
from pytest_vllm_perf.fixture import CostClock
from pytest_vllm_perf.report import formats, merged, relay
from pytest_vllm_perf.report.view import View
from pytest_vllm_perf.serving import hardware
from pytest_vllm_perf.serving.pool import ServerPool
from pytest_vllm_perf.settings import Settings

__all__ = [
    "COST_MARK",
    "OUTCOMES",
    "POOL",
    "RELAY",
    "SETTINGS",
    "STARTED",
    "WORKER_OUTPUT",
    "WORKER_REPORTS",
    "is_worker",
    "merged_summary",
    "own_devices",
    "progress_writer",
    "run_record",
    "start_relay",
    "stop_relay",
    "terminal_line",
]

SETTINGS = pytest.StashKey[Settings]()
POOL = pytest.StashKey[ServerPool]()
RELAY = pytest.StashKey[relay.Relay]()  # a pytest-xdist controller's relay of progress
OUTCOMES = pytest.StashKey[list[Outcome]]()
STARTED = pytest.StashKey[float]()  # the session's start (time.monotonic), for its minutes
# under pytest-xdist, on the controller: each worker's --vllm-json report, as it ended
WORKER_REPORTS = pytest.StashKey[list[tuple[str, Report]]]()
WORKER_OUTPUT: Final = "vllm_perf_report"
# where a test's setup began, before its servers boot: what its CostClock counts from
COST_MARK = pytest.StashKey[CostClock]()


def terminal_line(config: pytest.Config) -> Progress:
    def write(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            return
        disabled = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
        with disabled:
            reporter.ensure_newline()
            reporter.write_line(line)

    return write


def progress_writer(config: pytest.Config) -> Progress:
    """Progress lines on the terminal; a pytest-xdist worker's go to its controller's."""
    folder = os.environ.get(relay.RELAY_ENV)
    if is_worker(config) and folder:
        worker = str(config.workerinput.get("workerid", "gw"))  # type: ignore[attr-defined]
        return relay.worker_progress(Path(folder), worker)
    write = terminal_line(config)
    return lambda message: write(f"[vllm-perf] {message}")


def start_relay(config: pytest.Config) -> None:
    """On a pytest-xdist controller whose workers are to come, relay their progress."""
    workers = config.getoption("numprocesses", None) or config.getoption("tx", None)
    if is_worker(config) or not config.pluginmanager.hasplugin("xdist") or not workers:
        return
    found = relay.Relay(terminal_line(config))
    found.start()
    config.stash[RELAY] = found


def stop_relay(config: pytest.Config) -> None:
    """Stop the relay once: at the session's end, or at unconfigure if the session
    never ended (a usage error after configure)."""
    found = config.stash.get(RELAY, None)
    if found is not None:
        del config.stash[RELAY]
        found.stop()


def run_record(settings: Settings) -> dict[str, Any]:
    """What a session was, for its report: its shard and the budgets it judged under."""
    return {
        "shard": None if settings.shard is None else "{}/{}".format(*settings.shard),
        "ab_tests": settings.ab_tests,
        "stored_tests": settings.stored_tests,
        "ab_run_alpha": settings.ab_run_alpha,
        "stored_run_alpha": settings.stored_run_alpha,
    }


def own_devices(config: pytest.Config, settings: Settings) -> int:
    """A pytest-xdist worker's own devices, set in its environment before any server
    boots (its servers inherit it), and how many workers share its GPU: on a GPU host
    its group of the job's GPUs, so each worker is judged under its own hardware class,
    or with fewer GPUs than workers and ``--vllm-workers-per-gpu``, one GPU it shares
    (``hardware.worker_devices``); on the CPU engine one core for its
    engines' OpenMP thread, the workers alternating (vLLM's CPU build binds every
    engine to the last core by default: under xdist all workers' engines ran on that
    one core while the other idled, 120% CPU of 200% over a CI run)."""
    workerinput = getattr(config, "workerinput", {})
    worker, workers = (
        int(str(workerinput.get("workerid", "gw0"))[2:]),
        int(workerinput.get("workercount", 1)),
    )
    if settings.platform != "cpu" and settings.url is None:
        mask = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = hardware.all_gpus()
        devices = (
            [part.strip() for part in mask.split(",") if part.strip()]
            if mask is not None
            else [index for index, _ in gpus]
        )
        if devices and gpus:
            try:
                own, share = hardware.worker_devices(
                    devices, worker, workers, settings.workers_per_gpu
                )
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(own)
            return share
    cores = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(cores[worker % len(cores)]))
    return 1


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # a pytest-xdist worker


def merged_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The controller's one summary, JSON and Markdown of every worker's results."""
    settings = config.stash[SETTINGS]
    found = config.stash[WORKER_REPORTS]
    reports = sorted(found, key=lambda r: r[0])
    try:
        doc, missing = merged.merge(reports, shards_of_one_run=False)
    except VllmPerfError as exc:
        terminalreporter.write_line(f"vLLM perf workers' reports not merged: {exc}", red=True)
        return
    terminalreporter.section("vLLM perf summary")
    lines, headline = merged.summary(doc, missing)
    for line in lines:
        terminalreporter.write_line(line)
    view = View(doc, headline, missing=tuple(missing))
    written = formats.write(view, settings.report_paths, os.environ.get("GITHUB_STEP_SUMMARY"))
    for path in written:
        terminalreporter.write_line(f"vLLM perf report written: {path}")
    terminalreporter.write_line(
        headline.text, bold=True, red=headline.failed, green=not headline.failed
    )
