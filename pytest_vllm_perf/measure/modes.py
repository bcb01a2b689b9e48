"""How a perf test is judged, as objects behind one protocol: against its stored
baseline (``Stored``), or as an A/B of two sides, resident on one machine and
alternated (``Resident``) or booted in turn (``Sequential``). The plugin builds one
per test; the fixture hands it every measurement and every capacity search, so the
fixture never asks which mode it has. An A/B mode is also the ``Turns`` its two
sides take (``measure.ab``): which server a side is measured on, the order of the
passes and the looks its budget allows; ``run_ab`` and ``capacity_ab`` ask it and
never what it is. A new A/B mode is a class and a row of ``AB_MODES`` here
(``--vllm-ab-mode`` takes its choices from that table)."""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol

from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.core.records import Outcome, Progress
from pytest_vllm_perf.core.workload import Workload
from pytest_vllm_perf.measure.ab import Side, alternation, blocks, run_ab
from pytest_vllm_perf.measure.capacity import (
    CapacityRun,
    capacity_ab,
    capacity_gate,
    capacity_search,
)
from pytest_vllm_perf.measure.plan import Plan, run_test
from pytest_vllm_perf.serving.pool import ServerHandle, ServerPool
from pytest_vllm_perf.verdict.gate import SaveMode
from pytest_vllm_perf.verdict.sequential import Design

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


class _AB(abc.ABC):
    """Two sides measured pass by pass, the candidate judged against the base; ``note``
    says how the base side was chosen, ``baseline_dir`` lends sides booted in turn the
    boot drift its baselines measured. A subclass is the sides' ``Turns``."""

    note: str
    baseline_dir: Path | None
    in_turn: bool

    @property
    def ab(self) -> bool:
        return True

    @abc.abstractmethod
    def server(self, side: Side) -> ServerHandle: ...

    @abc.abstractmethod
    def design(self, plan: Plan) -> Design: ...

    @abc.abstractmethod
    def order(self, pairs: int) -> list[tuple[int, Side]]: ...

    def run(self, plan: Plan, progress: Progress | None) -> Outcome:
        return run_ab(plan, self, progress, self.note, self.baseline_dir)

    def capacity(self, ask: Search, progress: Progress | None) -> CapacityRun:
        return capacity_ab(self, ask.load, ask.slo, ask.cls, ask.tolerance, ask.max_passes,
                           progress, alpha=ask.alpha)  # fmt: skip


@dataclass(frozen=True)
class Resident(_AB):
    """Both servers up at once (the base in a slot of its own), one loaded at a time,
    passes alternated ABBA and judged in looks up to the plan's pair budget."""

    base: ServerHandle
    candidate: ServerHandle
    note: str = ""
    baseline_dir: Path | None = None
    name: ModeName = "resident"
    in_turn: bool = False

    @classmethod
    def build(
        cls, pool: ServerPool, server: ServerHandle, base: Profile, python: str | None,
        mine: Profile, note: str, baseline_dir: Path,
    ) -> Resident:  # fmt: skip
        return cls(pool.get(base, slot="base", python=python), server, note, baseline_dir)

    def server(self, side: Side) -> ServerHandle:
        return self.base if side == "base" else self.candidate

    def design(self, plan: Plan) -> Design:
        return Design(first=plan.repeat, most=max(plan.repeat, plan.most), alpha=plan.alpha)

    def order(self, pairs: int) -> list[tuple[int, Side]]:
        return [(k, side) for k, pair in alternation(pairs) for side in pair]


@dataclass(frozen=True)
class Sequential(_AB):
    """One side booted at a time on one slot (each has the machine's memory to itself),
    the passes in blocks (CBBC), one look: more pairs would need more boots."""

    base: Callable[[], ServerHandle]
    candidate: Callable[[], ServerHandle]
    note: str = ""
    baseline_dir: Path | None = None
    name: ModeName = "sequential"
    in_turn: bool = True

    @classmethod
    def build(
        cls, pool: ServerPool, server: ServerHandle, base: Profile, python: str | None,
        mine: Profile, note: str, baseline_dir: Path,
    ) -> Sequential:  # fmt: skip
        base_boot = functools.partial(pool.get, base, "main", python)
        return cls(base_boot, functools.partial(pool.get, mine, "main"), note, baseline_dir)

    def server(self, side: Side) -> ServerHandle:
        return self.base() if side == "base" else self.candidate()

    def design(self, plan: Plan) -> Design:
        return Design(first=plan.repeat, most=plan.repeat, alpha=plan.alpha)

    def order(self, pairs: int) -> list[tuple[int, Side]]:
        return [(k, side) for side, passes in blocks(pairs) for k in passes]


# --vllm-ab-mode's choices: the A/B modes by name
AB_MODES: Final[Mapping[str, type[Resident] | type[Sequential]]] = {
    "resident": Resident,
    "sequential": Sequential,
}
