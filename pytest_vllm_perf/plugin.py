"""The pytest surface of pytest-vllm-perf: options, markers, fixtures and hooks, nothing more.

Options are parsed once into :class:`settings.Settings`; the fixture object lives
in :mod:`fixture`; measuring is :mod:`measure`; reports are :mod:`report`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_vllm_perf import marker, options, state
from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.core.errors import PlotsUnavailable, ServerError
from pytest_vllm_perf.core.records import Outcome
from pytest_vllm_perf.core.report import Report
from pytest_vllm_perf.fixture import CostClock, PerfFixture
from pytest_vllm_perf.marker import preflight, stored_baselines
from pytest_vllm_perf.measure.modes import AB_MODES, Mode
from pytest_vllm_perf.report import cost, document, formats, plots, sides, text
from pytest_vllm_perf.report.view import View
from pytest_vllm_perf.serving import hardware, hub, server
from pytest_vllm_perf.serving.pool import ServerHandle
from pytest_vllm_perf.settings import Settings

PERF_FIXTURES = ("vllm_perf", "vllm_server")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vllm_perf(workload=NAME, thresholds={...}, tolerances={...}, profile=NAME, "
        "repeat=N, gate=[METRIC, ...], **overrides): a vLLM perf test",
    )
    state.PerfSession.start(config)
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
    server running. Further TERMs are ignored. During the load, Ctrl-C's own handler
    takes it from there: asyncio's runner cancels its task, where a KeyboardInterrupt
    raised inside the client's tasks was printed at exit as "Task exception was never
    retrieved" with its traceback (``prgate`` ends its sessions with SIGTERM)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server.stop_all()
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)  # type: ignore[arg-type]
        return
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_unconfigure(config: pytest.Config) -> None:
    found = config.stash.get(state.SESSION, None)  # None: the settings were refused
    if found is not None:
        found.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not any(f in metafunc.fixturenames for f in PERF_FIXTURES):
        return
    mark = metafunc.definition.get_closest_marker("vllm_perf")
    pinned = mark.kwargs.get("profile") if mark else None
    selected = state.of(metafunc.config).settings.profiles
    names = [pinned] if isinstance(pinned, str) else list(pinned or selected)
    metafunc.parametrize("vllm_profile", names, indirect=True, ids=names)


@pytest.hookimpl(trylast=True)  # after -k/-m deselect: check only the tests that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every perf test's marker and stored baselines, then group perf tests by
    profile (stable), so each server boots once per session."""
    session = state.of(config)
    settings = session.settings
    # the A/B tests share the run's A/B false-alarm budget, the others the stored one:
    # counted over every shard, so that the shards' tests together spend one budget
    ab_tests = _ab_tests(items) if settings.ab else 0
    stored_tests = _perf_tests(items) - ab_tests
    settings = dataclasses.replace(settings, ab_tests=ab_tests, stored_tests=stored_tests)
    session.settings = settings
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
    model = settings.model if settings.url is None and boots and not problems else None
    if model and (unavailable := hub.problem(model)):
        problems.append(unavailable)
    if not problems and not config.option.collectonly:  # the engine's own parser, once
        # every file is known to be sound
        wanted = _servers_wanted(items, settings, loaded)
        problems += session.pool.check_engine_args(wanted)
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
    found = item.config.stash.get(state.SESSION, None)
    pool = found.pool if found is not None else None
    if pool is not None and "vllm_perf" in getattr(item, "fixturenames", ()):
        item.stash[state.COST_MARK] = CostClock.now(lambda: pool.booted_s, pool.config.gpus_held())


@pytest.fixture
def vllm_profile(request: pytest.FixtureRequest) -> Profile:
    """The resolved tuning profile this test runs under."""
    settings = state.of(request.config).settings
    return settings.load_profile(getattr(request, "param", None) or settings.profiles[0])


@pytest.fixture
def vllm_server(request: pytest.FixtureRequest, vllm_profile: Profile) -> ServerHandle:
    """A healthy vLLM server running this test's profile (shared by all its tests)."""
    try:
        return state.of(request.config).pool.get(vllm_profile)
    except ServerError as exc:
        message = str(exc)  # failed outside the handler: the error is printed once
    pytest.fail(message, pytrace=False)


