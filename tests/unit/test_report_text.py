"""The terminal notes a reader sees first: one line per class that streamed in bursts."""

from __future__ import annotations

import math

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core.records import Environment, Outcome, PassRecord, Provenance
from pytest_vllm_perf.core.report import Headline, ResultEntry
from pytest_vllm_perf.measure import assemble
from pytest_vllm_perf.report import document, text
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


def _decode_outcome(lag_ms: float) -> Outcome:
    decode = workloads.named("decode")
    passes = [
        PassRecord(tuple(req("chat", 0.003, 40, i * 0.1) for i in range(30)), 4.0, index=k,
                   client_lag_p99_ms=lag_ms if k == 5 else 0.1)
        for k in range(8)
    ]  # fmt: skip
    settings = {"name": "p", "engine": {}, "env": {}, "cpu": {}}
    return Outcome("t.py::test", Provenance("p", settings, "p", (), (), ENV),
                   assemble(decode, passes, ()), ())  # fmt: skip


def _results(*outcomes: Outcome) -> tuple[ResultEntry, ...]:
    """The outcomes as every view reads them: the session's typed report."""
    return document.build(outcomes).results


def test_a_client_that_cannot_keep_up_says_so():
    """The chunks are timed on the client's event loop: one that wakes 2 ms late in a
    pass whose median gap is 3 ms may have set the gaps itself. Broken on purpose (the
    note never written), the first check fails."""
    lines = [line for line in text.gate_notes([_decode_outcome(2.0)]) if "keep up" in line]
    assert lines == [
        "t.py::test [p]: the client could not keep up in 1 of 8 passes: its event loop woke "
        "up to 2.0 ms late (p99) against an ITL p50 of 3.00 ms, so these latencies may be "
        "the client's; run the client on a less loaded machine"
    ]
    assert not [line for line in text.gate_notes([_decode_outcome(1.0)]) if "keep up" in line]


def test_the_lag_monitor_sees_a_blocked_loop():
    """A mechanism check, timed by a lower bound only: a loop blocked for 60 ms wakes the
    monitor's 10 ms sleep at least 50 ms late, however fast the machine."""
    import asyncio
    import time

    from pytest_vllm_perf.load import runner

    async def main() -> list[float]:
        lags: list[float] = []
        done = asyncio.Event()
        task = asyncio.create_task(runner._loop_lag(done, lags))
        await asyncio.sleep(0)  # the monitor is now asleep
        time.sleep(0.06)  # blocks the loop, as a starved client does
        await asyncio.sleep(0.02)
        done.set()
        await task
        return lags

    assert max(asyncio.run(main())) >= 0.05


def test_the_last_line_says_pass_or_fail_what_failed_and_the_minutes():
    """Broken on purpose (a regressed result counted as passing), the FAIL check fails."""
    import dataclasses
    from pathlib import Path

    from pytest_vllm_perf.core.records import (
        Check,
        GateResult,
        GateStatus,
        MetricVerdict,
        Verdict,
    )

    def gated(verdict: Verdict, ratio: float) -> GateResult:
        v = MetricVerdict("output_throughput", 100, 100 * ratio, ratio, 0, 0, 0.3, verdict)
        return GateResult(GateStatus.AB, Path("a/b"), (v,))

    good = dataclasses.replace(_decode_outcome(0.1), gate=gated(Verdict.UNCHANGED, 1.01))
    bad = dataclasses.replace(good, gate=gated(Verdict.REGRESSED, 0.338))
    slow = dataclasses.replace(good, checks=(Check("max_ttft_p99_ms", "ttft_p99_ms", 1, 5),))
    passing = text.verdict_line(_results(good, good), 246, 0)
    assert passing == Headline(
        False, "vLLM perf PASS: 2 results (2 unchanged); 4.1 min wall, no GPU"
    )
    assert text.verdict_line(_results(good, bad, slow), 600, 2) == Headline(
        True,
        "vLLM perf FAIL: 2 of 3 results: t.py::test [p] output_throughput x0.338; "
        "t.py::test [p] max_ttft_p99_ms (SLO); 10.0 min wall, 20.0 GPU minutes (2 GPU)",
    )
    failing = text.verdict_line(_results(bad), 6, 0)
    assert "**vLLM perf FAIL" in document.markdown(document.build([bad]), headline=failing)


def test_a_rules_regression_without_a_ratio_does_not_lead_the_line():
    """A rule's verdict has no ratio: it printed "xnan" and led the FAIL line where a
    measured regression (throughput x0.361) stood behind it (seen failing unsorted)."""
    import dataclasses
    import math
    from pathlib import Path

    from pytest_vllm_perf.core.records import GateResult, GateStatus, MetricVerdict, Verdict

    rule = MetricVerdict("itl_p50_ms", 5, 5, math.nan, math.nan, math.nan, 0.3,
                         Verdict.REGRESSED, "streamed in bursts")  # fmt: skip
    measured = MetricVerdict("output_throughput", 100, 36.1, 0.361, 0.3, 0.4, 0.15,
                             Verdict.REGRESSED)  # fmt: skip
    gate = GateResult(GateStatus.COMPARED, Path("b.json"), (rule, measured))
    bad = dataclasses.replace(_decode_outcome(0.1), gate=gate)
    line = text.verdict_line(_results(bad), 60, 0).text
    assert "output_throughput x0.361, itl_p50_ms (by rule)" in line, line
    assert "xnan" not in line


