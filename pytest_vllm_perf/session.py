"""Run one perf measurement end to end: workload against a server, thresholds checked.

This is what the ``vllm_perf`` fixture calls; it is plain Python so that scripts
and benchmarks (``bench/``) measure exactly what the tests measure.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_vllm_perf import runner, thresholds
from pytest_vllm_perf.pool import ServerHandle
from pytest_vllm_perf.runner import RunResult
from pytest_vllm_perf.thresholds import Check
from pytest_vllm_perf.workload import Workload

if TYPE_CHECKING:
    from pytest_vllm_perf.gate import GateResult

DEFAULT_THRESHOLDS: Mapping[str, float] = {"failed": 0}


@dataclass(frozen=True)
class Outcome:
    """One test's measurement under one profile, with its threshold checks."""

    test_id: str
    profile: str
    result: RunResult
    checks: tuple[Check, ...]
    handle: ServerHandle
    gate: GateResult | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def merged_thresholds(*layers: Mapping[str, float] | None) -> dict[str, float]:
    """Later layers win: defaults < profile < marker < code."""
    out = dict(DEFAULT_THRESHOLDS)
    for layer in layers:
        out.update(layer or {})
    return out


def run_sync(coro_factory: Callable[[], Any]) -> Any:
    """Run a coroutine to completion, also from code that already has a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coro_factory())).result()


def measure(
    test_id: str,
    handle: ServerHandle,
    workload: Workload,
    limits: Mapping[str, float],
    progress: runner.Progress | None = None,
    repeat: int = 1,
) -> Outcome:
    """Drive ``workload`` ``repeat`` times against ``handle``; check ``limits`` on it all."""
    result: RunResult = run_sync(
        lambda: runner.run(workload, handle.base_url, handle.model, progress, repeat=repeat)
    )
    handle.check_alive()
    checks = tuple(thresholds.check(result.metrics, limits))
    return Outcome(test_id, handle.profile.name, result, checks, handle)
