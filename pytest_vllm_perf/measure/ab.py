"""An A/B test: both sides measured pass by pass (alternated on resident servers, in
blocks on servers booted in turn), the candidate judged against the base."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

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

# a side's server: resident (a handle), or booted in turn when called (evicting the other)
Source = ServerHandle | Callable[[], ServerHandle]


def alternation(repeat: int) -> list[tuple[int, tuple[str, str]]]:
    """The A/B order: pass k on both sides, base first for even k (ABBA ABBA ...), so that
    neither side always runs first after the other one's load."""
    return [
        (k, ("base", "candidate") if k % 2 == 0 else ("candidate", "base")) for k in range(repeat)
    ]


def blocks(repeat: int) -> list[tuple[str, range]]:
    """The sequential A/B order: the candidate's first half of the passes, then the
    base's first half and second half on one boot, then the candidate's second half
    (CBBC). Pass k of both sides still replays schedule k; each side boots twice at
    most (the candidate is up already when a test starts, and is up again at its end
    for the next test of its profile)."""
    half = (repeat + 1) // 2
    first, second = range(half), range(half, repeat)
    order = [("candidate", first), ("base", first), ("base", second), ("candidate", second)]
    return [(side, passes) for side, passes in order if len(passes)]


def run_ab(
    plan: Plan,
    base: Source,
    candidate: Source,
    progress: Progress | None = None,
    note: str = "",
    baseline_dir: Path | None = None,
) -> Outcome:
    """Measure both sides pass by pass, and judge the candidate against the base.

    ``note`` says how the base side was chosen (``--vllm-ab-rev``: a profile the
    revision lacks is judged against ``default``); the verdict's note carries it.
    ``baseline_dir``: the stored baselines, whose boots tell sides booted in turn how
    far a boot drifts (``gate.ab_drift``).

    With two handles both servers are resident and passes alternate ABBA, only one
    side loaded at a time. With two callables (``--vllm-ab-mode=sequential``), each
    boots its side when called, evicting the other (``ServerPool.get`` on one slot),
    and the passes run in blocks (``blocks``): each side has the GPU's memory to
    itself, which is what a test of KV capacity or preemptions must have. Either
    way pass k of both sides replays schedule k, so the verdict pairs pass k with
    pass k.

    Resident, the verdict is decided in looks (``sequential.Design``): after
    ``plan.repeat`` pairs, and 4 more pairs at a time while a gated metric is
    undecided (also after another regressed, which stays regressed), up to
    ``plan.most``. Each side first runs ``plan.settle`` unmeasured passes on each
    server it is measured on.
    """
    sides_of = _Sides(plan, {"base": base, "candidate": candidate}, progress, baseline_dir)
    sides, verdict = sides_of.in_blocks() if sides_of.sequential else sides_of.in_looks()
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
        self,
        plan: Plan,
        sources: dict[str, Source],
        progress: Progress | None,
        baseline_dir: Path | None,
    ) -> None:
        self.plan, self.sources, self.progress = plan, sources, progress
        self.baseline_dir = baseline_dir
        self.recorded: dict[str, dict[int, Measurement]] = {"base": {}, "candidate": {}}
        self.handles: dict[str, ServerHandle] = {}
        self.sequential = all(callable(s) for s in sources.values())
        # booted in turn, the sides cannot add pairs without more boots: one look
        most = plan.repeat if self.sequential else max(plan.repeat, plan.most)
        self.looks = Design(first=plan.repeat, most=most, alpha=plan.alpha).looks()
        self.planned = self.looks[0].pairs

    def one(self, side: str, k: int) -> None:
        """Pass ``k`` of ``side`` (booting its server first when booted in turn)."""
        source = self.sources[side]
        handle = source() if callable(source) else source
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

    def judge(self, look: Look) -> tuple[dict[str, Measurement], GateResult]:
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
            sequential=self.sequential, look=look, root=self.baseline_dir,
        )  # fmt: skip
        return sides, verdict

    def in_blocks(self) -> tuple[dict[str, Measurement], GateResult]:
        """Sides booted in turn: the passes in blocks (CBBC), one look."""
        for side, passes in blocks(self.plan.repeat):
            for k in passes:
                self.one(side, k)
        return self.judge(self.looks[0])

    def in_looks(self) -> tuple[dict[str, Measurement], GateResult]:
        """Resident sides: pairs alternated ABBA, judged at each look until every gated
        metric is decided or the pair budget is spent; a regression stays one."""
        done = 0
        earlier: GateResult | None = None
        for look in self.looks:
            self.planned = look.pairs
            for k, order in alternation(look.pairs)[done:]:
                for side in order:
                    self.one(side, k)
            done = look.pairs
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
