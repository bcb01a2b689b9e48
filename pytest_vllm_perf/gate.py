"""The regression gate: compare an outcome with its stored baseline, or save it as one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllm_perf import baseline, compare, hardware, profiles
from pytest_vllm_perf.compare import Verdict
from pytest_vllm_perf.session import Outcome

SAVED, MISSING, COMPARED = "saved", "no baseline", "compared"
WORKLOAD_CHANGED, OTHER_HARDWARE = "workload changed", "other hardware"


@dataclass(frozen=True)
class GateResult:
    """What the gate concluded for one outcome."""

    status: str
    path: Path
    verdicts: tuple[Verdict, ...] = ()
    changes: tuple[str, ...] = ()
    note: str = ""

    @property
    def regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict == compare.REGRESSED]

    def summary(self) -> str:
        """One word per outcome for tables: the worst verdict, or the status."""
        if self.status != COMPARED:
            return self.status
        order = (compare.REGRESSED, compare.INCONCLUSIVE, compare.IMPROVED, compare.UNCHANGED)
        found = {v.verdict for v in self.verdicts}
        return next((v for v in order if v in found), compare.UNCHANGED)


def validate_tolerances(tolerances: Mapping[str, float]) -> None:
    unknown = sorted(set(tolerances) - set(compare.DEFAULT_TOLERANCES))
    if unknown:
        raise ValueError(
            f"unknown tolerance {unknown[0]!r}; tracked metrics: "
            + ", ".join(compare.DEFAULT_TOLERANCES)
        )


def document(outcome: Outcome) -> dict[str, Any]:
    h = outcome.handle
    r = outcome.result
    return baseline.document(
        test_id=outcome.test_id,
        profile=h.profile.to_dict(),
        profile_hash=h.profile.hash,
        workload=r.workload.to_dict(),
        workload_hash=r.workload.hash,
        environment=h.environment,
        model=h.model_id,
        placement=placement(outcome),
        engine_argv=list(h.argv),
        engine_notes=list(h.settings.notes),
        repetitions=r.repetitions,
        metrics=r.metrics,
    )


def placement(outcome: Outcome) -> dict[str, Any]:
    """Parallelism and visible devices: they change results as much as the hardware does."""
    args = outcome.handle.settings.args
    return {"parallelism": hardware.parallelism(args), "device_env": hardware.device_env()}


def evaluate(
    outcome: Outcome, root: Path, tolerances: Mapping[str, float], save: bool
) -> GateResult:
    """Save the outcome as the baseline, or compare it with the stored one."""
    hw = outcome.handle.environment.hardware_class
    path = baseline.path_for(root, hw, outcome.test_id, outcome.profile)
    if save:
        baseline.save(path, document(outcome))
        return GateResult(SAVED, path)
    stored = baseline.load(path)
    if stored is None:
        others = baseline.find_other_hardware(root, hw, outcome.test_id, outcome.profile)
        if others:
            note = f"baselines exist only for other hardware ({', '.join(others)}): not compared"
            return GateResult(OTHER_HARDWARE, path, note=note)
        return GateResult(MISSING, path, note=f"no baseline at {path}")
    if stored.data.get("workload_hash") != outcome.result.workload.hash:
        return GateResult(
            WORKLOAD_CHANGED,
            path,
            changes=tuple(_changes(stored, outcome)),
            note="the workload differs from the baseline's: not compared",
        )
    verdicts = compare.compare_runs(stored.repetitions, outcome.result.repetitions, tolerances)
    base_pre, cur_pre = stored.metrics.get("preemptions"), outcome.result.metrics.get("preemptions")
    if base_pre is not None and cur_pre is not None:
        tol = tolerances.get("preemptions", compare.DEFAULT_TOLERANCES["preemptions"])
        verdicts.append(compare.compare_count("preemptions", base_pre, cur_pre, tol))
    note = _passes_note(len(stored.repetitions), len(outcome.result.repetitions))
    return GateResult(COMPARED, path, tuple(verdicts), tuple(_changes(stored, outcome)), note)


def _passes_note(base: int, current: int) -> str:
    """Say when the passes on hand cannot support a trustworthy verdict, and why."""
    if min(base, current) < 2:
        return (
            f"{base} baseline vs {current} current pass(es): intervals come from time "
            "blocks inside a pass and understate run-to-run noise; use --vllm-repeat 5 "
            "on both sides for a trustworthy verdict"
        )
    if not compare.can_be_significant(base, current):
        return (
            f"{base} baseline vs {current} current passes can never give a significant "
            "verdict at 95%; use --vllm-repeat 4 or more on both sides"
        )
    return ""


def _changes(stored: baseline.Baseline, outcome: Outcome) -> list[str]:
    """What differs since the baseline: profile settings, versions, model."""
    lines = [
        "profile " + d
        for d in profiles.diff(stored.data.get("profile", {}), outcome.handle.profile.to_dict())
    ]
    old_env = stored.data.get("environment", {})
    new_env = {
        **outcome.handle.environment.to_dict(),
        "model": outcome.handle.model_id,
        **placement(outcome),
    }
    for key in ("vllm_version", "torch_version", "model", "parallelism"):
        if key in old_env and old_env.get(key) != new_env.get(key):
            lines.append(f"{key} {old_env.get(key)} -> {new_env.get(key)}")
    return lines


def regression_message(gate: GateResult) -> str:
    lines = [f"vLLM perf regression against {gate.path}:"]
    lines += [
        ("  >> " if v.verdict == compare.REGRESSED else "     ") + v.describe()
        for v in gate.verdicts
    ]
    lines.append(
        "  changed since the baseline:"
        if gate.changes
        else "  nothing recorded changed since the baseline (same profile, versions and model)"
    )
    lines += ["    " + c for c in gate.changes]
    return "\n".join(lines)
