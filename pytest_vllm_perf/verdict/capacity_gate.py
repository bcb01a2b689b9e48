"""The gate of a capacity search: save it, or judge it against the stored search, as
every test's ``GateResult``; and an A/B capacity verdict as one."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from pytest_vllm_perf.core.records import GateResult, GateStatus, MetricVerdict, Provenance, Verdict
from pytest_vllm_perf.store import baselines, capacities
from pytest_vllm_perf.verdict import capacity as capacity_stats
from pytest_vllm_perf.verdict import eligibility
from pytest_vllm_perf.verdict.gate import SaveMode

__all__ = ["CapacityGate", "capacity", "capacity_ab"]


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
    changes = eligibility.diff(
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
    path = capacities.capacity_path(root, env.hardware_class, test_id, provenance.profile)
    if mode is not SaveMode.COMPARE:
        baselines.save(
            path, capacities.capacity_document(test_id, found, slo, workload_hash, provenance)
        )
        note = "a capacity baseline keeps one search: saved" if mode is SaveMode.ADD_BOOT else ""
        return CapacityGate(GateStatus.SAVED, path, note=note)
    loaded = capacities.load_capacity(path)
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
    reported = eligibility.reported_only(
        data.get("environment", {}), env.model, env.vllm_version, gate_other_release
    )
    if reported is not None:
        status, note = reported
        return CapacityGate(status, path, stored, dataclasses.replace(verdict, gated=False), note)
    return CapacityGate(GateStatus.COMPARED, path, stored, verdict)
