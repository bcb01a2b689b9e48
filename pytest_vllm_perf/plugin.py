"""The pytest surface of pytest-vllm-perf: options, markers, fixtures and hooks, nothing more.

Options are parsed once into :class:`settings.Settings`; the fixture object lives
in :mod:`fixture`; measuring is :mod:`measure`; reports are :mod:`report`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import signal
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from pytest_vllm_perf import marker, options
from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.core.errors import PlotsUnavailable, ServerError, VllmPerfError
from pytest_vllm_perf.core.records import Outcome, Progress
from pytest_vllm_perf.fixture import CostClock, PerfFixture
from pytest_vllm_perf.marker import preflight, stored_baselines
from pytest_vllm_perf.report import document, merged, plots, relay, sides, text
from pytest_vllm_perf.serving import hardware, hub, server
from pytest_vllm_perf.serving.pool import PoolConfig, ServerHandle, ServerPool
from pytest_vllm_perf.settings import Settings

SETTINGS = pytest.StashKey[Settings]()
POOL = pytest.StashKey[ServerPool]()
RELAY = pytest.StashKey[relay.Relay]()  # a pytest-xdist controller's relay of progress
OUTCOMES = pytest.StashKey[list[Outcome]]()
STARTED = pytest.StashKey[float]()  # the session's start (time.monotonic), for its minutes
# under pytest-xdist, on the controller: each worker's --vllm-json report, as it ended
WORKER_REPORTS = pytest.StashKey[list[tuple[str, dict[str, Any]]]]()
WORKER_OUTPUT: Final = "vllm_perf_report"
# where a test's setup began, before its servers boot: what its CostClock counts from
COST_MARK = pytest.StashKey[CostClock]()
PERF_FIXTURES = ("vllm_perf", "vllm_server")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vllm_perf(workload=NAME, thresholds={...}, tolerances={...}, profile=NAME, "
        "repeat=N, gate=[METRIC, ...], **overrides): a vLLM perf test",
    )
    settings = Settings.from_config(config)
    config.stash[SETTINGS] = settings
    share = _own_devices(config, settings) if _worker(config) else 1
    config.stash[OUTCOMES] = []
    config.stash[WORKER_REPORTS] = []
    config.stash[STARTED] = time.monotonic()
    config.stash[POOL] = ServerPool(
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
        _progress_writer(config),
    )
    _start_relay(config)
    _stop_servers_on_sigterm()


def _stop_servers_on_sigterm() -> None:
    """CI cancels jobs with SIGTERM, which skips atexit; turn it into a clean exit."""
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: object) -> None:
    """Stop every server, then interrupt the whole session as Ctrl-C does (exit 2).

    SystemExit raised inside a running test was recorded as that test's failure, and
    pytest went on to the next test, booting its server; KeyboardInterrupt
    is the one exception pytest ends the session on. make, timeout and CI runners
    often send TERM to a whole process group, so a second TERM can arrive while the
    teardown runs; raised inside it, it would cut the teardown short and leave the
    server running. Further TERMs are ignored."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server.stop_all()
    raise KeyboardInterrupt(f"signal {signum}")


def _terminal_line(config: pytest.Config) -> Progress:
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


def _progress_writer(config: pytest.Config) -> Progress:
    """Progress lines on the terminal; a pytest-xdist worker's go to its controller's."""
    folder = os.environ.get(relay.RELAY_ENV)
    if _worker(config) and folder:
        worker = str(config.workerinput.get("workerid", "gw"))  # type: ignore[attr-defined]
        return relay.worker_progress(Path(folder), worker)
    write = _terminal_line(config)
    return lambda message: write(f"[vllm-perf] {message}")


def _start_relay(config: pytest.Config) -> None:
    """On a pytest-xdist controller whose workers are to come, relay their progress."""
    workers = config.getoption("numprocesses", None) or config.getoption("tx", None)
    if _worker(config) or not config.pluginmanager.hasplugin("xdist") or not workers:
        return
    found = relay.Relay(_terminal_line(config))
    found.start()
    config.stash[RELAY] = found


