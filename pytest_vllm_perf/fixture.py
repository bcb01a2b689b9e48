"""The ``vllm_perf`` fixture object: one test's perf runs, from its marker and its code.

It resolves the workload (argument, else marker, else ``mixed``), hands the
layering of thresholds and tolerances to :class:`measure.Plan`, runs the test
through :func:`measure.run_test`, and turns every :class:`VllmPerfError` into a
failed test with its message, in one place.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import pytest

from pytest_vllm_perf import measure
from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core import trace
from pytest_vllm_perf.core.errors import VllmPerfError
from pytest_vllm_perf.core.records import Cost, GateStatus, Outcome, Progress
from pytest_vllm_perf.core.registry import threshold_target, tolerance_for, validate_tolerances
from pytest_vllm_perf.core.workload import Workload, pass_count
from pytest_vllm_perf.report import text
from pytest_vllm_perf.serving import hardware, models
from pytest_vllm_perf.serving.pool import ServerHandle
from pytest_vllm_perf.settings import Settings
from pytest_vllm_perf.verdict import baseline, capacity, capacity_store, gate
from pytest_vllm_perf.verdict.gate import SaveMode
from pytest_vllm_perf.verdict.thresholds import validate as validate_thresholds

__all__ = [
    "MARKER_DOCS",
    "MARKER_KEYS",
    "CostClock",
    "PerfFixture",
    "preflight",
    "stored_baselines",
]

# Marker keywords with a meaning of their own; every other keyword overrides a workload field.
T = TypeVar("T")
MARKER_DOCS: Final[Mapping[str, str]] = {
    "workload": "built-in name, a .yaml file beside the test, or a Workload [mixed]",
    "profile": "pin the test to this profile (or list), whatever --vllm-profile selects",
    "thresholds": "absolute limits, e.g. {ttft_p99_ms: 500, min_output_throughput: 100}",
    "tolerances": "regression tolerances per metric, e.g. {itl_p99_ms: 0.2}",
    "repeat": "passes of the workload [--vllm-repeat]",
    "gate": "metrics gated on top of the workload's own, e.g. [ttft_p99_ms]",
}
MARKER_KEYS: Final = frozenset(MARKER_DOCS)


def marker_of(node: pytest.Item) -> Mapping[str, Any]:
    mark = node.get_closest_marker("vllm_perf")
    if mark is None:
        return {}
    if mark.args:
        return {"workload": mark.args[0], **mark.kwargs}
    return dict(mark.kwargs)


class CostClock:
    """What a test has spent since a mark: wall seconds, of which the pool spent
    ``booted()`` booting, on ``gpus`` GPUs. The plugin marks it where the test's setup
    begins (before its servers boot); each collected result takes the time since the
    last mark, so a test that runs twice is charged once in all."""

    def __init__(self, booted: Callable[[], float], gpus: float, mark: tuple[float, float]) -> None:
        self._booted = booted
        self.gpus = gpus
        self._mark = mark

    @classmethod
    def now(cls, booted: Callable[[], float], gpus: float) -> CostClock:
        return cls(booted, gpus, (time.monotonic(), booted()))

    def take(self) -> Cost:
        now, booted = time.monotonic(), self._booted()
        wall, boots = now - self._mark[0], booted - self._mark[1]
        self._mark = (now, booted)
        return Cost(boot_s=boots, load_s=max(0.0, wall - boots), gpus=self.gpus)


class PerfFixture:
    """Run workloads against this test's vLLM server: ``vllm_perf.run("interference")``."""

    def __init__(
        self,
        node: pytest.Item,
        settings: Settings,
        server: ServerHandle,
        collect: Callable[[Outcome], None],
        progress: Progress | None = None,
        base_server: ServerHandle | Callable[[], ServerHandle] | None = None,
        base_note: str = "",
        candidate_boot: Callable[[], ServerHandle] | None = None,
        clock: CostClock | None = None,
    ) -> None:
        self._node = node
        self._clock = clock
        self._settings = settings
        self._collect = collect
        self._progress = progress
        self.server = server
        # the base side of an A/B run (--vllm-ab): its server, or, booted in turn with
        # the candidate (--vllm-ab-mode=sequential), what boots it
        self.base_server = base_server
        self._candidate_boot = candidate_boot
        self._base_note = base_note  # what the verdict says of the base side's choice
        self.outcomes: list[Outcome] = []

    def _costed(self, outcome: Outcome) -> Outcome:
        """The outcome with what it cost since the last one (or the test's setup)."""
        if self._clock is None:
            return outcome
        return dataclasses.replace(outcome, cost=self._clock.take())

    @property
    def _marker(self) -> Mapping[str, Any]:
        return marker_of(self._node)

    def workload(self, workload: str | Workload | None = None, **overrides: Any) -> Workload:
        """The workload this test runs: argument, else marker, else ``mixed``; with overrides."""
        return _reported(lambda: self._workload(workload, overrides))

    def _workload(self, spec: str | Workload | None, overrides: Mapping[str, Any]) -> Workload:
        marker = dict(self._marker)
        if spec:
            marker["workload"] = spec
        return _marker_workload(self._node, marker).override(overrides)

    def run(
        self,
        workload: str | Workload | None = None,
        *,
        thresholds: Mapping[str, float] | None = None,
        tolerances: Mapping[str, float] | None = None,
        repeat: int | None = None,
        gate: Sequence[str] = (),
        **overrides: Any,
    ) -> Outcome:
        """Measure, check thresholds and the baseline; fail listing everything that broke.

        ``workload``: a built-in name, a YAML file beside the test or a ``Workload``,
        positionally or as ``workload=`` (the marker's keyword); else the marker's.
        """
        outcome = self._costed(
            _reported(lambda: self._run(workload, thresholds, tolerances, repeat, gate, overrides))
        )
        self._collect(outcome)
        self.outcomes.append(outcome)
        problems = _problems(outcome, self._settings.require_baseline)
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)
        return outcome

    def capacity(
        self,
        workload: str | Workload | None = None,
        *,
        slo: Mapping[str, float],
        cls: str | None = None,
        tolerance: float | None = None,
        max_passes: int = 30,
        min_rps: float | None = None,
        **overrides: Any,
    ) -> measure.CapacityRun:
        """The highest rate of the workload's open-loop class at which ``slo`` (limits
        such as ``{"ttft_p99_ms": 2000, "itl_p99_ms": 200}``) holds, with its 95%
        interval (``verdict.capacity``). The search starts at the class's rate and runs
        one pass per trial, at most ``max_passes``, until the interval is within
        ``tolerance``.

        ``capacity_rps`` is then judged like any metric, by the same rule, at
        ``tolerance`` (else its ``tolerances`` key in the marker, profile or ini, else
        the registry's 10%), and reported as one in every report: in an A/B
        run (``--vllm-ab``) both sides are searched, pass by pass in turn, and their
        ratio gets a 95% interval; otherwise the search is judged against the stored
        capacity baseline (``--vllm-save-baseline`` saves it). Fails when the
        capacity ``regressed``, when ``min_rps`` is given and the capacity is below it
        (without a bounded interval: the highest rate a pass held at), and under
        ``--vllm-require-baseline`` when no stored search can gate it."""
        load = self.workload(workload, **overrides)
        settings = self._settings
        test_id = self._node.nodeid.split("[")[0]
        if tolerance is None:
            layers = measure.layered(
                settings.tolerances,
                self.server.provenance.profile_settings.get("tolerances"),
                self._marker.get("tolerances"),
            )
            tolerance = tolerance_for(capacity.METRIC, layers)
        assert tolerance is not None  # the registry gives capacity_rps one
        if self.base_server is not None:
            base, candidate = self.base_server, self._candidate_boot or self.server
            found = _reported(
                lambda: measure.capacity_ab(
                    base,
                    candidate,
                    load,
                    slo,
                    cls,
                    tolerance,
                    max_passes,
                    self._progress,
                    alpha=settings.call_alpha(settings.ab_alpha, len(self.outcomes)),
                )
            )
        else:
            server = self.server
            searched = _reported(
                lambda: measure.capacity_search(
                    server, load, slo, cls, tolerance, max_passes, self._progress
                )
            )
            found = _reported(
                lambda: measure.capacity_gate(
                    searched,
                    server,
                    test_id,
                    load,
                    settings.baseline_dir,
                    settings.save_mode,
                    tolerance,
                    settings.gate_other_release,
                    alpha=settings.call_alpha(settings.stored_alpha, len(self.outcomes)),
                )
            )
        line = found.line()
        if self._progress is not None:
            self._progress(line)
        outcome = self._costed(
            found.outcome(
                test_id + (f"#{len(self.outcomes) + 1}" if self.outcomes else ""), load, min_rps
            )
        )
        self._collect(outcome)
        self.outcomes.append(outcome)
        problems = []
        result = outcome.gate
        if result and result.regressions:
            problems.append(f"{line}: capacity regressed")
        if not outcome.passed:  # the fit, or with no bounded interval what held
            problems.append(f"{line}: below the minimum of {min_rps:g} req/s")
        if result and settings.require_baseline and result.status in gate.CANNOT_GATE:
            problems.append(f"--vllm-require-baseline ({result.status}): {result.note}")
        if problems:
            pytest.fail("\n".join(dict.fromkeys(problems)), pytrace=False)
        return found

    def _run(
        self,
        spec: str | Workload | None,
        thresholds: Mapping[str, float] | None,
        tolerances: Mapping[str, float] | None,
        repeat: int | None,
        gate: Sequence[str],
        overrides: Mapping[str, Any],
    ) -> Outcome:
        marker = self._marker
        test_id = self._node.nodeid.split("[")[0]
        if self.outcomes:
            test_id += f"#{len(self.outcomes) + 1}"
        explicit = repeat if repeat is not None else marker.get("repeat")
        plan = measure.Plan.resolve(
            test_id,
            self._workload(spec, overrides),
            pass_count(explicit, "repeat") if explicit is not None else self._settings.repeat,
            self.server.platform,
            thresholds_layers=(
                self.server.provenance.profile_settings.get("thresholds"),
                marker.get("thresholds"),
                thresholds,
            ),
            tolerance_layers=(
                self._settings.tolerances,
                self.server.provenance.profile_settings.get("tolerances"),
                marker.get("tolerances"),
                tolerances,
            ),
            gate_extra=(*marker.get("gate", ()), *gate),
            ab=self.base_server is not None,
            most=self._settings.ab_max_pairs,
            alpha=self._settings.call_alpha(self._settings.ab_alpha, len(self.outcomes)),
            stored_alpha=self._settings.call_alpha(self._settings.stored_alpha, len(self.outcomes)),
            settle=self._settings.settle_for(self.server.platform),
        )
        # the test's own keys (a profile's apply to every workload, so they may name
        # classes this one lacks): a class it does not have is a mistake, found before
        # any request is sent
        _check_classes(
            plan.workload,
            {**(marker.get("thresholds") or {}), **(thresholds or {})},
            {**(marker.get("tolerances") or {}), **(tolerances or {})},
            plan.gate,
        )
        settings = self._settings
        if self.base_server is not None:
            candidate = self._candidate_boot or self.server
            return measure.run_ab(
                plan, self.base_server, candidate, self._progress, self._base_note,
                settings.baseline_dir,
            )  # fmt: skip
        return measure.run_test(
            plan,
            self.server,
            settings.baseline_dir,
            settings.save_mode,
            self._progress,
            settings.gate_other_release,
        )


