"""Capacity searches: the highest request rate that still meets an SLO, on one server
(gated on a stored search) or on two (an A/B of the two searches)."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_vllm_perf.core.errors import WorkloadError
from pytest_vllm_perf.core.records import (
    Check,
    GateResult,
    Measurement,
    MetricVerdict,
    Outcome,
    Progress,
    Provenance,
    Verdict,
)
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.measure.ab import Side, Turns
from pytest_vllm_perf.measure.plan import measure
from pytest_vllm_perf.serving.pool import ServerHandle
from pytest_vllm_perf.store import capacities
from pytest_vllm_perf.verdict import capacity, thresholds
from pytest_vllm_perf.verdict import capacity_gate as stored_capacity
from pytest_vllm_perf.verdict import capacity_search as searches
from pytest_vllm_perf.verdict.compare import STORED_ALPHA
from pytest_vllm_perf.verdict.gate import SaveMode
from pytest_vllm_perf.verdict.sequential import DEFAULT_ALPHA


@dataclass(frozen=True)
class CapacityRun:
    """A capacity search on one server, or two (an A/B run): the search, the class whose
    rate it varied, the SLO, the seconds it took (load and warmups, on the server's GPU
    when it has one); in an A/B run, the base side's search and the verdict on the
    ratio (``verdict.capacity.judge``)."""

    search: capacity.Search
    cls: str
    slo: Mapping[str, float]
    seconds: float
    base: capacity.Search | None = None
    verdict: MetricVerdict | None = None
    stored: stored_capacity.CapacityGate | None = None  # what the stored baseline made of it
    provenance: Provenance | None = None  # the (candidate) side's server
    base_provenance: Provenance | None = None

    @property
    def regressed(self) -> bool:
        """Whether the run fails on the verdict: the A/B ratio's, or the stored one's."""
        if self.stored is not None:
            return self.stored.regressed
        return self.verdict is not None and self.verdict.verdict is Verdict.REGRESSED

    def line(self) -> str:
        """One line a test prints: the capacity, its interval, the passes and the time;
        in an A/B run both sides and the ratio's verdict; against a stored baseline,
        what the gate did."""
        slo = ", ".join(f"{k} <= {v:g}" for k, v in self.slo.items())
        head = f"capacity of {self.cls!r} under {slo}"
        spent = f"{self.seconds:.0f} s"
        if self.base is None:
            own = f"{head}: {describe(self.search)} ({spent})"
            stored = self.stored
            if stored is None:
                return own
            if stored.verdict is None or stored.stored is None:
                return f"{own}; baseline {stored.status}: {stored.note or stored.path}"
            note = f" ({stored.status}: {stored.note})" if stored.note else ""
            return (
                f"{own}; against the baseline {describe(stored.stored)}: "
                f"{judged(stored.verdict)}{note}"
            )
        found = f"{head}: base {describe(self.base)}; candidate {describe(self.search)} ({spent})"
        return f"{found}; {judged(self.verdict)}" if self.verdict else found

    def outcome(self, test_id: str, workload: Workload, min_rps: float | None = None) -> Outcome:
        """The search as every test's outcome: ``capacity_rps`` its one metric (the fit,
        or with no bounded interval the highest rate a pass held at), ``min_rps`` its
        one threshold, and the gate's verdict on it, so that the terminal summary,
        ``--vllm-json``, ``--vllm-markdown`` and ``prgate`` show it as a metric."""
        if self.provenance is None:
            raise ValueError("a capacity outcome needs the provenance of its server")
        rps = self.search.lower_evidence
        metrics = {capacity.METRIC: rps}
        result = Measurement(workload, (), metrics, ())
        checks: tuple[Check, ...] = ()
        if min_rps is not None:
            checks = (Check(f"min_{capacity.METRIC}", capacity.METRIC, min_rps, rps, True),)
        line = self.line()
        verdict: GateResult | None = None
        if self.stored is not None:
            verdict = self.stored.result(line)
        elif self.verdict is not None and self.base_provenance is not None:
            verdict = stored_capacity.capacity_ab(
                self.verdict, self.base_provenance, self.provenance, line
            )
        sides = {"candidate": self.search, "base": self.base}
        search = {
            "class": self.cls,
            "slo": dict(self.slo),
            "seconds": round(self.seconds, 3),
            **{side: capacities.search_dict(found) for side, found in sides.items() if found},
        }
        return Outcome(test_id, self.provenance, result, checks, verdict, search=search)


def describe(found: capacity.Search) -> str:
    """A search's result in words: the capacity with its interval, or the bracket."""
    fit, spent = found.capacity, f"{found.passes} passes"
    if fit is None and not (found.held and math.isfinite(found.broke)):
        return f"no bracket found ({spent})"
    if fit is None or not fit.bounded:
        return (
            f"not resolved; single passes held the SLO at up to {found.held:.3g} req/s "
            f"and broke it from {found.broke:.3g} req/s, and the fit's interval is "
            f"unbounded ({spent})"
        )
    state = "" if found.converged else ", not narrower than the tolerance"
    return f"{fit.rps:.3g} req/s (95% CI {fit.low:.3g}..{fit.high:.3g}{state}; {spent})"


def judged(verdict: MetricVerdict) -> str:
    """``capacity_rps x0.880 (95% CI x0.85..x0.91), regressed at 10%``."""
    if math.isnan(verdict.low):
        return f"{verdict.metric} {verdict.verdict}: {verdict.basis}"
    # a test whose share of the run's budget is below the interval's own tail says so
    level = f", one-sided level {verdict.level:.3g}" if verdict.level < capacity.ALPHA else ""
    return (
        f"{verdict.metric} x{verdict.ratio:.3f} (95% CI x{verdict.low:.3f}.."
        f"x{verdict.high:.3f}), {verdict.verdict} at {verdict.tolerance:.0%}{level}"
    )


