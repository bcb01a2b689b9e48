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
import math
import time
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from pytest_vllm_perf.core.errors import WorkloadError
from pytest_vllm_perf.core.records import (
    Check,
    GateResult,
    GaugeReading,
    Measurement,
    MetricVerdict,
    Outcome,
    PassRecord,
    Progress,
    Provenance,
    Verdict,
)
from pytest_vllm_perf.core.registry import default_tolerances, validate_tolerances
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import runner, scrape
from pytest_vllm_perf.load.runner import GAUGES_EVERY_S
from pytest_vllm_perf.serving.pool import SPLIT_NOTE, ServerHandle
from pytest_vllm_perf.verdict import baseline, capacity, gate, stats, thresholds
from pytest_vllm_perf.verdict.compare import STORED_ALPHA
from pytest_vllm_perf.verdict.gate import SaveMode
from pytest_vllm_perf.verdict.sequential import DEFAULT_ALPHA, Design, Look

__all__ = [
    "DEFAULT_THRESHOLDS",
    "CapacityRun",
    "Plan",
    "SaveMode",
    "alternation",
    "assemble",
    "blocks",
    "capacity_ab",
    "capacity_gate",
    "capacity_search",
    "describe",
    "judged",
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
        ``ab``: an A/B run, whose defaults are tighter (registry.AB_TOLERANCES)."""
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
    stored: gate.CapacityGate | None = None  # what the stored baseline made of it
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
            verdict = gate.capacity_ab(self.verdict, self.base_provenance, self.provenance, line)
        sides = {"candidate": self.search, "base": self.base}
        search = {
            "class": self.cls,
            "slo": dict(self.slo),
            "seconds": round(self.seconds, 3),
            **{side: baseline.search_dict(found) for side, found in sides.items() if found},
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
    source: ServerHandle | Callable[[], ServerHandle],
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
        handle = source() if callable(source) else source
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
    trial = _capacity_trial(handle, workload, target.name, slo, progress)
    found = capacity.search(trial, target.rate, tolerance, max_passes)
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
    as it (``gate.capacity``); ``alpha``: the test's one-sided false-alarm bound, its
    share of --vllm-stored-run-alpha."""
    stored = gate.capacity(
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
    base: ServerHandle | Callable[[], ServerHandle],
    candidate: ServerHandle | Callable[[], ServerHandle],
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
    share of --vllm-ab-run-alpha). Resident sides (two handles) search pass by pass in turn, ABBA
    (``capacity.interleave``); sides booted in turn (two callables,
    ``--vllm-ab-mode=sequential``) search one after the other, base first, so that
    each side boots once."""
    target = _capacity_target(workload, slo, cls)
    started = time.monotonic()
    sources = {"base": base, "candidate": candidate}
    seen: dict[str, Provenance] = {}
    trials = {
        side: _capacity_trial(source, workload, target.name, slo, progress, f" {side}", seen)
        for side, source in sources.items()
    }

    def steps() -> Generator[float, float, capacity.Search]:
        return capacity.searching(target.rate, tolerance, max_passes)

    if callable(base) and callable(candidate):
        found = {side: capacity.interleave({side: steps()}, trials)[side] for side in sources}
    else:
        found = capacity.interleave({side: steps() for side in sources}, trials)
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
    base: ServerHandle | Callable[[], ServerHandle],
    candidate: ServerHandle | Callable[[], ServerHandle],
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
    recorded: dict[str, dict[int, Measurement]] = {"base": {}, "candidate": {}}
    handles: dict[str, ServerHandle] = {}
    sequential = callable(base) and callable(candidate)
    sources = {"base": base, "candidate": candidate}
    # booted in turn, the sides cannot add pairs without more boots: one look
    most = plan.repeat if sequential else max(plan.repeat, plan.most)
    design = Design(first=plan.repeat, most=most, alpha=plan.alpha)
    looks = design.looks()
    planned = looks[0].pairs

    def one(side: str, k: int) -> None:
        source = sources[side]
        handle = source() if callable(source) else source
        # a side settles before its first pass on each server it boots (CBBC reboots)
        settle = plan.settle if handles.get(side) is not handle else 0
        handles[side] = handle

        def say(message: str) -> None:
            if progress is not None:
                progress(f"A/B pass {k + 1}/{planned} {side} ({handle.profile}): {message}")

        say("starting")
        recorded[side][k] = measure(handle, plan.workload, 1, say, first_index=k, settle=settle)

    def judge(look: Look) -> tuple[dict[str, Measurement], GateResult]:
        sides = {
            side: assemble(
                plan.workload,
                [p for k in sorted(found) for p in found[k].passes],
                [g for k in sorted(found) for g in found[k].gauges],
            )
            for side, found in recorded.items()
        }
        verdict = gate.ab(
            sides["base"],
            sides["candidate"],
            handles["base"].provenance,
            handles["candidate"].provenance,
            plan.tolerances,
            gate.gated_metrics(sides["candidate"], plan.gate, ab=True),
            sequential=sequential,
            look=look,
            root=baseline_dir,
        )
        return sides, verdict

    if sequential:
        for side, passes in blocks(plan.repeat):
            for k in passes:
                one(side, k)
        sides, verdict = judge(looks[0])
    else:
        done = 0
        earlier: GateResult | None = None
        for look in looks:
            planned = look.pairs
            for k, order in alternation(look.pairs)[done:]:
                for side in order:
                    one(side, k)
            done = look.pairs
            sides, verdict = judge(look)
            if earlier is not None:
                verdict = gate.carry_regressions(earlier, verdict)
            earlier = verdict
            open_metrics = gate.undecided(verdict)
            if not open_metrics or look.last:
                break
            if progress is not None:
                progress(
                    f"A/B: undecided after {look.pairs} pairs ({', '.join(open_metrics)}): "
                    f"{looks[look.number].pairs - look.pairs} more pairs"
                )
    checks = thresholds.check(sides["candidate"].metrics, plan.thresholds)
    split = [n for n in handles["candidate"].provenance.engine_notes if n.startswith(SPLIT_NOTE)]
    for extra in (note, *split):
        if extra:
            verdict = dataclasses.replace(verdict, note=f"{verdict.note}; {extra}")
    provenance = handles["candidate"].provenance
    return Outcome(plan.test_id, provenance, sides["candidate"], checks, verdict, sides["base"])


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
