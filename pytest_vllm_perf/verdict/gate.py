"""The regression gate: compare a measurement with its stored baseline, or store it.

Plain data in, plain data out: a test id, a measurement and its provenance go
in; a ``GateResult`` comes out. Nothing here knows about servers or pytest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Final

import numpy as np

from pytest_vllm_perf.config import profiles
from pytest_vllm_perf.core import redact
from pytest_vllm_perf.core.records import (
    GateResult,
    GateStatus,
    Measurement,
    MetricVerdict,
    Provenance,
    Verdict,
)
from pytest_vllm_perf.core.registry import COMPARED, SERVER_COMPARED
from pytest_vllm_perf.verdict import baseline, capacity_store, compare, drift
from pytest_vllm_perf.verdict import capacity as capacity_stats
from pytest_vllm_perf.verdict.drift import Component
from pytest_vllm_perf.verdict.intervals import Floats
from pytest_vllm_perf.verdict.sequential import CALL_SHARE, Design, Look

__all__ = [
    "CANNOT_GATE",
    "CapacityGate",
    "SaveMode",
    "ab",
    "ab_drift",
    "capacity",
    "capacity_ab",
    "compared_metrics",
    "evaluate",
    "gated_metrics",
    "hardware_drift",
    "look_note",
    "precheck",
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
    path = baseline.path_for(root, hw, test_id, provenance.profile)
    if mode is SaveMode.SAVE:
        baseline.save(path, baseline.document(test_id, result, provenance))
        return GateResult(GateStatus.SAVED, path)
    stored = baseline.load(path)
    if mode is SaveMode.ADD_BOOT:
        if stored is None:
            baseline.save(path, baseline.document(test_id, result, provenance))
            return GateResult(GateStatus.SAVED, path, note="no baseline to add to: saved as boot 1")
        doc = baseline.add_boot(stored, test_id, result, provenance)
        baseline.save(path, doc)
        return GateResult(
            GateStatus.BOOT_ADDED, path, note=f"the baseline now holds {len(doc['boots'])} boots"
        )
    if stored is None:
        status, note = _missing(root, hw, test_id, provenance.profile, path)
        return GateResult(status, path, note=note)
    changes = tuple(_changes(stored, provenance))
    if stored.data.get("workload_hash") != result.workload.hash:
        return GateResult(GateStatus.WORKLOAD_CHANGED, path, changes=changes, note=WORKLOAD_NOTE)
    current = current_passes(result)
    keys = compared_metrics(
        gated, current.metrics, *(b.metrics for b in stored.boots), report=result.workload.report
    )
    others = [b for b in baseline.of_hardware(root, hw) if b.path != path]
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
    found = _reported_only(stored.environment, env.model, env.vllm_version, gate_other_release)
    if found is not None:
        status, note = found
        verdicts = [dataclasses.replace(v, gated=False) for v in verdicts]
        return GateResult(status, path, tuple(verdicts), changes, note)
    return GateResult(GateStatus.COMPARED, path, tuple(verdicts), changes, note)


def _boot_logs(boots: Sequence[compare.Passes], key: str) -> list[Floats]:
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = [np.log(b.values(key)) for b in boots]
    return [x[np.isfinite(x)] for x in logs]


def hardware_drift(
    stored: Sequence[baseline.Baseline], platform: str, also: Sequence[str] = ()
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
    stored: baseline.Baseline, others: Sequence[baseline.Baseline], gated: Sequence[str],
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
    stored = baseline.of_hardware(root, provenance.environment.hardware_class) if root else []
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
    changes = _diff(
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
    once another regressed, so that a failed test names every metric that moved."""
    return [v.metric for v in result.verdicts if v.gated and v.verdict is Verdict.INCONCLUSIVE]


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


