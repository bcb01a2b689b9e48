"""The regression gate: compare a measurement with its stored baseline, or store it.

Plain data in, plain data out: a test id, a measurement and its provenance go
in; a ``GateResult`` comes out. Nothing here knows about servers or pytest.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path

import numpy as np

from pytest_vllm_perf.core.records import (
    GateResult,
    GateStatus,
    Measurement,
    Provenance,
    Verdict,
)
from pytest_vllm_perf.core.registry import COMPARED, SERVER_COMPARED
from pytest_vllm_perf.metrics.passes import Floats
from pytest_vllm_perf.store import baselines, naming
from pytest_vllm_perf.verdict import compare, drift, eligibility
from pytest_vllm_perf.verdict.drift import Component
from pytest_vllm_perf.verdict.sequential import CALL_SHARE, Design, Look

__all__ = [
    "SaveMode",
    "ab",
    "ab_drift",
    "compared_metrics",
    "evaluate",
    "gated_metrics",
    "hardware_drift",
    "look_note",
    "stored_drift",
    "undecided",
]


class SaveMode(StrEnum):
    """What the gate does with a measurement."""

    COMPARE = "compare"
    SAVE = "save"  # replace the baseline with this run, as its only boot
    ADD_BOOT = "add-boot"  # add this run to the baseline as one more boot


def gated_metrics(
    result: Measurement, extra: Sequence[str] = (), ab: bool = False
) -> tuple[str, ...]:
    """The metrics that fail a test: the workload's own, else every compared one, plus
    opt-ins; ``ab``: an A/B run, which also gates the workload's ``ab_gate``."""
    own = result.workload.gate or COMPARED
    more = result.workload.ab_gate if ab else ()
    return tuple(dict.fromkeys((*own, *more, *extra)))


def compared_metrics(
    gated: Sequence[str], *sides: Sequence[Mapping[str, float]], report: Sequence[str] = ()
) -> tuple[str, ...]:
    """The gated metrics, then every compared one and the workload's ``report`` ones,
    then the server's own figures (``SERVER_COMPARED``) that every pass of ``sides``
    (each a side's per-pass metrics) measured."""
    server = [k for k in SERVER_COMPARED if sides and all(k in m for side in sides for m in side)]
    return tuple(dict.fromkeys((*gated, *COMPARED, *report, *server)))


def current_passes(result: Measurement) -> compare.Passes:
    return compare.Passes(
        metrics=result.pass_metrics,
        indices=tuple(p.index for p in result.passes),
        durations=tuple(p.duration_s for p in result.passes),
        records=result.passes,
    )


def evaluate(
    test_id: str,
    result: Measurement,
    provenance: Provenance,
    root: Path,
    tolerances: Mapping[str, float],
    gated: Sequence[str],
    mode: SaveMode = SaveMode.COMPARE,
    gate_other_release: bool = False,
    level: float = compare.ALPHA,
) -> GateResult:
    """Save the measurement as the baseline, add it as a boot, or compare it with the stored one.

    ``level``: the comparison's two-sided level (twice the test's one-sided
    false-alarm bound, its share of ``--vllm-stored-run-alpha`` and of its test's
    budget, ``sequential.CALL_SHARE``).

    A baseline measured with another vLLM release is compared and reported, not
    gated, unless ``gate_other_release``: a release's own regression must not be
    blamed on the change under test (upgrading is a change of its own: re-save).
    """
    hw = provenance.environment.hardware_class
    path = naming.path_for(root, hw, test_id, provenance.profile)
    if mode is not SaveMode.COMPARE:
        return _store(path, test_id, result, provenance, mode)
    stored = baselines.load(path)
    if stored is None:
        status, note = eligibility.missing(root, hw, test_id, provenance.profile, path)
        return GateResult(status, path, note=note)
    changes = tuple(eligibility.changes(stored, provenance))
    if stored.data.get("workload_hash") != result.workload.hash:
        return GateResult(
            GateStatus.WORKLOAD_CHANGED, path, changes=changes, note=eligibility.WORKLOAD_NOTE
        )
    current = current_passes(result)
    keys = compared_metrics(
        gated, current.metrics, *(b.metrics for b in stored.boots), report=result.workload.report
    )
    others = [b for b in baselines.of_hardware(root, hw) if b.path != path]
    allowance = stored_drift(stored, others, gated, provenance)
    verdicts = compare.compare(
        stored.boots, current, keys, tolerances, gated=gated, pair=True, alpha=level,
        drift=allowance,
    )  # fmt: skip
    note = compare.passes_note(stored.boots, current, gated)
    if level < compare.ALPHA * CALL_SHARE * (1 - 1e-9):  # the run's budget bound this test
        share = f"at level {level:.3g} (two-sided), this test's share of --vllm-stored-run-alpha"
        note = f"{note}; {share}" if note else share
    env = provenance.environment
    found = eligibility.reported_only(
        stored.environment, env.model, env.vllm_version, gate_other_release
    )
    if found is not None:
        status, note = found
        verdicts = [dataclasses.replace(v, gated=False) for v in verdicts]
        return GateResult(status, path, tuple(verdicts), changes, note)
    return GateResult(GateStatus.COMPARED, path, tuple(verdicts), changes, note)


