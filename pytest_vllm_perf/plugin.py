"""The pytest surface of pytest-vllm-perf: options, ini twins, markers, fixtures, hooks."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_vllm_perf import baseline, compare, gate, plots, profiles, report, server
from pytest_vllm_perf import thresholds as slo
from pytest_vllm_perf import workload as workloads
from pytest_vllm_perf.pool import PoolConfig, ServerHandle, ServerPool
from pytest_vllm_perf.prompts import PromptError
from pytest_vllm_perf.session import Outcome, measure, merged_thresholds

POOL = pytest.StashKey[ServerPool]()
OUTCOMES = pytest.StashKey[list[Outcome]]()
SELECTED = pytest.StashKey[list[str]]()
REPEAT = pytest.StashKey[int]()
PERF_FIXTURES = ("vllm_perf", "vllm_server")
MARKER_KEYS = frozenset({"workload", "thresholds", "tolerances", "profile", "repeat"})
DEFAULT_REPEAT = 5

# (option, ini twin, help, ini default): the command line wins over the ini file.
OPTIONS: tuple[tuple[str, str, str, str | None], ...] = (
    ("--vllm-profile", "vllm_profile", "tuning profile(s), comma separated", "default"),
    ("--vllm-profiles-dir", "vllm_profiles_dir", "profile YAML folder [rootdir/profiles]", None),
    ("--vllm-model", "vllm_model", "model id or folder [embedded dummy-weight model]", None),
    ("--vllm-model-preset", "vllm_model_preset", "embedded model: tiny or llama-8b", "tiny"),
    ("--vllm-url", "vllm_url", "measure a running server instead of starting one", None),
    ("--vllm-platform", "vllm_platform", "auto, cpu or cuda", "auto"),
    ("--vllm-boot-timeout", "vllm_boot_timeout", "seconds a server may take to boot", "600"),
    ("--vllm-cache-dir", "vllm_cache_dir", "models and logs [rootdir/.vllm-perf-cache]", None),
    ("--vllm-baseline-dir", "vllm_baseline_dir", "baseline store [rootdir/.vllm-perf]", None),
    ("--vllm-json", "vllm_json", "write all results as JSON to this path", None),
    ("--vllm-markdown", "vllm_markdown", "write a Markdown summary to this path", None),
    ("--vllm-plots", "vllm_plots", "write PNG plots into this folder (needs matplotlib)", None),
    ("--vllm-repeat", "vllm_repeat", "passes of each workload [5]; verdicts compare passes", None),
)
FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--vllm-save-baseline", "vllm_save_baseline", "store each result as the new baseline"),
    ("--vllm-require-baseline", "vllm_require_baseline", "fail perf tests with no baseline"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vllm-perf", "vLLM serving performance gates")
    for flag, ini, help_text, default in OPTIONS:
        group.addoption(flag, dest=ini, default=None, help=f"{help_text} (ini: {ini})")
        parser.addini(ini, help_text, default=default)
    for flag, ini, help_text in FLAGS:
        group.addoption(flag, dest=ini, action="store_true", default=None, help=help_text)
        parser.addini(ini, help_text, type="bool", default=False)
    parser.addini("vllm_tolerances", "regression tolerances, lines of METRIC=FRACTION", "linelist")


def option(config: pytest.Config, name: str) -> str | None:
    """The command-line value, else the ini value."""
    value = config.getoption(name)
    if value is None:
        value = config.getini(name) or None
    return None if value is None else str(value)


def flag(config: pytest.Config, name: str) -> bool:
    value = config.getoption(name)
    return bool(config.getini(name) if value is None else value)


def _path(config: pytest.Config, name: str, default: str) -> Path:
    return Path(config.rootpath, option(config, name) or default)


def ini_tolerances(config: pytest.Config) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in config.getini("vllm_tolerances"):
        key, sep, value = str(line).partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise pytest.UsageError(f"vllm_tolerances: expected METRIC=FRACTION, got {line!r}")
    try:
        gate.validate_tolerances(out)
    except ValueError as exc:
        raise pytest.UsageError(f"vllm_tolerances: {exc}") from None
    return out


def repeat_count(value: object, source: str) -> int:
    """A pass count from the command line, ini or a marker; a clear error if it is not one."""
    try:
        count = int(str(value))
    except ValueError:
        count = 0
    if count < 1:
        raise pytest.UsageError(f"{source}: expected a whole number of passes >= 1, got {value!r}")
    return count


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vllm_perf(workload=NAME, thresholds={...}, tolerances={...}, profile=NAME, "
        "repeat=N, **overrides): a vLLM perf test",
    )
    config.stash[OUTCOMES] = []
    profiles_dir = _path(config, "vllm_profiles_dir", "profiles")
    names = [n.strip() for n in (option(config, "vllm_profile") or "").split(",") if n.strip()]
    names = names or ["default"]
    if config.getoption("vllm_profile") is not None or config.getini("vllm_profile") != "default":
        for name in names:
            _load_profile(name, profiles_dir)  # fail before anything boots
    ini_tolerances(config)
    config.stash[REPEAT] = repeat_count(
        option(config, "vllm_repeat") or DEFAULT_REPEAT, "--vllm-repeat"
    )
    config.stash[SELECTED] = names
    config.stash[POOL] = ServerPool(
        PoolConfig(
            profiles_dir=profiles_dir,
            cache_dir=_path(config, "vllm_cache_dir", ".vllm-perf-cache"),
            model=option(config, "vllm_model"),
            preset=option(config, "vllm_model_preset") or "tiny",
            platform=option(config, "vllm_platform") or "auto",
            boot_timeout_s=float(option(config, "vllm_boot_timeout") or 600),
            external_url=option(config, "vllm_url"),
        ),
        _progress_writer(config),
    )
    _stop_servers_on_sigterm()


def _load_profile(name: str, profiles_dir: Path) -> profiles.Profile:
    try:
        return profiles.load(name, profiles_dir)
    except profiles.ProfileError as exc:
        raise pytest.UsageError(str(exc)) from None


def _stop_servers_on_sigterm() -> None:
    """CI cancels jobs with SIGTERM, which skips atexit; turn it into a clean exit."""
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: object) -> None:
    server.stop_all()
    raise SystemExit(128 + signum)


def _progress_writer(config: pytest.Config) -> Any:
    def say(message: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            return
        disabled = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
        with disabled:
            reporter.ensure_newline()
            reporter.write_line(f"[vllm-perf] {message}")

    return say


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = config.stash.get(POOL, None)
    if pool is not None:
        pool.stop()


def _marker(request: pytest.FixtureRequest) -> Mapping[str, Any]:
    mark = request.node.get_closest_marker("vllm_perf")
    if mark is None:
        return {}
    if mark.args:
        return {"workload": mark.args[0], **mark.kwargs}
    return dict(mark.kwargs)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not any(f in metafunc.fixturenames for f in PERF_FIXTURES):
        return
    mark = metafunc.definition.get_closest_marker("vllm_perf")
    pinned = mark.kwargs.get("profile") if mark else None
    selected: list[str] = metafunc.config.stash[SELECTED]
    names = [pinned] if isinstance(pinned, str) else list(pinned or selected)
    metafunc.parametrize("vllm_profile", names, indirect=True, ids=names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group perf tests by profile (stable), so each server boots once per session."""
    selected: list[str] = config.stash[SELECTED]
    order = {name: i for i, name in enumerate(selected)}

    def key(item: pytest.Item) -> tuple[int, str]:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("vllm_profile") if callspec else None
        if name is None:
            return (-1, "")
        return (order.get(name, len(order)), name)

    items.sort(key=key)