@dataclasses.dataclass(frozen=True)
class CapacityGate:
    """What the gate did with a capacity search: its status, the stored search it was
    judged against and the verdict (when compared), and a note."""

    status: GateStatus
    path: Path
    stored: capacity_stats.Search | None = None
    verdict: MetricVerdict | None = None
    note: str = ""

    @property
    def regressed(self) -> bool:
        return (
            self.status is GateStatus.COMPARED
            and self.verdict is not None
            and self.verdict.verdict is Verdict.REGRESSED
        )

    def result(self, note: str) -> GateResult:
        """This as every test's gate result: the verdict, when there is one, as its
        only metric's; ``note`` (the search in words) ahead of this gate's own."""
        verdicts = () if self.verdict is None else (self.verdict,)
        return GateResult(self.status, self.path, verdicts, note=_joined(note, self.note))


def capacity_ab(
    verdict: MetricVerdict,
    base_provenance: Provenance,
    candidate_provenance: Provenance,
    note: str,
) -> GateResult:
    """An A/B capacity verdict as every A/B test's gate result: what differs between the
    sides, and ``note`` (both searches in words)."""
    changes = _diff(
        base_provenance.profile_settings,
        base_provenance.environment.to_dict(),
        candidate_provenance,
    )
    label = f"the A/B base side {base_provenance.profile!r}"
    return GateResult(GateStatus.AB, Path(label), (verdict,), tuple(changes), note)


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def capacity(
    test_id: str,
    found: capacity_stats.Search,
    slo: Mapping[str, float],
    workload_hash: str,
    provenance: Provenance,
    root: Path,
    tolerance: float,
    mode: SaveMode = SaveMode.COMPARE,
    gate_other_release: bool = False,
    alpha: float = capacity_stats.ALPHA,
) -> CapacityGate:
    """Save a capacity search as the baseline, or judge it against the stored one
    (``capacity.judge``). A search keeps one boot: ``add-boot`` saves it as well. A
    stored search under another SLO or workload is not compared; one of another model
    or vLLM release is compared and not gated, as a workload baseline is. ``alpha``:
    the test's one-sided false-alarm bound (its share of the run's stored budget)."""
    env = provenance.environment
    path = capacity_store.capacity_path(root, env.hardware_class, test_id, provenance.profile)
    if mode is not SaveMode.COMPARE:
        baseline.save(
            path, capacity_store.capacity_document(test_id, found, slo, workload_hash, provenance)
        )
        note = "a capacity baseline keeps one search: saved" if mode is SaveMode.ADD_BOOT else ""
        return CapacityGate(GateStatus.SAVED, path, note=note)
    loaded = capacity_store.load_capacity(path)
    if loaded is None:
        return CapacityGate(GateStatus.MISSING, path, note=f"no capacity baseline at {path}")
    stored, data = loaded
    if data.get("workload_hash") != workload_hash or dict(data.get("slo", {})) != dict(slo):
        return CapacityGate(
            GateStatus.WORKLOAD_CHANGED,
            path,
            stored,
            note="the workload or SLO differs from the baseline's: not compared",
        )
    verdict = capacity_stats.judge(stored, found, tolerance, alpha)
    reported = _reported_only(
        data.get("environment", {}), env.model, env.vllm_version, gate_other_release
    )
    if reported is not None:
        status, note = reported
        return CapacityGate(status, path, stored, dataclasses.replace(verdict, gated=False), note)
    return CapacityGate(GateStatus.COMPARED, path, stored, verdict)


WORKLOAD_NOTE = "the workload differs from the baseline's: not compared"
ONE_BOOT_NOTE = (
    "one boot, and no baseline of this hardware holds two: its boot drift would be the "
    "platform's measured figure alone; add a boot (--vllm-add-boot)"
)
# what --vllm-require-baseline fails: a baseline that cannot gate this run
CANNOT_GATE: Final = frozenset(
    {
        GateStatus.MISSING,
        GateStatus.OTHER_HARDWARE,
        GateStatus.WORKLOAD_CHANGED,
        GateStatus.OTHER_MODEL,
        GateStatus.OTHER_RELEASE,
        GateStatus.ONE_BOOT,
    }
)