def _stop_relay(config: pytest.Config) -> None:
    """Stop the relay once: at the session's end, or at unconfigure if the session
    never ended (a usage error after configure)."""
    found = config.stash.get(RELAY, None)
    if found is not None:
        del config.stash[RELAY]
        found.stop()


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_relay(config)
    pool = config.stash.get(POOL, None)
    if pool is not None:
        pool.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not any(f in metafunc.fixturenames for f in PERF_FIXTURES):
        return
    mark = metafunc.definition.get_closest_marker("vllm_perf")
    pinned = mark.kwargs.get("profile") if mark else None
    selected = metafunc.config.stash[SETTINGS].profiles
    names = [pinned] if isinstance(pinned, str) else list(pinned or selected)
    metafunc.parametrize("vllm_profile", names, indirect=True, ids=names)


@pytest.hookimpl(trylast=True)  # after -k/-m deselect: check only the tests that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every perf test's marker and stored baselines, then group perf tests by
    profile (stable), so each server boots once per session."""
    settings = config.stash[SETTINGS]
    # the A/B tests share the run's A/B false-alarm budget, the others the stored one:
    # counted over every shard, so that the shards' tests together spend one budget
    ab_tests = _ab_tests(items) if settings.ab else 0
    stored_tests = _perf_tests(items) - ab_tests
    settings = dataclasses.replace(settings, ab_tests=ab_tests, stored_tests=stored_tests)
    config.stash[SETTINGS] = settings
    if settings.shard is not None:
        kept = [item for item in items if in_shard(item, settings.shard)]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
    seen: set[str] = set()
    problems: list[str] = []
    # every profile a selected test runs under: a broken profiles/default.yaml (read
    # only here, since a project's other test runs need no profile) fails before a boot
    loaded: dict[str, Profile] = {}
    for name in dict.fromkeys(_profile_of(item) for item in items):
        if name is not None:
            try:
                loaded[name] = settings.load_profile(name)
            except pytest.UsageError as exc:
                problems.append(str(exc))
    for item in items:
        test = marker.base_id(item)
        if test not in seen:
            seen.add(test)
            problems += preflight(item, settings)
        problems += stored_baselines(item, settings)
    boots = any(f in getattr(i, "fixturenames", ()) for i in items for f in PERF_FIXTURES)
    if settings.platform == "cuda" and settings.url is None and boots and not hardware.gpu_names():
        # else the CPU engine ran labelled cuda and passed
        problems.append(
            "--vllm-platform=cuda: no NVIDIA GPU is visible here (nvidia-smi lists none, or "
            "CUDA_VISIBLE_DEVICES hides them); use --vllm-platform=auto or cpu"
        )
    if settings.model and settings.url is None and boots and not problems:
        problems += filter(None, [hub.problem(settings.model)])
    if not problems and not config.option.collectonly:  # the engine's own parser, once
        # every file is known to be sound
        wanted = _servers_wanted(items, settings, loaded)
        problems += config.stash[POOL].check_engine_args(wanted)
    if problems:
        raise pytest.UsageError("\n".join(problems))
    order = {name: i for i, name in enumerate(settings.profiles)}

    def key(item: pytest.Item) -> tuple[int, str]:
        name = _profile_of(item)
        if name is None:
            return (-1, "")
        return (order.get(name, len(order)), name)

    items.sort(key=key)


def _servers_wanted(
    items: list[pytest.Item], settings: Settings, loaded: dict[str, Profile]
) -> list[tuple[Profile, str | None]]:
    """Every (profile, interpreter) the selected tests will boot: each one's profile
    (``loaded``: by name), and in an A/B run the base side's of those it judges."""
    judged = {_profile_of(item) for item in items if settings.ab and _judged_ab(item)}
    wanted: list[tuple[Profile, str | None]] = []
    for name, profile in loaded.items():
        wanted.append((profile, None))
        if name in judged:
            wanted.append((settings.base_profile(name)[0], settings.ab_python))
    return wanted