@pytest.fixture
def vllm_perf(request: pytest.FixtureRequest, vllm_server: ServerHandle) -> Iterator[PerfFixture]:
    """Run workloads against this test's vLLM server: ``vllm_perf.run("interference")``."""
    session = state.of(request.config)
    settings, pool = session.settings, session.pool
    mode: Mode | None = None  # the fixture's default: the stored baseline
    failure = ""
    if settings.ab and not _pinned(request.node):
        # A/B: the base side's server, kept up beside the candidate's (its own slot),
        # or booted in turn with it on one slot (--vllm-ab-mode=sequential); a test
        # pinned to a profile by its marker is not part of the comparison
        try:
            profile, note = settings.base_profile(vllm_server.profile)
            mine = request.getfixturevalue("vllm_profile")
            mode = AB_MODES[settings.ab_mode].build(
                pool, vllm_server, profile, settings.ab_python, mine, note, settings.baseline_dir
            )
        except ServerError as exc:
            failure = str(exc)  # failed outside the handler: the error is printed once
    if failure:
        pytest.fail(failure, pytrace=False)
    yield PerfFixture(
        request.node,
        settings,
        vllm_server,
        session.outcomes.append,
        pool.progress,
        mode,
        clock=request.node.stash.get(state.COST_MARK, None),
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, its results go to the controller as a report (the
    worker's own terminal and files are nobody's to read or write)."""
    config = session.config
    perf = config.stash.get(state.SESSION, None)
    if perf is None:
        return
    perf.stop_relay()  # the workers' last lines, before the summary
    outcomes = perf.outcomes
    if perf.is_worker and outcomes:
        report = document.to_json(outcomes, perf.run_record())  # the controller reads it typed
        config.workeroutput[state.WORKER_OUTPUT] = json.dumps(report, default=str)  # type: ignore[attr-defined]
    elif perf.settings.inconclusive == "exit":
        undecided = [
            f"{o.test_id}[{o.profile}]"
            for o in outcomes
            if o.gate is not None and o.gate.summary() == "inconclusive"
        ] + [
            f"{r.test}[{r.profile}]"
            for _, doc in perf.worker_reports
            for r in doc.results
            if r.verdict == "inconclusive"
        ]
        if session.exitstatus == pytest.ExitCode.OK and undecided:
            session.exitstatus = options.INCONCLUSIVE_EXIT
            perf.exit_note = exit_six_line(undecided)


def exit_six_line(undecided: list[str]) -> str:
    """Why the run exits 6 although every test passed: pytest's "N passed" alone says
    nothing of it."""
    more = f" and {len(undecided) - 3} more" if len(undecided) > 3 else ""
    shown = ", ".join(undecided[:3]) + more
    return (
        f"vLLM perf exit {options.INCONCLUSIVE_EXIT}: {len(undecided)} gated verdict(s) "
        f"undecided at the pair budget under --vllm-inconclusive=exit ({shown})"
    )


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_testnodedown(node: Any, error: object) -> None:
    found = getattr(node, "workeroutput", {}).get(state.WORKER_OUTPUT)
    if found:
        name = str(getattr(node, "gateway", None) and node.gateway.id)
        report = Report.from_json(json.loads(found), f"worker {name}'s report")
        state.of(node.config).worker_reports.append((name, report))


def _pictures(outcomes: list[Outcome], settings: Settings, terminal: Any) -> list[Path]:
    """The plots: into --vllm-plots, or for --vllm-html alone into a scratch folder whose
    images the page carries inline (without matplotlib the page says why it has none)."""
    html_only = settings.plots_dir is None and settings.report_paths.get("vllm_html")
    folder = settings.plots_dir or (
        Path(tempfile.mkdtemp(prefix="vllm-perf-plots-")) if html_only else None
    )
    if folder is None:
        return []
    try:
        return plots.write(outcomes, folder)
    except PlotsUnavailable as exc:
        where = "written" if settings.plots_dir else "on the HTML page"
        terminal.write_line(f"vLLM perf plots not {where}: {exc}", red=bool(settings.plots_dir))
        return []


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    perf = config.stash.get(state.SESSION, None)
    if perf is None:
        return
    _summary(terminalreporter, perf)
    if perf.exit_note:  # last: the reason for the exit status
        terminalreporter.write_line(perf.exit_note, bold=True, yellow=True)


def _summary(terminalreporter: Any, perf: state.PerfSession) -> None:
    if perf.worker_reports:
        perf.merged_summary(terminalreporter)
        return
    outcomes, settings = perf.outcomes, perf.settings
    if not outcomes or perf.is_worker:
        return
    report = document.build(outcomes, perf.run_record())
    terminalreporter.section("vLLM perf summary")
    notes = text.gate_notes(outcomes, settings.verbose)
    for line in text.summary_lines(report.results) + notes:
        terminalreporter.write_line(line)
    for line in cost.lines(report.results):
        terminalreporter.write_line(line)
    sided = sides.comparison_lines(outcomes)
    for line in sided:
        terminalreporter.write_line(line)
    pictures, notes = _pictures(outcomes, settings, terminalreporter), notes + sided
    wall_s = time.monotonic() - perf.started
    cuda = any(o.provenance.environment.platform == "cuda" for o in outcomes)
    headline = text.verdict_line(report.results, wall_s, hardware.gpu_count() if cuda else 0)
    view = View(report, headline, tuple(notes), tuple(pictures), linked=bool(settings.plots_dir))
    written = formats.write(view, settings.report_paths, os.environ.get("GITHUB_STEP_SUMMARY"))
    if pictures and settings.plots_dir is None:  # drawn for the page alone
        shutil.rmtree(pictures[0].parent, ignore_errors=True)
        pictures = []
    for path in [*written, *pictures]:
        terminalreporter.write_line(f"vLLM perf report written: {path}")
    # last, so that it sits right above pytest's own count (which says "passed" for a
    # perf result that failed as expected, an xfail)
    terminalreporter.write_line(
        headline.text, bold=True, red=headline.failed, green=not headline.failed
    )
