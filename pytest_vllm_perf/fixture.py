"""The ``vllm_perf`` fixture object: one test's perf runs, from its marker and its code.

It resolves the workload (argument, else marker, else ``mixed``), hands the
layering of thresholds and tolerances to :class:`measure.Plan`, runs the test
through :func:`measure.run_test`, and turns every :class:`VllmPerfError` into a
failed test with its message, in one place.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pytest

from pytest_vllm_perf import marker, measure
from pytest_vllm_perf.core.errors import VllmPerfError
from pytest_vllm_perf.core.records import Cost, GateResult, Outcome, Progress
from pytest_vllm_perf.core.registry import tolerance_for
from pytest_vllm_perf.core.workload import Workload, pass_count
from pytest_vllm_perf.measure import modes
from pytest_vllm_perf.measure.modes import Mode, Stored
from pytest_vllm_perf.report import text
from pytest_vllm_perf.serving.pool import ServerHandle
from pytest_vllm_perf.settings import Settings
from pytest_vllm_perf.verdict import capacity, eligibility

__all__ = ["CostClock", "PerfFixture"]

T = TypeVar("T")


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
        mode: Mode | None = None,
        clock: CostClock | None = None,
    ) -> None:
        self._node = node
        self._clock = clock
        self._settings = settings
        self._collect = collect
        self._progress = progress
        self.server = server
        # how the test is judged (measure.modes): against its stored baseline, or as
        # an A/B run (--vllm-ab) of two sides, resident or booted in turn
        self.mode: Mode = mode or Stored(server, settings.baseline_dir, settings.save_mode,
                                         settings.gate_other_release)  # fmt: skip
        self.outcomes: list[Outcome] = []

    def _costed(self, outcome: Outcome) -> Outcome:
        """The outcome with what it cost since the last one (or the test's setup)."""
        if self._clock is None:
            return outcome
        return dataclasses.replace(outcome, cost=self._clock.take())

    @property
    def _marker(self) -> Mapping[str, Any]:
        return marker.marker_of(self._node)

    def workload(self, workload: str | Workload | None = None, **overrides: Any) -> Workload:
        """The workload this test runs: argument, else marker, else ``mixed``; with overrides."""
        return _reported(lambda: self._workload(workload, overrides))

    def _workload(self, spec: str | Workload | None, overrides: Mapping[str, Any]) -> Workload:
        keywords = dict(self._marker)
        if spec:
            keywords["workload"] = spec
        return marker.workload_of(self._node, keywords).override(overrides)

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
            _reported(
                lambda: self._run(
                    self._plan(workload, thresholds, tolerances, repeat, gate, overrides)
                )
            )
        )
        self._collect(outcome)
        self.outcomes.append(outcome)
        problems = _problems(outcome, self._settings.require_baseline, self._settings.verbose)
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
        tolerance = self._capacity_tolerance(tolerance)
        found = self._searched(load, slo, cls, tolerance, max_passes)
        line = found.line()
        if self._progress is not None:
            self._progress(line)
        test_id = marker.base_id(self._node)
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
        problems += _unusable(result, self._settings.require_baseline)
        if problems:
            pytest.fail("\n".join(dict.fromkeys(problems)), pytrace=False)
        return found

    def _capacity_tolerance(self, tolerance: float | None) -> float:
        """The call's tolerance, else the marker's, the profile's or the ini's key for
        ``capacity_rps``, else the registry's."""
        if tolerance is None:
            layers = measure.layered(
                self._settings.tolerances,
                self.server.provenance.profile_settings.get("tolerances"),
                self._marker.get("tolerances"),
            )
            tolerance = tolerance_for(capacity.METRIC, layers)
        assert tolerance is not None  # the registry gives capacity_rps one
        return tolerance

    def _searched(
        self,
        load: Workload,
        slo: Mapping[str, float],
        cls: str | None,
        tolerance: float,
        max_passes: int,
    ) -> measure.CapacityRun:
        """The search as the test's mode runs it: both sides' in an A/B run, else this
        server's, gated by the stored one."""
        settings, calls = self._settings, len(self.outcomes)
        alpha = settings.ab_alpha if self.mode.ab else settings.stored_alpha
        ask = modes.Search(load, slo, cls, tolerance, max_passes, marker.base_id(self._node),
                           settings.call_alpha(alpha, calls))  # fmt: skip
        return _reported(lambda: self.mode.capacity(ask, self._progress))

    def _plan(
        self,
        spec: str | Workload | None,
        thresholds: Mapping[str, float] | None,
        tolerances: Mapping[str, float] | None,
        repeat: int | None,
        gate: Sequence[str],
        overrides: Mapping[str, Any],
    ) -> measure.Plan:
        """What one call measures: the workload, passes, thresholds and tolerances in
        their layers (registry, ini, profile, marker, call), and its share of the budget."""
        keywords = self._marker
        test_id = marker.base_id(self._node)
        if self.outcomes:
            test_id += f"#{len(self.outcomes) + 1}"
        explicit = repeat if repeat is not None else keywords.get("repeat")
        plan = measure.Plan.resolve(
            test_id,
            self._workload(spec, overrides),
            pass_count(explicit, "repeat") if explicit is not None else self._settings.repeat,
            self.server.platform,
            thresholds_layers=(
                self.server.provenance.profile_settings.get("thresholds"),
                keywords.get("thresholds"),
                thresholds,
            ),
            tolerance_layers=(
                self._settings.tolerances,
                self.server.provenance.profile_settings.get("tolerances"),
                keywords.get("tolerances"),
                tolerances,
            ),
            gate_extra=(*keywords.get("gate", ()), *gate),
            ab=self.mode.ab,
            most=self._settings.ab_max_pairs,
            alpha=self._settings.call_alpha(self._settings.ab_alpha, len(self.outcomes)),
            stored_alpha=self._settings.call_alpha(self._settings.stored_alpha, len(self.outcomes)),
            settle=self._settings.settle_for(self.server.platform),
        )
        # the test's own keys (a profile's apply to every workload, so they may name
        # classes this one lacks): a class it does not have is a mistake, found before
        # any request is sent
        marker.check_classes(
            plan.workload,
            {**(keywords.get("thresholds") or {}), **(thresholds or {})},
            {**(keywords.get("tolerances") or {}), **(tolerances or {})},
            plan.gate,
        )
        return plan

    def _run(self, plan: measure.Plan) -> Outcome:
        """The plan measured and judged as this test's mode judges it."""
        return self.mode.run(plan, self._progress)


def _reported(action: Callable[[], T]) -> T:
    """``action()``; a VllmPerfError fails the test with its message alone (no traceback,
    and no "during handling of the above exception" chain)."""
    try:
        return action()
    except VllmPerfError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


def _problems(outcome: Outcome, require_baseline: bool, verbose: bool = False) -> list[str]:
    problems = []
    if not outcome.passed:
        message = text.threshold_message(outcome.checks)
        errors = sorted({str(r.error) for r in outcome.result.failures})
        if errors:
            message += "\n  request errors: " + "; ".join(errors[:5])
        problems.append(message)
    result = outcome.gate
    if result and result.regressions:
        problems.append(text.regression_message(result, verbose))
    return problems + _unusable(result, require_baseline)


def _unusable(result: GateResult | None, require_baseline: bool) -> list[str]:
    """Under --vllm-require-baseline, a stored baseline that could not gate the test."""
    if result and require_baseline and result.status in eligibility.CANNOT_GATE:
        return [f"--vllm-require-baseline ({result.status}): {result.note}"]
    return []
