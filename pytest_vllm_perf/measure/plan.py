"""A perf test's plan, one measurement on one server, and the stored-baseline test."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from pytest_vllm_perf.core.records import (
    GaugeReading,
    Measurement,
    Outcome,
    PassRecord,
    Progress,
)
from pytest_vllm_perf.core.registry import default_tolerances, validate_tolerances
from pytest_vllm_perf.core.workload import Workload
from pytest_vllm_perf.load import runner, scrape
from pytest_vllm_perf.load.runner import GAUGES_EVERY_S
from pytest_vllm_perf.metrics import compute
from pytest_vllm_perf.serving.pool import ServerHandle
from pytest_vllm_perf.verdict import gate, thresholds
from pytest_vllm_perf.verdict.compare import STORED_ALPHA
from pytest_vllm_perf.verdict.gate import SaveMode
from pytest_vllm_perf.verdict.sequential import DEFAULT_ALPHA

DEFAULT_THRESHOLDS: Final[Mapping[str, float]] = {"failed": 0}
T = TypeVar("T")


def layered(*layers: Mapping[str, float] | None) -> dict[str, float]:
    """Later layers win."""
    out: dict[str, float] = {}
    for layer in layers:
        out.update(layer or {})
    return out


@dataclass(frozen=True)
class Plan:
    """Everything one perf test decides before it sends a request."""

    test_id: str
    workload: Workload
    repeat: int
    thresholds: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    tolerances: Mapping[str, float] = field(default_factory=dict)
    gate: Sequence[str] = ()  # metrics gated on top of the workload's own
    most: int = 0  # an A/B run's budget of pairs (``sequential.Design``); 0: ``repeat``
    alpha: float = DEFAULT_ALPHA  # an A/B test's false-alarm rate over all its looks
    # a stored-baseline test's one-sided false-alarm bound (its comparison's two-sided
    # level is twice this): 2.5%, or its share of --vllm-stored-run-alpha
    stored_alpha: float = STORED_ALPHA
    settle: int = 0  # unmeasured passes before a server's first measured one (runner.run)

    @classmethod
    def resolve(
        cls,
        test_id: str,
        workload: Workload,
        repeat: int,
        platform: str,
        thresholds_layers: Sequence[Mapping[str, float] | None] = (),
        tolerance_layers: Sequence[Mapping[str, float] | None] = (),
        gate_extra: Sequence[str] = (),
        ab: bool = False,
        most: int = 0,
        alpha: float = DEFAULT_ALPHA,
        settle: int = 0,
        stored_alpha: float = STORED_ALPHA,
    ) -> Plan:
        """Layer thresholds and tolerances, and validate every key (ThresholdError);
        ``ab``: an A/B run, whose defaults are tighter (core.tolerances.AB_TOLERANCES)."""
        limits = layered(DEFAULT_THRESHOLDS, *thresholds_layers)
        tol = layered(default_tolerances(platform, ab), *tolerance_layers)
        thresholds.validate(limits)
        validate_tolerances(tol)
        validate_tolerances(dict.fromkeys(gate_extra, 0.0))
        return cls(
            test_id, workload, repeat, limits, tol, tuple(gate_extra), most, alpha,
            stored_alpha=stored_alpha, settle=settle,
        )  # fmt: skip


def run_sync(coro_factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion, also from code that already has a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_factory())).result()


def measure(
    handle: ServerHandle,
    workload: Workload,
    repeat: int = 1,
    progress: Progress | None = None,
    gauges_every_s: float | None = GAUGES_EVERY_S,
    first_index: int = 0,
    settle: int = 0,
) -> Measurement:
    """Drive ``workload`` ``repeat`` times against ``handle`` and compute its metrics,
    after ``settle`` unmeasured passes (``runner.run``)."""
    recording = run_sync(
        lambda: runner.run(
            workload,
            handle.base_url,
            handle.model,
            progress,
            repeat=repeat,
            gauges_every_s=gauges_every_s,
            first_index=first_index,
            alive=getattr(handle.server, "running", None),
            settle=settle,
            energy=handle.energy,
        )
    )
    handle.check_alive()
    return assemble(workload, recording.passes, recording.gauges)


def assemble(
    workload: Workload, passes: Sequence[PassRecord], gauges: Sequence[GaugeReading]
) -> Measurement:
    """A measurement from recorded passes (of one run, or gathered from several)."""
    passes = tuple(passes)
    per_pass = tuple(compute.pass_metrics(workload, p) for p in passes)
    peaks = scrape.gauge_peaks(tuple(gauges))
    return Measurement(
        workload=workload,
        passes=passes,
        metrics=compute.measure_metrics(workload, passes, peaks, per_pass),
        pass_metrics=per_pass,
        gauges=tuple(gauges),
    )


def run_test(
    plan: Plan,
    handle: ServerHandle,
    baseline_dir: Path,
    mode: SaveMode = SaveMode.COMPARE,
    progress: Progress | None = None,
    gate_other_release: bool = False,
) -> Outcome:
    """Measure, check the thresholds, and gate on (or save) the baseline."""
    result = measure(handle, plan.workload, plan.repeat, progress, settle=plan.settle)
    checks = thresholds.check(result.metrics, plan.thresholds)
    verdict = gate.evaluate(
        plan.test_id,
        result,
        handle.provenance,
        baseline_dir,
        plan.tolerances,
        gate.gated_metrics(result, plan.gate),
        mode,
        gate_other_release,
        level=2 * plan.stored_alpha,
    )
    return Outcome(plan.test_id, handle.provenance, result, checks, verdict)