def _store(
    path: Path, test_id: str, result: Measurement, provenance: Provenance, mode: SaveMode
) -> GateResult:
    """Save the measurement as the baseline's only boot, or add it as one more boot;
    the note warns of gated metrics too few of its passes measured to gate on."""
    stored = baselines.load(path) if mode is SaveMode.ADD_BOOT else None
    warn = unmeasured_warning(result)
    if stored is None:
        baselines.save(path, baselines.document(test_id, result, provenance))
        note = "" if mode is SaveMode.SAVE else "no baseline to add to: saved as boot 1"
        return GateResult(GateStatus.SAVED, path, note="; ".join(x for x in (note, warn) if x))
    doc = baselines.add_boot(stored, test_id, result, provenance)
    baselines.save(path, doc)
    note = f"the baseline now holds {len(doc['boots'])} boots"
    return GateResult(GateStatus.BOOT_ADDED, path, note="; ".join(x for x in (note, warn) if x))


def unmeasured_warning(result: Measurement) -> str:
    """A warning naming each gated metric fewer than two passes measured (a class that
    streamed in bursts leaves its ITL and TPOT out): such a baseline cannot gate it, and
    the tiny preset's saved baselines said nothing of it."""
    passes = len(result.pass_metrics)
    side = [current_passes(result)]
    short = [
        f"{key} in {n} of {passes}"
        for key in gated_metrics(result)
        if (n := compare.measured_counts(side, key)) < 2
    ]
    if not short or passes < 2:
        return ""
    return (
        f"WARNING: gated metrics measured in too few passes to gate on ({', '.join(short)} "
        "passes): a stream that came in bursts leaves ITL and TPOT out; on the CPU engine "
        "use --vllm-model-preset=small"
    )


def _boot_logs(boots: Sequence[compare.Passes], key: str) -> list[Floats]:
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = [np.log(b.values(key)) for b in boots]
    return [x[np.isfinite(x)] for x in logs]


def hardware_drift(
    stored: Sequence[baselines.Baseline], platform: str, also: Sequence[str] = ()
) -> Component:
    """The boot drift of a hardware class: pooled over the gated metrics of its stored
    baselines (``drift.boot_drift``, with the platform's prior); ``also``: keys pooled
    from every baseline besides each one's own gated metrics."""
    groups = []
    for found in stored:
        gated = tuple(dict(found.data.get("workload") or {}).get("gate") or ())
        for key in dict.fromkeys((*gated, *also)):
            groups.append(_boot_logs(found.boots, key))
    return drift.boot_drift(groups, platform)


def stored_drift(
    stored: baselines.Baseline, others: Sequence[baselines.Baseline], gated: Sequence[str],
    provenance: Provenance,
) -> Component:  # fmt: skip
    """The allowance for boot drift of one new boot against the mean of ``stored``'s
    boots: the drift of the hardware class (``stored``, its ``others``, this test's
    ``gated`` metrics) times (1 + 1/boots)."""
    found = hardware_drift([stored, *others], provenance.environment.platform, gated)
    return drift.stored(found, len(stored.boots))