@pytest.fixture
def vllm_profile(request: pytest.FixtureRequest) -> profiles.Profile:
    """The resolved tuning profile this test runs under."""
    name = getattr(request, "param", None) or request.config.stash[SELECTED][0]
    return _load_profile(name, request.config.stash[POOL].config.profiles_dir)


@pytest.fixture
def vllm_server(request: pytest.FixtureRequest, vllm_profile: profiles.Profile) -> ServerHandle:
    """A healthy vLLM server running this test's profile (shared by all its tests)."""
    try:
        return request.config.stash[POOL].get(vllm_profile)
    except server.ServerError as exc:
        pytest.fail(str(exc), pytrace=False)


class PerfRunner:
    """The ``vllm_perf`` fixture: run a workload, check thresholds, gate on the baseline."""

    def __init__(self, request: pytest.FixtureRequest, handle: ServerHandle) -> None:
        self._request = request
        self.server = handle
        self.outcomes: list[Outcome] = []

    def workload(
        self, spec: str | workloads.Workload | None = None, **overrides: Any
    ) -> workloads.Workload:
        """The workload this test runs: argument, else marker, else ``mixed``; with overrides."""
        marker = _marker(self._request)
        spec = spec or marker.get("workload") or "mixed"
        marker_overrides = {k: v for k, v in marker.items() if k not in MARKER_KEYS}
        try:
            base = self._resolve(spec)
            return base.override({**marker_overrides, **overrides})
        except workloads.WorkloadError as exc:
            pytest.fail(str(exc), pytrace=False)

    def _resolve(self, spec: str | workloads.Workload) -> workloads.Workload:
        """A workload object, a built-in name, or a YAML file beside the test module."""
        if not isinstance(spec, str):
            return spec
        if spec.endswith((".yaml", ".yml")):
            return workloads.load_file(Path(self._request.node.path).parent / spec)
        return workloads.named(spec)

    def run(
        self,
        spec: str | workloads.Workload | None = None,
        *,
        thresholds: Mapping[str, float] | None = None,
        tolerances: Mapping[str, float] | None = None,
        repeat: int | None = None,
        **overrides: Any,
    ) -> Outcome:
        """Measure, check thresholds and the baseline; fail listing everything that broke."""
        load = self.workload(spec, **overrides)
        marker = _marker(self._request)
        passes = self._repeat(repeat if repeat is not None else marker.get("repeat"))
        limits = merged_thresholds(
            self.server.profile.thresholds, marker.get("thresholds"), thresholds
        )
        tol = {
            **compare.default_tolerances(self.server.platform),
            **ini_tolerances(self._request.config),
            **self.server.profile.tolerances,
            **(marker.get("tolerances") or {}),
            **(tolerances or {}),
        }
        try:
            slo.validate_thresholds(limits)
            gate.validate_tolerances(tol)
        except ValueError as exc:
            pytest.fail(str(exc), pytrace=False)
        outcome = self._measure(load, limits, passes)
        outcome = dataclasses.replace(outcome, gate=self._gate(outcome, tol))
        self._request.config.stash[OUTCOMES].append(outcome)
        self.outcomes.append(outcome)
        problems = _problems(outcome, flag(self._request.config, "vllm_require_baseline"))
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)
        return outcome

    def _repeat(self, explicit: object) -> int:
        """Passes: code or marker, else the command line or ini (validated at configure)."""
        if explicit is None:
            return self._request.config.stash[REPEAT]
        try:
            return repeat_count(explicit, "repeat")
        except pytest.UsageError as exc:  # a bad marker fails its test, not the session
            pytest.fail(str(exc), pytrace=False)

    def _measure(
        self, load: workloads.Workload, limits: Mapping[str, float], passes: int
    ) -> Outcome:
        config = self._request.config
        test_id = self._request.node.nodeid.split("[")[0]
        if self.outcomes:
            test_id += f"#{len(self.outcomes) + 1}"
        try:
            progress = config.stash[POOL].progress
            return measure(test_id, self.server, load, limits, progress, repeat=passes)
        except (server.ServerError, PromptError) as exc:
            pytest.fail(str(exc), pytrace=False)

    def _gate(self, outcome: Outcome, tol: Mapping[str, float]) -> gate.GateResult:
        config = self._request.config
        root = _path(config, "vllm_baseline_dir", ".vllm-perf")
        try:
            return gate.evaluate(outcome, root, tol, save=flag(config, "vllm_save_baseline"))
        except baseline.BaselineError as exc:
            pytest.fail(str(exc), pytrace=False)