def _capacity_target(workload: Workload, slo: Mapping[str, float], cls: str | None) -> RequestClass:
    open_loop = [c for c in workload.classes if c.rate > 0]
    chosen = [c for c in open_loop if c.name == cls] if cls else open_loop
    if len(chosen) != 1:
        names = ", ".join(c.name for c in open_loop) or "none"
        raise WorkloadError(
            f"capacity: name one open-loop class of workload {workload.name!r} "
            f"(open-loop classes: {names})"
        )
    thresholds.validate(dict(slo))
    workload.check_classes(slo, "slo")
    return chosen[0]


def _capacity_trial(
    source: Callable[[], ServerHandle],
    workload: Workload,
    target: str,
    slo: Mapping[str, float],
    progress: Progress | None,
    label: str = "",
    seen: dict[str, Provenance] | None = None,
) -> Callable[[float], float]:
    """One pass of ``workload`` at a rate of class ``target``, as its SLO margin; pass k
    replays schedule k. Failed requests count through the SLO's keys (a failed
    request's TTFT is infinite). ``seen[label]``: the provenance of the server the
    last pass ran on."""
    count = 0

    def trial(rate: float) -> float:
        nonlocal count
        handle = source()  # a side booted in turn boots here, evicting the other
        if seen is not None:
            seen[label] = handle.provenance
        load = workload.override({target: {"rate": rate}})
        found = measure(handle, load, 1, progress, first_index=count)
        count += 1
        per_class = [found.metrics.get(f"{target}.{k}", 0) for k in ("completed", "failed")]
        if not sum(per_class) > 0:  # no evidence either way: not a broken SLO
            raise WorkloadError(
                f"capacity: no request was measured in a {load.duration_s:g} s pass at "
                f"{rate:.3g} req/s; lengthen duration_s or start at a higher rate"
            )
        margin = capacity.margin(dict(found.metrics), dict(slo))
        if progress is not None:
            progress(f"capacity{label}: {rate:.3g} req/s -> SLO margin {margin:.2f}")
        return margin

    return trial


def capacity_search(
    handle: ServerHandle,
    workload: Workload,
    slo: Mapping[str, float],
    cls: str | None = None,
    tolerance: float = 0.1,
    max_passes: int = 30,
    progress: Progress | None = None,
) -> CapacityRun:
    """The highest rate of open-loop class ``cls`` (the workload's only one by default)
    at which ``slo`` holds (``verdict.capacity``): one pass of ``workload`` per trial,
    its rate varied from the class's own."""
    target = _capacity_target(workload, slo, cls)
    started = time.monotonic()
    trial = _capacity_trial(lambda: handle, workload, target.name, slo, progress)
    found = searches.search(trial, target.rate, tolerance, max_passes)
    spent = time.monotonic() - started
    return CapacityRun(found, target.name, dict(slo), spent, provenance=handle.provenance)


def capacity_gate(
    found: CapacityRun,
    handle: ServerHandle,
    test_id: str,
    workload: Workload,
    root: Path,
    mode: SaveMode = SaveMode.COMPARE,
    tolerance: float = 0.1,
    gate_other_release: bool = False,
    alpha: float = STORED_ALPHA,
) -> CapacityRun:
    """A capacity search judged against its stored baseline at ``tolerance``, or saved
    as it (``verdict.capacity_gate.capacity``); ``alpha``: the test's one-sided
    false-alarm bound, its share of --vllm-stored-run-alpha."""
    stored = stored_capacity.capacity(
        test_id,
        found.search,
        found.slo,
        workload.hash,
        handle.provenance,
        root,
        tolerance,
        mode,
        gate_other_release,
        alpha,
    )
    return dataclasses.replace(found, stored=stored)


def capacity_ab(
    turns: Turns,
    workload: Workload,
    slo: Mapping[str, float],
    cls: str | None = None,
    tolerance: float = 0.1,
    max_passes: int = 30,
    progress: Progress | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> CapacityRun:
    """Both sides' capacity under one SLO and the verdict on their ratio at
    ``tolerance``, ``regressed`` at one-sided level ``alpha`` (an A/B test's, or its
    share of --vllm-ab-run-alpha). Resident sides search pass by pass in turn, ABBA
    (``verdict.capacity_search.interleave``); sides booted in turn
    (``turns.in_turn``, ``--vllm-ab-mode=sequential``) search one after the other,
    base first, so that each side boots once."""
    target = _capacity_target(workload, slo, cls)
    started = time.monotonic()
    sides: tuple[Side, Side] = ("base", "candidate")
    seen: dict[str, Provenance] = {}
    trials: dict[str, Callable[[float], float]] = {}
    for side in sides:
        server = functools.partial(turns.server, side)
        trials[side] = _capacity_trial(
            server, workload, target.name, slo, progress, f" {side}", seen
        )

    def steps() -> Generator[float, float, capacity.Search]:
        return searches.searching(target.rate, tolerance, max_passes)

    found: dict[str, capacity.Search]
    if turns.in_turn:
        found = {side: searches.interleave({side: steps()}, trials)[side] for side in sides}
    else:
        found = searches.interleave({side: steps() for side in sides}, trials)
    verdict = capacity.judge(found["base"], found["candidate"], tolerance, alpha)
    return CapacityRun(
        found["candidate"],
        target.name,
        dict(slo),
        time.monotonic() - started,
        base=found["base"],
        verdict=verdict,
        provenance=seen.get(" candidate"),
        base_provenance=seen.get(" base"),
    )