def ab_drift(root: Path | None, provenance: Provenance, sequential: bool) -> Component:
    """What an A/B verdict allows for beyond its pairs: two resident servers' offset, or,
    booted in turn, the boot drift of the hardware class (its stored baselines under
    ``root`` and the platform's figure), x1.5 for CBBC's three boots."""
    platform = provenance.environment.platform
    if not sequential:
        return drift.offset(platform)
    stored = baselines.of_hardware(root, provenance.environment.hardware_class) if root else []
    return drift.cbbc(hardware_drift(stored, platform))


def ab(
    base: Measurement,
    candidate: Measurement,
    base_provenance: Provenance,
    candidate_provenance: Provenance,
    tolerances: Mapping[str, float],
    gated: Sequence[str],
    sequential: bool = False,
    look: Look | None = None,
    root: Path | None = None,
) -> GateResult:
    """The candidate side against the base side of one A/B run, pass k against pass k;
    ``sequential``: the sides were booted in turn (``--vllm-ab-mode``), not both up;
    ``look``: which look of the A/B decision this is (one look of all alpha when None);
    ``root``: the stored baselines, whose boots tell how far boots drift (CBBC)."""
    base_passes, current = current_passes(base), current_passes(candidate)
    if look is None:
        look = Design(first=len(current.metrics), most=len(current.metrics)).looks()[0]
    keys = compared_metrics(
        gated, base_passes.metrics, current.metrics, report=candidate.workload.report
    )
    verdicts = compare.compare(
        [base_passes], current, keys, tolerances, gated=gated, pair=True, look=look,
        drift=ab_drift(root, candidate_provenance, sequential),
    )  # fmt: skip
    changes = eligibility.diff(
        base_provenance.profile_settings,
        base_provenance.environment.to_dict(),
        candidate_provenance,
    )
    sides = [repr(p.profile) for p in (candidate_provenance, base_provenance)]
    versions = [p.environment.vllm_version for p in (candidate_provenance, base_provenance)]
    if versions[0] != versions[1]:  # two environments: say which release each side ran
        sides = [f"{s} on vLLM {v}" for s, v in zip(sides, versions, strict=True)]
    how = (
        "booted in turn, passes in blocks (CBBC)"
        if sequential
        else "two servers up, one loaded at a time, passes alternated (ABBA)"
    )
    note = f"A/B: {sides[0]} against {sides[1]}, {how}; {look_note(look)}"
    more = compare.passes_note([base_passes], current, gated, boots_matter=False)
    if more:
        note += "; " + more
    label = f"the A/B base side {sides[1]}"
    return GateResult(GateStatus.AB, Path(label), tuple(verdicts), tuple(changes), note)


def look_note(look: Look) -> str:
    """What an A/B verdict's look was: its pairs and the error it may spend."""
    where = (
        f"look {look.number} of {look.of} after {look.pairs} pairs"
        if look.of > 1
        else (f"{look.pairs} pairs")
    )
    return (
        f"{where}: regressed when worse than {look.indifference:.0%} of the tolerance at "
        f"level {look.level:.3g}"
    )


def undecided(result: GateResult) -> list[str]:
    """The gated metrics another look could still decide: the inconclusive ones, also
    once another regressed, so that a failed test names every metric that moved. One
    with no estimate at all (fewer than two passes a side measured it: a class that
    streamed in bursts) is not among them: an A/B run bought pairs for ITL and TPOT
    measured in "1 vs 0" passes up to its cap, 9.7 minutes where 4 decided the rest."""
    return [
        v.metric
        for v in result.verdicts
        if v.gated and v.verdict is Verdict.INCONCLUSIVE and math.isfinite(v.ratio)
    ]


def carry_regressions(earlier: GateResult, now: GateResult) -> GateResult:
    """``now``, a later look, with every metric that regressed at the ``earlier`` look
    kept regressed (that look's verdict line): a hypothesis rejected at a look stays
    rejected, and the error it could spend was spent there."""
    kept = {v.metric: v for v in earlier.verdicts if v.verdict is Verdict.REGRESSED}
    verdicts = [
        kept.pop(v.metric) if v.metric in kept and v.verdict is not Verdict.REGRESSED else v
        for v in now.verdicts
    ]
    verdicts += [v for v in kept.values() if v.metric not in {u.metric for u in now.verdicts}]
    return dataclasses.replace(now, verdicts=tuple(verdicts))