def test_small_and_unbounded_figures_read_as_a_user_expects():
    """``ITL p50 0.0ms`` in the summary table and ``x0.000..xinf`` intervals confused a
    new user. Broken on purpose (the old formats back), each check fails."""
    from pytest_vllm_perf.core.records import MetricVerdict, Verdict

    row = text.result_rows(_results(_decode_outcome(0.1)))[0]
    assert "0.0ms" not in row and "3.0ms" in row, row  # ITL p50 of 3 ms still one decimal
    cell = text._cell({"itl_p50_ms": 0.031}, "itl_p50_ms")
    assert cell == "0.031ms", cell
    unbounded = MetricVerdict("tpot_mean_ms", 5.0, 5.1, 1.02, 0.0, float("inf"), 0.05,
                              Verdict.INCONCLUSIVE)  # fmt: skip
    line = text.describe_verdict(unbounded)
    assert "xinf" not in line and "x0.000" not in line, line
    assert "95% CI unbounded: too few or too varied passes" in line, line
    above = MetricVerdict("tpot_mean_ms", 5.0, 6.0, 1.2, 1.1, float("inf"), 0.05,
                          Verdict.REGRESSED)  # fmt: skip
    assert "95% CI unbounded above x1.100" in text.describe_verdict(above)
    bounded = MetricVerdict("tpot_mean_ms", 5.0, 5.1, 1.02, 0.99, 1.05, 0.05, Verdict.UNCHANGED)
    assert "95% CI x0.990..x1.050" in text.describe_verdict(bounded)


def test_too_few_passes_names_the_side_that_is_short():
    """ "use --vllm-repeat 8 on both sides" was printed after 8 current passes against a
    one-pass baseline. Broken on purpose (one message for all), the first check fails."""
    from pytest_vllm_perf.verdict import compare

    def passes(n: int) -> compare.Passes:
        return compare.Passes(
            metrics=tuple({"tpot_mean_ms": 5.0} for _ in range(n)),
            indices=tuple(range(n)),
            durations=(1.0,) * n,
            records=(),
        )

    note = compare.passes_note([passes(1)], passes(8))
    assert note.endswith("re-save the baseline with --vllm-repeat 8 or more"), note
    note = compare.passes_note([passes(8)], passes(1))
    assert note.endswith("run with --vllm-repeat 8 or more"), note


def test_every_verdict_line_is_short_and_its_values_agree_with_its_ratio():
    """Over every compared metric of the registry: the default line is at most
    ``SHORT_LINE`` characters, and its two values move the way its ratio says. The
    values were each side's median, the ratio the passes' geometric means: an A/A
    printed "339.3 -> 269.7 (x1.197". Broken on purpose (the medians shown again), the
    direction check fails; with the full line as the default, the length check does."""
    from pytest_vllm_perf.core.registry import METRICS
    from pytest_vllm_perf.metrics.passes import Passes
    from pytest_vllm_perf.verdict import compare

    def side(values):
        metrics = tuple({key: v, "completed": 100.0, "failed": 0.0} for v in values)
        return Passes(metrics, tuple(range(len(values))), (10.0,) * len(values))

    compared = [k for k, m in METRICS.items() if m.tolerance is not None]
    assert len(compared) >= 10
    for key in compared:
        # the median falls (10 -> 5) while the passes' geometric mean rises (3.98 -> 5)
        base = side([10.0, 10.0, 10.5, 1.0, 1.0])
        cur = side([5.0, 5.2, 4.9, 5.1, 5.0])
        for pair in (False, True):
            [v] = [x for x in compare.compare([base], cur, [key], {}, gated=[key], pair=pair)
                   if x.metric == key]  # fmt: skip
            line = text.describe_verdict(v)
            assert len(line) <= text.SHORT_LINE, line
            if math.isfinite(v.ratio) and v.ratio != 1:
                assert (v.current > v.baseline) == (v.ratio > 1), line
            assert len(text.describe_verdict(v, verbose=True)) > len(line)


def test_a_side_by_side_ratio_without_an_interval_is_not_called_noise():
    """``x363.74~`` marked a ratio "within noise" when there was no interval at all.
    Broken on purpose (a missing interval read as noise), the mark is ``~``."""
    from types import SimpleNamespace

    from pytest_vllm_perf.core.records import MetricVerdict, Verdict
    from pytest_vllm_perf.report import sides

    ref, other = (SimpleNamespace(metrics={"itl_max_ms": v}) for v in (1.0, 363.74))
    nan = float("nan")
    none = MetricVerdict("itl_max_ms", 1.0, 363.74, nan, nan, nan, 0.0, Verdict.INCONCLUSIVE)
    assert sides._ratio(ref, other, "itl_max_ms", {"itl_max_ms": none}) == "363.7 (x363.74?)"
    wide = MetricVerdict("itl_max_ms", 1.0, 1.2, 1.1, 0.9, 1.4, 0.0, Verdict.INCONCLUSIVE)
    assert sides._ratio(ref, other, "itl_max_ms", {"itl_max_ms": wide}) == "363.7 (x1.10~)"
