"""Human- and machine-readable views of outcomes: terminal table, JSON, Markdown."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_vllm_perf.session import Outcome

COLUMNS = (
    ("n", "completed", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("TTFT p50", "ttft_p50_ms", "{:.0f}ms"),
    ("TTFT p99", "ttft_p99_ms", "{:.0f}ms"),
    ("ITL p50", "itl_p50_ms", "{:.1f}ms"),
    ("ITL p99", "itl_p99_ms", "{:.1f}ms"),
    ("ITL max", "itl_max_ms", "{:.0f}ms"),
    ("TPOT", "tpot_mean_ms", "{:.1f}ms"),
    ("out tok/s", "output_throughput", "{:.1f}"),
    ("preempt", "preemptions", "{:.0f}"),
)


def fmt(value: float | None, pattern: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    return pattern.format(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain aligned text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def summary_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """One row per test and profile: the figures a perf reviewer looks at first."""
    headers = ["test", "profile", *(c[0] for c in COLUMNS), "SLO"]
    rows = []
    for o in outcomes:
        m = o.result.metrics
        cells = [fmt(m.get(key), pattern) for _, key, pattern in COLUMNS]
        rows.append([o.test_id, o.profile, *cells, "pass" if o.passed else "FAIL"])
    return table(headers, rows)
