"""Human-readable views of outcomes: the terminal's summary table, verdict lines
and notes. The JSON and Markdown documents are ``report.document``'s, the
side-by-side tables ``report.sides``'.

Every column and key comes from the metric registry (``core.registry``), so a
metric added there shows up in every view.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final

from pytest_vllm_perf.core.records import (
    Check,
    GateResult,
    GateStatus,
    MetricVerdict,
    Outcome,
    Verdict,
)
from pytest_vllm_perf.core.registry import (
    METRICS,
    SUMMARY_COLUMNS,
    metrics_from_report,
    split_key,
)
from pytest_vllm_perf.core.report import Headline, ResultEntry
from pytest_vllm_perf.metrics import compute

__all__ = [
    "COLUMNS",
    "describe_check",
    "describe_verdict",
    "fmt",
    "gate_notes",
    "headline",
    "interval",
    "label",
    "regression_message",
    "result_rows",
    "summary_headers",
    "summary_lines",
    "table",
    "threshold_message",
    "verdict_line",
]

# The summary's metric columns, in order, with their labels and formats: the registry's
# (a metric's ``column``).
COLUMNS: Final = SUMMARY_COLUMNS
_HEADER: Final = {"completed": "n"}  # the request count, as narrow as its figures


def label(key: str, names: Mapping[str, str] = _HEADER) -> str:
    return names.get(key, METRICS[split_key(key)[1]].label)


def fmt(value: float | None, pattern: str = "{:.4g}") -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    return pattern.format(value)


def _cell(metrics: Mapping[str, float], key: str) -> str:
    m = METRICS[split_key(key)[1]]
    unit = "ms" if m.unit == "ms" else ""
    value = metrics.get(key)
    shown = fmt(value, m.fmt + unit)
    if value and math.isfinite(value) and not any(c in "123456789" for c in shown):
        # a figure below the format's last digit (an ITL p50 of 0.03 ms read "0.0ms")
        shown = fmt(value, "{:.2g}" + unit)
    return shown


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain aligned text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def describe_check(check: Check) -> str:
    op = ">=" if check.lower_bound else "<="
    shown = "missing" if check.measured is None else f"{check.measured:.4g}"
    mark = "ok  " if check.passed else "FAIL"
    return f"{mark} {check.key}: {shown} (limit {op} {check.limit:g})"


def threshold_message(checks: Sequence[Check]) -> str:
    """The text a failed perf test shows: every checked metric against its limit."""
    failed = sum(not c.passed for c in checks)
    lines = [f"{failed} of {len(checks)} vLLM perf thresholds failed:"]
    return "\n".join(lines + ["  " + describe_check(c) for c in checks])


# a verdict line's default form fits a terminal and a log line (``--vllm-verbose``: all)
SHORT_LINE: Final = 160


def describe_verdict(v: MetricVerdict, verbose: bool = False) -> str:
    """``METRIC: BASE -> CURRENT (xRATIO, 95% CI xLOW..xHIGH) WORD``; ``verbose`` adds what
    it was decided over, the tolerance, the p-values against the level and the bounds.
    The two values are the statistic the ratio compares (``verdict.measured``)."""
    head = f"{v.metric}: {fmt(v.baseline)} -> {fmt(v.current)} (x{v.ratio:.3f}, "
    tail = f") {v.verdict}" + ("" if v.gated else " [reported, not gated]")
    ci = interval(v.low, v.high)
    if not verbose:
        return f"{head}{ci}{tail}"
    over = f" over {v.basis}" if v.basis else ""
    p = ""
    if not math.isnan(v.p_value) and not math.isnan(v.margin):
        # the decision: one-sided, of a change worse than the indifference margin
        worse = f"x{1 / (1 + v.margin):.4g}" if _higher(v.metric) else f"x{1 + v.margin:.4g}"
        p = f", p={v.p_value:.3g} of no change worse than {worse}"
        if v.gated and v.p_holm != v.p_value:
            p += f" (Holm {v.p_holm:.3g})"
        p += f", level {v.level:.3g}"
        low, high = v.bounds
        if not math.isnan(low):
            tol = (
                f"x{1 / (1 + v.tolerance):.4g}" if _higher(v.metric) else f"x{1 + v.tolerance:.4g}"
            )
            p += f"; decided by bounds x{low:.4g}..x{high:.4g} against {worse} and {tol}"
    elif not math.isnan(v.p_value):
        p = f", p={v.p_value:.3g} beyond it"  # the p of a change beyond the tolerance
        if v.gated and v.p_holm != v.p_value:
            p += f" (Holm {v.p_holm:.3g})"
    return f"{head}{ci}{over}, tolerance {v.tolerance:.0%}{p}{tail}"


def interval(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return "no interval"
    if low > 0 and math.isfinite(high):
        return f"95% CI x{low:.3f}..x{high:.3f}"
    # read "x0.000..xinf" once: say which side is open
    if low > 0:
        open_side = f" above x{low:.3f}"
    elif math.isfinite(high):
        open_side = f" below x{high:.3f}"
    else:
        open_side = ""
    return f"95% CI unbounded{open_side}: too few or too varied passes"


def _higher(key: str) -> bool:
    found = METRICS.get(split_key(key)[1])
    return found is not None and found.higher_is_better


def regression_message(gate: GateResult, verbose: bool = False) -> str:
    ab = gate.status is GateStatus.AB
    other = "the base side" if ab else "the baseline"
    lines = [f"vLLM perf regression against {gate.path}:"]
    lines += [
        ("  >> " if v in gate.regressions else "     ") + describe_verdict(v, verbose)
        for v in gate.verdicts
    ]
    lines.append(
        f"  differs from {other}:"
        if gate.changes
        else f"  nothing recorded differs from {other} (same profile, versions and model)"
    )
    lines += ["    " + c for c in gate.changes]
    return "\n".join(lines)


def verdict_line(results: Sequence[ResultEntry], wall_s: float, gpus: int) -> Headline:
    """The line a person reads first: PASS or FAIL, the failing results and what failed
    in each, the verdicts of the rest, and the session's wall and GPU minutes."""
    minutes = f"{wall_s / 60:.1f} min wall, " + (
        f"{wall_s * gpus / 60:.1f} GPU minutes ({gpus} GPU)" if gpus else "no GPU"
    )
    failed, head = headline(results)
    return Headline(failed, f"vLLM perf {head}; {minutes}")