def _perf_tests(items: list[pytest.Item]) -> int:
    """The perf tests selected (those using the ``vllm_perf`` fixture)."""
    return sum("vllm_perf" in getattr(item, "fixturenames", ()) for item in items)


def in_shard(item: pytest.Item, shard: tuple[int, int]) -> bool:
    """Whether ``item`` belongs to shard K of N: by a hash of its test id (profiles
    left out, so that a test's profiles run in one shard, side by side), stable across
    machines and Python processes (crc32, not ``hash``)."""
    k, n = shard
    return zlib.crc32(marker.base_id(item).encode()) % n == k - 1


def _ab_tests(items: list[pytest.Item]) -> int:
    """The perf tests an A/B run judges A against B."""
    return sum(_judged_ab(item) for item in items)


def _pinned(node: pytest.Item) -> bool:
    """Whether the test's marker pins it to a profile (an A/B run leaves it alone)."""
    mark = node.get_closest_marker("vllm_perf")
    return bool(mark and mark.kwargs.get("profile"))


def _judged_ab(item: pytest.Item) -> bool:
    """Whether an A/B run judges this test A against B: a perf test (the ``vllm_perf``
    fixture) not pinned to a profile by its marker (a pinned test runs normally)."""
    return "vllm_perf" in getattr(item, "fixturenames", ()) and not _pinned(item)


def _profile_of(item: pytest.Item) -> str | None:
    """The profile a perf test runs under (its ``vllm_profile`` parameter), else None."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("vllm_profile") if callspec else None


@pytest.hookimpl(tryfirst=True)  # before the fixtures' setup, so that their boots count
def pytest_runtest_setup(item: pytest.Item) -> None:
    pool = item.config.stash.get(POOL, None)
    if pool is not None and "vllm_perf" in getattr(item, "fixturenames", ()):
        item.stash[COST_MARK] = CostClock.now(lambda: pool.booted_s, pool.config.gpus_held())


@pytest.fixture
def vllm_profile(request: pytest.FixtureRequest) -> Profile:
    """The resolved tuning profile this test runs under."""
    settings = request.config.stash[SETTINGS]
    return settings.load_profile(getattr(request, "param", None) or settings.profiles[0])


@pytest.fixture
def vllm_server(request: pytest.FixtureRequest, vllm_profile: Profile) -> ServerHandle:
    """A healthy vLLM server running this test's profile (shared by all its tests)."""
    try:
        return request.config.stash[POOL].get(vllm_profile)
    except ServerError as exc:
        message = str(exc)  # failed outside the handler: the error is printed once
    pytest.fail(message, pytrace=False)


@pytest.fixture
def vllm_perf(request: pytest.FixtureRequest, vllm_server: ServerHandle) -> Iterator[PerfFixture]:
    """Run workloads against this test's vLLM server: ``vllm_perf.run("interference")``."""
    config = request.config
    settings = config.stash[SETTINGS]
    pool = config.stash[POOL]
    base: ServerHandle | Callable[[], ServerHandle] | None = None
    candidate: Callable[[], ServerHandle] | None = None
    failure, note = "", ""
    if settings.ab and not _pinned(request.node):
        # A/B: the base side's server, kept up beside the candidate's (its own slot),
        # or booted in turn with it on one slot (--vllm-ab-mode=sequential); a test
        # pinned to a profile by its marker is not part of the comparison
        try:
            profile, note = settings.base_profile(vllm_server.profile)
            if settings.ab_mode == "sequential":
                mine = request.getfixturevalue("vllm_profile")
                base = functools.partial(pool.get, profile, "main", settings.ab_python)
                candidate = functools.partial(pool.get, mine, "main")
            else:
                base = pool.get(profile, slot="base", python=settings.ab_python)
        except ServerError as exc:
            failure = str(exc)  # failed outside the handler: the error is printed once
    if failure:
        pytest.fail(failure, pytrace=False)
    yield PerfFixture(
        request.node,
        settings,
        vllm_server,
        config.stash[OUTCOMES].append,
        pool.progress,
        base,
        note,
        candidate,
        clock=request.node.stash.get(COST_MARK, None),
    )


