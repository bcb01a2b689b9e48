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
