"""What ``--vllm-require-baseline`` fails after a run: every gate status that cannot gate
it. Most are found before any boot (tests/plugin/test_gate_provenance.py); this is
the check behind them, for what only the run can tell (a changed workload, a side
served by another environment)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_vllm_perf import fixture
from pytest_vllm_perf.core.records import GateResult, GateStatus

CANNOT_GATE = {
    GateStatus.MISSING,
    GateStatus.OTHER_HARDWARE,
    GateStatus.WORKLOAD_CHANGED,
    GateStatus.OTHER_MODEL,
    GateStatus.OTHER_RELEASE,
    GateStatus.ONE_BOOT,
}


@pytest.mark.parametrize("status", list(GateStatus))
def test_a_baseline_that_cannot_gate_fails_a_run_that_requires_one(status):
    """Broken on purpose (other release left out of what cannot gate), a baseline of
    another vLLM release passed a run under --vllm-require-baseline."""
    outcome = SimpleNamespace(passed=True, gate=GateResult(status, Path("b.json"), note="why"))
    problems = fixture._problems(outcome, require_baseline=True)  # type: ignore[arg-type]
    expected = [f"--vllm-require-baseline ({status}): why"] if status in CANNOT_GATE else []
    assert problems == expected
    assert fixture._problems(outcome, require_baseline=False) == []  # type: ignore[arg-type]


def test_one_boot_is_required_to_be_two_until_the_hardware_holds_two(tmp_path):
    """A stored verdict allows for boot drift: with no baseline of the hardware class of
    two boots or more, that drift is the platform's figure alone, and a run that
    requires a baseline says so before any boot; a second boot of any test of that
    hardware lifts it for every test."""
    import json

    from pytest_vllm_perf.verdict import eligibility

    decode = Path(__file__).parents[2] / (
        ".vllm-perf/1x-nvidia-h200/examples-test_decode.py-test_decode/default.json"
    )
    doc = json.loads(decode.read_text(encoding="utf-8"))
    hw, test = "1x NVIDIA H200", "examples/test_decode.py::test_decode"
    path = tmp_path / "1x-nvidia-h200" / "examples-test_decode.py-test_decode" / "default.json"
    path.parent.mkdir(parents=True)
    one = {**doc, "boots": doc["boots"][:1]}
    path.write_text(json.dumps(one), encoding="utf-8")
    found = eligibility.precheck(tmp_path, hw, test, "default", doc["workload_hash"], None, None)
    assert found is not None and found[0] is GateStatus.ONE_BOOT, found
    assert "--vllm-add-boot" in found[1]
    other = tmp_path / "1x-nvidia-h200" / "other-test" / "default.json"
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps(doc), encoding="utf-8")  # two boots
    assert (
        eligibility.precheck(tmp_path, hw, test, "default", doc["workload_hash"], None, None)
        is None
    )