def _missing(root: Path, hw: str, test_id: str, profile: str, path: Path) -> tuple[GateStatus, str]:
    others = baseline.find_other_hardware(root, hw, test_id, profile)
    if others:
        note = f"baselines exist only for other hardware ({', '.join(others)}): not compared"
        return GateStatus.OTHER_HARDWARE, note
    return GateStatus.MISSING, f"no baseline at {path}"


def precheck(
    root: Path,
    hardware_class: str,
    test_id: str,
    profile: str,
    workload_hash: str | None,
    model: str | None,
    vllm_version: str | None,
    gate_other_release: bool = False,
) -> tuple[GateStatus, str] | None:
    """Why the stored baseline cannot gate a run, known before any server boots, or
    None: missing, other hardware, another workload, model or release (``model``
    None: not known before the boot, e.g. a server someone else started), or one boot
    where no baseline of the hardware class holds two (its drift is unlearned)."""
    path = baseline.path_for(root, hardware_class, test_id, profile)
    stored = baseline.load(path)
    if stored is None:
        return _missing(root, hardware_class, test_id, profile, path)
    if workload_hash is not None and stored.data.get("workload_hash") != workload_hash:
        return GateStatus.WORKLOAD_CHANGED, f"{path}: {WORKLOAD_NOTE}"
    found = _reported_only(stored.environment, model, vllm_version, gate_other_release)
    if found is not None:
        return found[0], f"{path}: {found[1]}"
    if len(stored.boots) < 2 and all(
        len(b.boots) < 2 for b in baseline.of_hardware(root, hardware_class)
    ):
        return GateStatus.ONE_BOOT, f"{path}: {ONE_BOOT_NOTE}"
    return None


def _reported_only(
    stored_env: Mapping[str, object],
    model: str | None,
    ours: str | None,
    gate_other_release: bool,
) -> tuple[GateStatus, str] | None:
    """Why a baseline is compared and shown but not gated, or None when it gates.

    Another model (an embedded preset's shape or tokenizer changed) measured other
    figures; another vLLM release's own regression must not be blamed on the change
    under test, unless ``gate_other_release`` (upgrading is a change of its own).
    """
    stored_model = stored_env.get("model")
    if model is not None and stored_model and stored_model != model:
        return GateStatus.OTHER_MODEL, (
            f"the baseline was measured on model {stored_model}, this run serves {model}: "
            "compared, not gated (re-save the baseline)"
        )
    theirs = stored_env.get("vllm_version")
    if theirs and ours and theirs != ours and not gate_other_release:
        return GateStatus.OTHER_RELEASE, (
            f"the baseline was measured with vLLM {theirs}, this run has {ours}: compared, "
            "not gated (re-save the baseline, or --vllm-gate-other-release)"
        )
    return None


def _changes(stored: baseline.Baseline, provenance: Provenance) -> list[str]:
    """What differs since the baseline: profile settings, versions, model, placement."""
    return _diff(stored.data.get("profile", {}), stored.environment, provenance)


def _diff(
    old_profile: Mapping[str, object], old_env: Mapping[str, object], provenance: Provenance
) -> list[str]:
    # the name and description say nothing about what was measured; secrets (an
    # HF_TOKEN in a profile's env) are redacted on both sides, as in stored files
    old, new = (
        redact.mapping({k: v for k, v in p.items() if k not in ("name", "description")})
        for p in (old_profile, provenance.profile_settings)
    )
    lines = ["profile " + d for d in profiles.diff(old, new)]
    new_env = provenance.environment.to_dict()
    for key in ("vllm_version", "torch_version", "model", "parallelism"):
        if key in old_env and old_env.get(key) != new_env.get(key):
            lines.append(f"{key} {old_env.get(key)} -> {new_env.get(key)}")
    return lines
