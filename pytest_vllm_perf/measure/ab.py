"""An A/B test: both sides measured pass by pass in the order their ``Turns`` give
(alternated on resident servers, in blocks on servers booted in turn), the candidate
judged against the base at each look of the design the turns allow."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal, Protocol

from pytest_vllm_perf.core.records import (
    GateResult,
    Measurement,
    Outcome,
    Progress,
)
from pytest_vllm_perf.measure.plan import Plan, assemble, measure
from pytest_vllm_perf.serving.pool import SPLIT_NOTE, ServerHandle
from pytest_vllm_perf.verdict import gate, thresholds
from pytest_vllm_perf.verdict.sequential import Design, Look

Side = Literal["base", "candidate"]


class Turns(Protocol):
    """How the two sides of an A/B run take turns on the machine (the A/B modes of
    ``measure.modes`` are such): the server a side is measured on now (booting it when
    the sides boot in turn), the sequential design their budget allows, and the order
    of the passes up to a number of pairs, as (schedule index, side). Pass k of both
    sides replays schedule k, so that the verdict pairs pass k with pass k."""

    @property
    def in_turn(self) -> bool:
        """Whether each boot evicts the other side: a boot's drift is then part of the
        noise (``gate.ab``), and a capacity search runs each side whole."""
        ...

    def server(self, side: Side) -> ServerHandle: ...

    def design(self, plan: Plan) -> Design: ...

    def order(self, pairs: int) -> list[tuple[int, Side]]: ...


def alternation(repeat: int) -> list[tuple[int, tuple[Side, Side]]]:
    """The A/B order: pass k on both sides, base first for even k (ABBA ABBA ...), so that
    neither side always runs first after the other one's load."""
    return [
        (k, ("base", "candidate") if k % 2 == 0 else ("candidate", "base")) for k in range(repeat)
    ]


def blocks(repeat: int) -> list[tuple[Side, range]]:
    """The sequential A/B order: the candidate's first half of the passes, then the
    base's first half and second half on one boot, then the candidate's second half
    (CBBC). Pass k of both sides still replays schedule k; each side boots twice at
    most (the candidate is up already when a test starts, and is up again at its end
    for the next test of its profile)."""
    half = (repeat + 1) // 2
    first, second = range(half), range(half, repeat)
    order: list[tuple[Side, range]] = [
        ("candidate", first),
        ("base", first),
        ("base", second),
        ("candidate", second),
    ]
    return [(side, passes) for side, passes in order if len(passes)]


def run_ab(
    plan: Plan,
    turns: Turns,
    progress: Progress | None = None,
    note: str = "",
    baseline_dir: Path | None = None,
) -> Outcome:
    """Measure both sides pass by pass, and judge the candidate against the base.

    ``turns`` says which server each side is measured on and in which order
    (``modes.Resident``: both servers up, passes alternated ABBA, one side loaded at a
    time; ``modes.Sequential``: each side booted when its turn comes, evicting the
    other, the passes in blocks, so that each side has the GPU's memory to itself,
    which is what a test of KV capacity or preemptions must have).

    The verdict is decided in looks (``sequential.Design``, as ``turns`` allows it):
    after ``plan.repeat`` pairs, and more pairs while a gated metric is undecided
    (also after another regressed, which stays regressed), up to the design's last
    look. Each side first runs ``plan.settle`` unmeasured passes on each server it is
    measured on.

    ``note`` says how the base side was chosen (``--vllm-ab-rev``: a profile the
    revision lacks is judged against ``default``); the verdict's note carries it.
    ``baseline_dir``: the stored baselines, whose boots tell sides booted in turn how
    far a boot drifts (``gate.ab_drift``).
    """
    sides_of = _Sides(plan, turns, progress, baseline_dir)
    sides, verdict = sides_of.in_looks()
    handles = sides_of.handles
    checks = thresholds.check(sides["candidate"].metrics, plan.thresholds)
    split = [n for n in handles["candidate"].provenance.engine_notes if n.startswith(SPLIT_NOTE)]
    for extra in (note, *split):
        if extra:
            verdict = dataclasses.replace(verdict, note=f"{verdict.note}; {extra}")
    provenance = handles["candidate"].provenance
    return Outcome(plan.test_id, provenance, sides["candidate"], checks, verdict, sides["base"])


class _Sides:
    """Both sides of one A/B test as they are measured: each side's passes by schedule
    index, the server each was last measured on, and the looks of the verdict."""

    def __init__(
        self, plan: Plan, turns: Turns, progress: Progress | None, baseline_dir: Path | None
    ) -> None:
        self.plan, self.turns, self.progress = plan, turns, progress
        self.baseline_dir = baseline_dir
        self.recorded: dict[Side, dict[int, Measurement]] = {"base": {}, "candidate": {}}
        self.handles: dict[Side, ServerHandle] = {}
        self.looks = turns.design(plan).looks()
        self.planned = self.looks[0].pairs

    def one(self, side: Side, k: int) -> None:
        """Pass ``k`` of ``side`` (booting its server first when booted in turn)."""
        handle = self.turns.server(side)
        # a side settles before its first pass on each server it boots (CBBC reboots)
        settle = self.plan.settle if self.handles.get(side) is not handle else 0
        self.handles[side] = handle
        progress, planned = self.progress, self.planned

        def say(message: str) -> None:
            if progress is not None:
                progress(f"A/B pass {k + 1}/{planned} {side} ({handle.profile}): {message}")

        say("starting")
        self.recorded[side][k] = measure(
            handle, self.plan.workload, 1, say, first_index=k, settle=settle
        )

    def judge(self, look: Look) -> tuple[dict[Side, Measurement], GateResult]:
        """Each side's passes so far as one measurement, and the verdict at ``look``."""
        plan = self.plan
        sides = {
            side: assemble(
                plan.workload,
                [p for k in sorted(found) for p in found[k].passes],
                [g for k in sorted(found) for g in found[k].gauges],
            )
            for side, found in self.recorded.items()
        }
        verdict = gate.ab(
            sides["base"], sides["candidate"], self.handles["base"].provenance,
            self.handles["candidate"].provenance, plan.tolerances,
            gate.gated_metrics(sides["candidate"], plan.gate, ab=True),
            sequential=self.turns.in_turn, look=look, root=self.baseline_dir,
        )  # fmt: skip
        return sides, verdict

    def in_looks(self) -> tuple[dict[Side, Measurement], GateResult]:
        """The passes in the turns' order, judged at each look until every gated metric
        is decided or the pair budget is spent; a regression stays one."""
        done: set[tuple[int, Side]] = set()
        earlier: GateResult | None = None
        for look in self.looks:
            self.planned = look.pairs
            for k, side in self.turns.order(look.pairs):
                if (k, side) not in done:
                    self.one(side, k)
                    done.add((k, side))
            sides, verdict = self.judge(look)
            if earlier is not None:
                verdict = gate.carry_regressions(earlier, verdict)
            earlier = verdict
            open_metrics = gate.undecided(verdict)
            if not open_metrics or look.last:
                break
            if self.progress is not None:
                self.progress(
                    f"A/B: undecided after {look.pairs} pairs ({', '.join(open_metrics)}): "
                    f"{self.looks[look.number].pairs - look.pairs} more pairs"
                )
        return sides, verdict
