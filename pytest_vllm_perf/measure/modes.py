"""How a perf test is judged, as objects behind one protocol: against its stored
baseline (``Stored``), or as an A/B of two sides, resident on one machine and
alternated (``Resident``) or booted in turn (``Sequential``). The plugin builds one
per test; the fixture hands it every measurement and every capacity search, so the
fixture never asks which mode it has. A new A/B mode is a class and a row of
``AB_MODES`` here (``--vllm-ab-mode`` takes its choices from that table)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol

from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.core.records import Outcome, Progress
from pytest_vllm_perf.core.workload import Workload
from pytest_vllm_perf.measure.ab import run_ab
from pytest_vllm_perf.measure.capacity import (
    CapacityRun,
    capacity_ab,
    capacity_gate,
    capacity_search,
)
from pytest_vllm_perf.measure.plan import Plan, run_test
from pytest_vllm_perf.serving.pool import ServerHandle, ServerPool
from pytest_vllm_perf.verdict.gate import SaveMode

__all__ = ["AB_MODES", "Mode", "ModeName", "Resident", "Sequential", "Stored"]

ModeName = Literal["stored", "resident", "sequential"]


@dataclass(frozen=True)
class Search:
    """What one capacity call asks: the workload, its SLO and open-loop class, the
    tolerance, the passes allowed, the test's id and its one-sided false-alarm bound."""

    load: Workload
    slo: Mapping[str, float]
    cls: str | None
    tolerance: float
    max_passes: int
    test_id: str
    alpha: float


class Mode(Protocol):
    """A way of judging a test: ``ab`` says whether its budget is the A/B run's."""

    @property
    def name(self) -> ModeName: ...

    @property
    def ab(self) -> bool: ...

    def run(self, plan: Plan, progress: Progress | None) -> Outcome: ...

    def capacity(self, ask: Search, progress: Progress | None) -> CapacityRun: ...


@dataclass(frozen=True)
class Stored:
    """The test's server measured and judged against (or saved as) its stored baseline."""

    server: ServerHandle
    baseline_dir: Path
    save_mode: SaveMode = SaveMode.COMPARE
    gate_other_release: bool = False
    name: ModeName = "stored"

    @property
    def ab(self) -> bool:
        return False

    def run(self, plan: Plan, progress: Progress | None) -> Outcome:
        return run_test(plan, self.server, self.baseline_dir, self.save_mode, progress,
                        self.gate_other_release)  # fmt: skip

    def capacity(self, ask: Search, progress: Progress | None) -> CapacityRun:
        found = capacity_search(self.server, ask.load, ask.slo, ask.cls, ask.tolerance,
                                ask.max_passes, progress)  # fmt: skip
        return capacity_gate(found, self.server, ask.test_id, ask.load, self.baseline_dir,
                             self.save_mode, ask.tolerance, self.gate_other_release,
                             alpha=ask.alpha)  # fmt: skip


@dataclass(frozen=True)
class _AB:
    """Two sides measured pass by pass, the candidate judged against the base; ``note``
    says how the base side was chosen, ``baseline_dir`` lends sides booted in turn the
    boot drift its baselines measured."""

    base: ServerHandle | Callable[[], ServerHandle]
    candidate: ServerHandle | Callable[[], ServerHandle]
    note: str = ""
    baseline_dir: Path | None = None

    @property
    def ab(self) -> bool:
        return True

    def run(self, plan: Plan, progress: Progress | None) -> Outcome:
        return run_ab(plan, self.base, self.candidate, progress, self.note, self.baseline_dir)

    def capacity(self, ask: Search, progress: Progress | None) -> CapacityRun:
        return capacity_ab(self.base, self.candidate, ask.load, ask.slo, ask.cls, ask.tolerance,
                           ask.max_passes, progress, alpha=ask.alpha)  # fmt: skip


@dataclass(frozen=True)
class Resident(_AB):
    """Both servers up at once (the base in a slot of its own), one loaded at a time,
    passes alternated ABBA and judged in looks."""

    name: ModeName = "resident"

    @classmethod
    def build(
        cls, pool: ServerPool, server: ServerHandle, base: Profile, python: str | None,
        mine: Profile, note: str, baseline_dir: Path,
    ) -> Resident:  # fmt: skip
        return cls(pool.get(base, slot="base", python=python), server, note, baseline_dir)


@dataclass(frozen=True)
class Sequential(_AB):
    """One side booted at a time on one slot (each has the machine's memory to itself),
    the passes in blocks (CBBC), one look."""

    name: ModeName = "sequential"

    @classmethod
    def build(
        cls, pool: ServerPool, server: ServerHandle, base: Profile, python: str | None,
        mine: Profile, note: str, baseline_dir: Path,
    ) -> Sequential:  # fmt: skip
        base_boot = functools.partial(pool.get, base, "main", python)
        return cls(base_boot, functools.partial(pool.get, mine, "main"), note, baseline_dir)


# --vllm-ab-mode's choices: the A/B modes by name
AB_MODES: Final[Mapping[str, type[Resident] | type[Sequential]]] = {
    "resident": Resident,
    "sequential": Sequential,
}
