"""One pytest session's vLLM perf state as one object (``PerfSession``, in the config's
stash, as pytest-xdist registers its ``DSession``): the settings, the server pool,
the outcomes, progress lines (a worker's relayed to its controller's terminal), a
worker's own devices, and the controller's one summary of every worker's results."""

from __future__ import annotations

import contextlib
import os
import time
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
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool
from pytest_vllm_perf.settings import Settings

__all__ = ["COST_MARK", "SESSION", "WORKER_OUTPUT", "PerfSession", "of"]

WORKER_OUTPUT: Final = "vllm_perf_report"
# where a test's setup began, before its servers boot: what its CostClock counts from
COST_MARK = pytest.StashKey[CostClock]()


class PerfSession:
    """What the plugin's hooks and fixtures share for one session: its settings (the
    collection adds the run's test counts), its servers, its outcomes, its start (for
    its minutes), and its pytest-xdist role: a worker's own devices and relayed
    progress, or on the controller the relay and each worker's report as it ended."""

    def __init__(self, config: pytest.Config, settings: Settings, pool: ServerPool) -> None:
        self.config = config
        self.settings = settings
        self.pool = pool
        self.outcomes: list[Outcome] = []
        self.worker_reports: list[tuple[str, Report]] = []
        self.started = time.monotonic()
        self.relay: relay.Relay | None = None
        self.exit_note = ""  # why the run's exit status is not pytest's own (exit 6)

    @classmethod
    def start(cls, config: pytest.Config) -> PerfSession:
        """Read the settings (a usage error before anything else), take a worker's
        devices, make the pool, start a controller's relay; kept in the stash."""
        settings = Settings.from_config(config)
        share = own_devices(config, settings) if is_worker(config) else 1
        pool = ServerPool(
            PoolConfig(
                cache_dir=settings.cache_dir,
                model=settings.model,
                preset=settings.preset,
                platform=settings.platform,
                boot_timeout_s=settings.boot_timeout_s,
                external_url=settings.url,
                split_memory=settings.ab and settings.ab_mode == "resident",
                gpu_share=share,
            ),
            progress_writer(config),
        )
        session = cls(config, settings, pool)
        config.stash[SESSION] = session
        session.start_relay()
        return session

    @property
    def is_worker(self) -> bool:
        return is_worker(self.config)

    def start_relay(self) -> None:
        """On a pytest-xdist controller whose workers are to come, relay their progress."""
        config = self.config
        workers = config.getoption("numprocesses", None) or config.getoption("tx", None)
        if self.is_worker or not config.pluginmanager.hasplugin("xdist") or not workers:
            return
        self.relay = relay.Relay(terminal_line(config))
        self.relay.start()

    def stop_relay(self) -> None:
        """Stop the relay once: at the session's end, or at unconfigure if the session
        never ended (a usage error after configure)."""
        found, self.relay = self.relay, None
        if found is not None:
            found.stop()

    def stop(self) -> None:
        """At unconfigure: the relay, then every server."""
        self.stop_relay()
        self.pool.stop()

    def run_record(self) -> dict[str, Any]:
        """What the session was, for its report: its shard and the budgets it judged under."""
        settings = self.settings
        return {
            "shard": None if settings.shard is None else "{}/{}".format(*settings.shard),
            "ab_tests": settings.ab_tests,
            "stored_tests": settings.stored_tests,
            "ab_run_alpha": settings.ab_run_alpha,
            "stored_run_alpha": settings.stored_run_alpha,
        }

    def merged_summary(self, terminalreporter: Any) -> None:
        """The controller's one summary, report files and line of every worker's results."""
        reports = sorted(self.worker_reports, key=lambda r: r[0])
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
        paths = self.settings.report_paths
        for path in formats.write(view, paths, os.environ.get("GITHUB_STEP_SUMMARY")):
            terminalreporter.write_line(f"vLLM perf report written: {path}")
        terminalreporter.write_line(
            headline.text, bold=True, red=headline.failed, green=not headline.failed
        )


SESSION = pytest.StashKey[PerfSession]()


def of(config: pytest.Config) -> PerfSession:
    """The session's state (``PerfSession.start`` put it in the stash at configure)."""
    return config.stash[SESSION]


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