def _check_classes(
    workload: Workload,
    thresholds: Mapping[str, float],
    tolerances: Mapping[str, float],
    gate: Sequence[str],
) -> None:
    """ThresholdError for a class-qualified key naming a class the workload lacks."""
    workload.check_classes((threshold_target(k)[0] for k in thresholds), "threshold")
    workload.check_classes(tolerances, "tolerance")
    workload.check_classes(gate, "gate")


def _marker_workload(node: pytest.Item, marker: Mapping[str, Any]) -> Workload:
    spec = marker.get("workload") or "mixed"
    if not isinstance(spec, str | Workload):
        raise VllmPerfError(f"expected a workload name, YAML file or Workload, got {spec!r}")
    overrides = {k: v for k, v in marker.items() if k not in MARKER_KEYS}
    if isinstance(spec, str):
        if spec.endswith((".yaml", ".yml")):
            base = workloads.load_file(Path(node.path).parent / spec)
        else:
            base = workloads.named(spec)
    else:
        base = spec
    return _with_traces(base.override(overrides), Path(node.path).parent)


def _with_traces(workload: Workload, folder: Path) -> Workload:
    """Trace paths resolved beside the test file, and each trace read: a malformed line
    is a WorkloadError naming the file and the line, found before any boot."""
    classes = []
    for cls in workload.classes:
        if cls.trace:
            path = Path(cls.trace) if Path(cls.trace).is_absolute() else folder / cls.trace
            trace.load(path)
            cls = dataclasses.replace(cls, trace=str(path))
        classes.append(cls)
    return dataclasses.replace(workload, classes=tuple(classes))


