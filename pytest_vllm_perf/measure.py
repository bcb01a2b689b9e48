"""One perf test end to end, as plain Python: server -> load -> records -> statistics -> verdict.

This is what the ``vllm_perf`` fixture calls; scripts and benchmarks (``bench/``)
call it too, so they measure exactly what the tests measure. Thresholds and
tolerances are layered here, in one place:

- thresholds: ``{"failed": 0}`` < profile < marker < code;
- tolerances: the registry's defaults for the platform < ini < profile < marker < code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
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
from pytest_vllm_perf.serving.pool import SPLIT_NOTE, ServerHandle
from pytest_vllm_perf.verdict import gate, stats, thresholds
from pytest_vllm_perf.verdict.gate import SaveMode

__all__ = [
    "DEFAULT_THRESHOLDS",
    "Plan",
    "SaveMode",
    "alternation",
    "assemble",
    "layered",
    "measure",
    "run_ab",
    "run_sync",
    "run_test",
]

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
    ) -> Plan:
        """Layer thresholds and tolerances, and validate every key (ThresholdError);
        ``ab``: an A/B run, whose defaults are tighter (registry.AB_TOLERANCES)."""
        limits = layered(DEFAULT_THRESHOLDS, *thresholds_layers)
        tol = layered(default_tolerances(platform, ab), *tolerance_layers)
        thresholds.validate(limits)
        validate_tolerances(tol)
        validate_tolerances(dict.fromkeys(gate_extra, 0.0))
        return cls(test_id, workload, repeat, limits, tol, tuple(gate_extra))


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
) -> Measurement:
    """Drive ``workload`` ``repeat`` times against ``handle`` and compute its metrics."""
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
        )
    )
    handle.check_alive()
    return assemble(workload, recording.passes, recording.gauges)


def assemble(
    workload: Workload, passes: Sequence[PassRecord], gauges: Sequence[GaugeReading]
) -> Measurement:
    """A measurement from recorded passes (of one run, or gathered from several)."""
    passes = tuple(passes)
    per_pass = tuple(stats.pass_metrics(workload, p) for p in passes)
    peaks = scrape.gauge_peaks(tuple(gauges))
    return Measurement(
        workload=workload,
        passes=passes,
        metrics=stats.measure_metrics(workload, passes, peaks, per_pass),
        pass_metrics=per_pass,
        gauges=tuple(gauges),
    )


def alternation(repeat: int) -> list[tuple[int, tuple[str, str]]]:
    """The A/B order: pass k on both sides, base first for even k (ABBA ABBA ...), so that
    neither side always runs first after the other one's load."""
    return [
        (k, ("base", "candidate") if k % 2 == 0 else ("candidate", "base")) for k in range(repeat)
    ]


def run_ab(
    plan: Plan,
    base: ServerHandle,
    candidate: ServerHandle,
    progress: Progress | None = None,
    note: str = "",
) -> Outcome:
    """Measure both sides pass by pass, alternating, and judge the candidate against the base.

    ``note`` says how the base side was chosen (``--vllm-ab-rev``: a profile the
    revision lacks is judged against ``default``); the verdict's note carries it.

    Only one side takes load at a time; pass k of both replays schedule k, so the
    verdict pairs pass k with pass k. Each side's server stays up between its passes.
    """
    handles = {"base": base, "candidate": candidate}
    recorded: dict[str, list[Measurement]] = {"base": [], "candidate": []}
    for k, order in alternation(plan.repeat):
        for side in order:
            handle = handles[side]

            def say(message: str, side: str = side, k: int = k) -> None:
                if progress is not None:
                    name = handles[side].profile
                    progress(f"A/B pass {k + 1}/{plan.repeat} {side} ({name}): {message}")

            say("starting")
            recorded[side].append(measure(handle, plan.workload, 1, say, first_index=k))
    sides = {
        side: assemble(
            plan.workload,
            [p for m in found for p in m.passes],
            [g for m in found for g in m.gauges],
        )
        for side, found in recorded.items()
    }
    checks = thresholds.check(sides["candidate"].metrics, plan.thresholds)
    verdict = gate.ab(
        sides["base"],
        sides["candidate"],
        base.provenance,
        candidate.provenance,
        plan.tolerances,
        gate.gated_metrics(sides["candidate"], plan.gate, ab=True),
    )
    split = [n for n in candidate.provenance.engine_notes if n.startswith(SPLIT_NOTE)]
    for extra in (note, *split):
        if extra:
            verdict = dataclasses.replace(verdict, note=f"{verdict.note}; {extra}")
    return Outcome(
        plan.test_id, candidate.provenance, sides["candidate"], checks, verdict, sides["base"]
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
    result = measure(handle, plan.workload, plan.repeat, progress)
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
    )
    return Outcome(plan.test_id, handle.provenance, result, checks, verdict)