def headline(results: Sequence[ResultEntry], failing_too: Sequence[str] = ()) -> tuple[bool, str]:
    """``PASS: n results (their verdicts)`` or ``FAIL: k of n results: what failed``;
    ``failing_too``: more that failed the run (a merge's missing shards)."""
    failing = [(r, why) for r in results if (why := r.failures())]
    if failing or failing_too:
        shown = "; ".join(f"{r.test} [{r.profile}] {', '.join(why)}" for r, why in failing[:4])
        shown += f" and {len(failing) - 4} more" if len(failing) > 4 else ""
        what = "; ".join(x for x in (shown, *failing_too) if x)
        return True, f"FAIL: {len(failing)} of {len(results)} results: {what}"
    counts = Counter(r.verdict for r in results)
    words = ", ".join(f"{n} {word}" for word, n in sorted(counts.items()))
    return False, f"PASS: {len(results)} results ({words})"


def result_rows(results: Sequence[ResultEntry], markdown: bool = False) -> list[list[str]]:
    """The summary table's rows, one per test and profile: a session's own, or the
    merged reports of a ``pytest -n N`` session's workers or of shards."""
    rows = []
    for r in results:
        metrics = metrics_from_report(r.metrics)
        cells = [_cell(metrics, key) for key in COLUMNS]
        slo = "pass" if r.passed else ("**FAIL**" if markdown else "FAIL")
        rows.append([f"`{r.test}`" if markdown else r.test, r.profile, *cells, slo, r.verdict])
    return rows


def summary_headers() -> list[str]:
    """The summary table's columns (``COLUMNS`` between the test and its verdicts)."""
    return ["test", "profile", *(label(k) for k in COLUMNS), "SLO", "verdict"]


def summary_lines(results: Sequence[ResultEntry]) -> list[str]:
    """One row per test and profile: the figures a perf reviewer looks at first."""
    return table(summary_headers(), result_rows(results))


def _burst_lines(where: str, o: Outcome) -> list[str]:
    """One line per class that streamed in bursts, naming its passes: eight repeated
    lines, one a pass, sat above the regression line a reader looked for."""
    found: dict[str, list[tuple[int, float]]] = {}
    for p in o.result.passes:
        for cls, gap in compute.bursts(o.result.workload, p).items():
            found.setdefault(cls, []).append((p.index + 1, gap))
    lines = []
    for cls, hits in found.items():
        passes = ", ".join(str(index) for index, _ in hits)
        gaps = sorted(gap * 1000 for _, gap in hits)
        lines.append(
            f"{where}: class {cls!r} streamed in bursts in {len(hits)} of "
            f"{len(o.result.passes)} passes (pass {passes}; median gap {gaps[0]:.2f}-"
            f"{gaps[-1]:.2f} ms; the API server was starved): their ITL and TPOT are left "
            "out of the verdict"
        )
    return lines


# A pass whose client loop woke this late, against the pass's median streamed gap, is
# one whose gaps the client may have set: each chunk is timed on that loop.
CLIENT_LAG_SHARE: Final = 0.5


def _client_lag_line(o: Outcome) -> str:
    """A note when the client's event loop lagged by half the median gap it timed or
    more, in any pass: the numbers may then be the client's, not the server's."""
    late = []
    for p, m in zip(o.result.passes, o.result.pass_metrics, strict=True):
        gap = m.get("itl_p50_ms", math.nan)
        if p.client_lag_p99_ms >= CLIENT_LAG_SHARE * gap > 0:
            late.append((p.client_lag_p99_ms, gap))
    if not late:
        return ""
    worst, gap = max(late)
    return (
        f"the client could not keep up in {len(late)} of {len(o.result.passes)} passes: its "
        f"event loop woke up to {worst:.1f} ms late (p99) against an ITL p50 of {gap:.2f} ms, "
        "so these latencies may be the client's; run the client on a less loaded machine"
    )


def gate_notes(outcomes: Sequence[Outcome], verbose: bool = False) -> list[str]:
    """What a reader must know: saves, missing baselines, overloads, unsettled verdicts."""
    lines = []
    for o in outcomes:
        where = f"{o.test_id} [{o.profile}]"
        for problem in o.result.overloaded:
            lines.append(f"{where}: overloaded {problem}")
        lines += _burst_lines(where, o)
        if lag := _client_lag_line(o):
            lines.append(f"{where}: {lag}")
        g = o.gate
        if g is None:
            continue
        if g.status in (GateStatus.SAVED, GateStatus.BOOT_ADDED):
            lines.append(f"baseline {g.status}: {where} -> {g.path}")
        if g.note:
            lines.append(f"{where}: {g.note}")
        if g.changes:  # what a reviewer looks for first when a verdict moved
            lines.append(f"{where}: differs from what it is judged against: {'; '.join(g.changes)}")
        for v in g.verdicts:
            # every gated metric, whatever its verdict: a gated ``unchanged`` left out
            # read as a metric never judged (a decode rerun printed no itl_p50_ms line)
            if v.gated or v.verdict is not Verdict.UNCHANGED:
                lines.append(f"  {where} {describe_verdict(v, verbose)}")
    return lines