def preflight(node: pytest.Item, settings: Settings) -> list[str]:
    """Every problem in a test's ``vllm_perf`` marker, found before any server boots.

    One line each, naming the test and the keyword: a workload name, an override
    field, a threshold, tolerance or gate key, a pass count or a profile that would
    otherwise fail only after a boot (47-55 s on the CPU engine, minutes on a GPU).
    """
    where = node.nodeid.split("[")[0]
    misspelled = _misspelled_markers(node)
    if misspelled:
        # a misspelled marker is otherwise only pytest's generic warning after the run,
        # which then measured the default workload (3 minutes on the CPU engine) and passed
        return [
            f"{where}: unknown marker {name!r}: did you mean 'vllm_perf'?" for name in misspelled
        ]
    marker = marker_of(node)
    if not marker:
        return []
    problems: list[str] = []

    def check(keyword: str, action: Callable[[], object]) -> None:
        try:
            action()
        except (VllmPerfError, pytest.UsageError) as exc:
            problems.append(f"{where}: vllm_perf marker {keyword}: {exc}")
        except (TypeError, ValueError, AttributeError) as exc:
            problems.append(f"{where}: vllm_perf marker {keyword}: bad value ({exc})")

    def mapping(key: str) -> Mapping[str, float]:
        value = marker.get(key) or {}
        if not isinstance(value, Mapping):
            raise VllmPerfError(f"expected a mapping of metric names to numbers, got {value!r}")
        return value

    def gate() -> None:
        value = marker.get("gate", ())
        if isinstance(value, str) or not all(isinstance(k, str) for k in value):
            raise VllmPerfError(f"expected a list of metric names, got {value!r}")
        validate_tolerances(dict.fromkeys(value, 0.0))

    check("workload", lambda: _marker_workload(node, marker))
    check("thresholds", lambda: validate_thresholds(mapping("thresholds")))
    check("tolerances", lambda: validate_tolerances(mapping("tolerances")))
    check("gate", gate)
    if "workload" in marker and not problems:  # its classes are known before a boot
        check(
            "classes",
            lambda: _check_classes(
                _marker_workload(node, marker),
                mapping("thresholds"),
                mapping("tolerances"),
                marker.get("gate", ()),
            ),
        )
    if "repeat" in marker:
        check("repeat", lambda: pass_count(marker["repeat"], "repeat"))
    pinned = marker.get("profile")
    if pinned:
        for name in [pinned] if isinstance(pinned, str) else list(pinned):
            check("profile", functools.partial(settings.load_profile, name))
    return problems