def _problems(outcome: Outcome, require_baseline: bool) -> list[str]:
    problems = []
    if not outcome.passed:
        text = slo.failure_message(list(outcome.checks))
        errors = sorted({str(r.error) for r in outcome.result.failures})
        if errors:
            text += "\n  request errors: " + "; ".join(errors[:5])
        problems.append(text)
    result = outcome.gate
    if result and result.regressions:
        problems.append(gate.regression_message(result))
    if result and require_baseline and result.status in (gate.MISSING, gate.OTHER_HARDWARE):
        problems.append(f"--vllm-require-baseline: {result.note}")
    return problems


@pytest.fixture
def vllm_perf(request: pytest.FixtureRequest, vllm_server: ServerHandle) -> Iterator[PerfRunner]:
    """Run workloads against this test's vLLM server: ``vllm_perf.run("interference")``."""
    yield PerfRunner(request, vllm_server)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    outcomes = config.stash.get(OUTCOMES, [])
    if not outcomes:
        return
    terminalreporter.section("vLLM perf summary")
    for line in report.summary_lines(outcomes):
        terminalreporter.write_line(line)
    for line in report.gate_notes(outcomes):
        terminalreporter.write_line(line)
    for line in report.comparison_lines(outcomes):
        terminalreporter.write_line(line)
    pictures: list[Path] = []
    plots_dir = option(config, "vllm_plots")
    if plots_dir:
        try:
            pictures = plots.write(outcomes, Path(plots_dir))
        except plots.PlotsUnavailable as exc:
            terminalreporter.write_line(f"vLLM perf plots not written: {exc}", red=True)
    written = report.write_files(
        outcomes,
        json_path=option(config, "vllm_json"),
        markdown_path=option(config, "vllm_markdown"),
        step_summary=os.environ.get("GITHUB_STEP_SUMMARY"),
        plots=pictures,
    )
    written += [str(p) for p in pictures]
    for path in written:
        terminalreporter.write_line(f"vLLM perf report written: {path}")
