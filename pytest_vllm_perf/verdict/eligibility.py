"""Whether a stored baseline can gate a run, and what changed since it was measured:
known from the stored file and the run's provenance, before or after the boot."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pytest_vllm_perf.config import profiles
from pytest_vllm_perf.core import redact
from pytest_vllm_perf.core.records import GateStatus, Provenance
from pytest_vllm_perf.store import baselines, naming

__all__ = [
    "CANNOT_GATE",
    "ONE_BOOT_NOTE",
    "WORKLOAD_NOTE",
    "changes",
    "diff",
    "missing",
    "precheck",
    "reported_only",
]

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


def missing(root: Path, hw: str, test_id: str, profile: str, path: Path) -> tuple[GateStatus, str]:
    others = baselines.find_other_hardware(root, hw, test_id, profile)
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
    path = naming.path_for(root, hardware_class, test_id, profile)
    stored = baselines.load(path)
    if stored is None:
        return missing(root, hardware_class, test_id, profile, path)
    if workload_hash is not None and stored.data.get("workload_hash") != workload_hash:
        return GateStatus.WORKLOAD_CHANGED, f"{path}: {WORKLOAD_NOTE}"
    found = reported_only(stored.environment, model, vllm_version, gate_other_release)
    if found is not None:
        return found[0], f"{path}: {found[1]}"
    if len(stored.boots) < 2 and all(
        len(b.boots) < 2 for b in baselines.of_hardware(root, hardware_class)
    ):
        return GateStatus.ONE_BOOT, f"{path}: {ONE_BOOT_NOTE}"
    return None


def reported_only(
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


def changes(stored: baselines.Baseline, provenance: Provenance) -> list[str]:
    """What differs since the baseline: profile settings, versions, model, placement."""
    return diff(stored.data.get("profile", {}), stored.environment, provenance)


def diff(
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