def _misspelled_markers(node: pytest.Item) -> list[str]:
    """Markers on a perf test whose names are near ``vllm_perf`` but not it
    (``vllm_pref``, ``vllmperf``, ``vllm_perf_``)."""
    names = {mark.name for mark in node.iter_markers()} - {"vllm_perf", "parametrize"}
    return sorted(n for n in names if difflib.get_close_matches(n, ["vllm_perf"], cutoff=0.75))


def stored_baselines(node: pytest.Item, settings: Settings) -> list[str]:
    """Problems with the baselines a perf test under one profile will read, found before
    any server boots (a corrupt file was found after 79 s of load on the CPU engine).

    Under ``--vllm-require-baseline``, a baseline that cannot gate this run (missing,
    other hardware, another model or vLLM release) is one too: otherwise every verdict
    would be "compared, not gated" and the run would pass. Another workload is found
    after the run (still a failure): a test body may override its marker's load, as
    the examples do, so the marker alone cannot tell (on the H200 every example was
    called "workload changed" at collection when it was judged from the marker)."""
    callspec = getattr(node, "callspec", None)
    profile = callspec.params.get("vllm_profile") if callspec else None
    if not profile or settings.save_mode is not SaveMode.COMPARE or settings.ab:
        return []
    test_id = node.nodeid.split("[")[0]
    problems = baseline.check_stored(settings.baseline_dir, test_id, profile)
    if problems or not settings.require_baseline:
        return problems
    platform = settings.platform or hardware.detect_platform()
    found = gate.precheck(
        settings.baseline_dir,
        hardware.hardware_class(platform),
        test_id,
        profile,
        None,  # the test body may override its marker's load: checked after the run
        _model_before_boot(settings),
        hardware.interpreter_versions(None)[0],
        settings.gate_other_release,
    )
    if found is None:
        return []
    hw = hardware.hardware_class(platform)
    if (
        found[0] is GateStatus.MISSING
        and capacity_store.capacity_path(settings.baseline_dir, hw, test_id, profile).exists()
    ):  # a capacity test: its search is gated after the run
        return []
    return [f"{node.nodeid}: --vllm-require-baseline ({found[0]}): {found[1]}"]


def _model_before_boot(settings: Settings) -> str | None:
    """The model a run will record, where it is known before the boot: an embedded
    preset's folder name, or ``--vllm-model``; None for a server someone else started."""
    if settings.model:
        return settings.model
    if settings.url:
        return None
    return models.folder_name(models.PRESETS[settings.preset])


def _reported(action: Callable[[], T]) -> T:
    """``action()``; a VllmPerfError fails the test with its message alone (no traceback,
    and no "during handling of the above exception" chain)."""
    try:
        return action()
    except VllmPerfError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


def _problems(outcome: Outcome, require_baseline: bool) -> list[str]:
    problems = []
    if not outcome.passed:
        message = text.threshold_message(outcome.checks)
        errors = sorted({str(r.error) for r in outcome.result.failures})
        if errors:
            message += "\n  request errors: " + "; ".join(errors[:5])
        problems.append(message)
    result = outcome.gate
    if result and result.regressions:
        problems.append(text.regression_message(result))
    if result and require_baseline and result.status in gate.CANNOT_GATE:
        problems.append(f"--vllm-require-baseline ({result.status}): {result.note}")
    return problems
