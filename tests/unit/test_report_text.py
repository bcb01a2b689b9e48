"""The terminal notes a reader sees first: one line per class that streamed in bursts."""

from __future__ import annotations

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core.records import Environment, Outcome, PassRecord, Provenance
from pytest_vllm_perf.measure import assemble
from pytest_vllm_perf.report import text
from tests.unit.test_verdict_holes import req

ENV = Environment("cpu", "cpu: test", "0.32.0", "2.9", "3.11")


def test_bursty_passes_are_one_line_per_class_not_one_per_pass():
    """Eight repeated warnings, one a pass, sat above the regression line (make demo with
    the tiny preset printed 7-8 a test). Broken on purpose (a line a pass), the count
    check fails."""
    decode = workloads.named("decode")
    passes = [
        PassRecord(tuple(req("chat", 0.00001 if k in (1, 3, 6) else 0.003, 40, i * 0.1)
                         for i in range(30)), 4.0, index=k)
        for k in range(8)
    ]  # fmt: skip
    settings = {"name": "p", "engine": {}, "env": {}, "cpu": {}}
    outcome = Outcome("t.py::test", Provenance("p", settings, "p", (), (), ENV),
                      assemble(decode, passes, ()), ())  # fmt: skip
    lines = [line for line in text.gate_notes([outcome]) if "bursts" in line]
    assert lines == [
        "t.py::test [p]: class 'chat' streamed in bursts in 3 of 8 passes (pass 2, 4, 7; "
        "median gap 0.01-0.01 ms; the API server was starved): their ITL and TPOT are left "
        "out of the verdict"
    ]