def _run_record(settings: Settings) -> dict[str, Any]:
    """What a session was, for its report: its shard and the budgets it judged under."""
    return {
        "shard": None if settings.shard is None else "{}/{}".format(*settings.shard),
        "ab_tests": settings.ab_tests,
        "stored_tests": settings.stored_tests,
        "ab_run_alpha": settings.ab_run_alpha,
        "stored_run_alpha": settings.stored_run_alpha,
    }


def _own_devices(config: pytest.Config, settings: Settings) -> int:
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


def _worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # a pytest-xdist worker


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, its results go to the controller as a report (the
    worker's own terminal and files are nobody's to read or write)."""
    config = session.config
    _stop_relay(config)  # the workers' last lines, before the summary
    outcomes = config.stash.get(OUTCOMES, [])
    if _worker(config) and outcomes:
        report = document.to_json(outcomes, _run_record(config.stash[SETTINGS]))
        config.workeroutput[WORKER_OUTPUT] = json.dumps(report, default=str)  # type: ignore[attr-defined]
    elif SETTINGS in config.stash and config.stash[SETTINGS].inconclusive == "exit":
        undecided = [o.gate.summary() for o in outcomes if o.gate is not None] + [
            str((r.get("baseline") or {}).get("verdict", ""))
            for _, doc in config.stash.get(WORKER_REPORTS, [])
            for r in doc.get("results", [])
        ]
        if session.exitstatus == pytest.ExitCode.OK and "inconclusive" in undecided:
            session.exitstatus = options.INCONCLUSIVE_EXIT


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_testnodedown(node: Any, error: object) -> None:
    found = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
    if found:
        name = str(getattr(node, "gateway", None) and node.gateway.id)
        node.config.stash[WORKER_REPORTS].append((name, json.loads(found)))


def _merged_summary(terminalreporter: Any, config: pytest.Config) -> None:
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
    written = document.write_report(
        doc,
        merged.markdown(doc, missing, headline),
        settings.json_path,
        settings.markdown_path,
        os.environ.get("GITHUB_STEP_SUMMARY"),
    )
    for path in written:
        terminalreporter.write_line(f"vLLM perf report written: {path}")
    failed = headline.startswith("vLLM perf FAIL")
    terminalreporter.write_line(headline, bold=True, red=failed, green=not failed)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.stash.get(WORKER_REPORTS, []):
        _merged_summary(terminalreporter, config)
        return
    outcomes = config.stash.get(OUTCOMES, [])
    if not outcomes or _worker(config):
        return
    settings = config.stash[SETTINGS]
    terminalreporter.section("vLLM perf summary")
    for line in text.summary_lines(outcomes) + text.gate_notes(outcomes):
        terminalreporter.write_line(line)
    for line in text.cost_lines(outcomes):
        terminalreporter.write_line(line)
    for line in sides.comparison_lines(outcomes):
        terminalreporter.write_line(line)
    pictures = []
    if settings.plots_dir:
        try:
            pictures = plots.write(outcomes, settings.plots_dir)
        except PlotsUnavailable as exc:
            terminalreporter.write_line(f"vLLM perf plots not written: {exc}", red=True)
    wall_s = time.monotonic() - config.stash[STARTED]
    cuda = any(o.provenance.environment.platform == "cuda" for o in outcomes)
    headline = text.verdict_line(outcomes, wall_s, hardware.gpu_count() if cuda else 0)
    written = document.write_files(
        outcomes,
        json_path=settings.json_path,
        markdown_path=settings.markdown_path,
        step_summary=os.environ.get("GITHUB_STEP_SUMMARY"),
        plots=pictures,
        headline=headline,
        run=_run_record(settings),
    )
    for path in [*written, *pictures]:
        terminalreporter.write_line(f"vLLM perf report written: {path}")
    # last, so that it sits right above pytest's own count (which says "passed" for a
    # perf result that failed as expected, an xfail)
    failed = headline.startswith("vLLM perf FAIL")
    terminalreporter.write_line(headline, bold=True, red=failed, green=not failed)
