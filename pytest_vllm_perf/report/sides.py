"""Side-by-side tables: each profile a test ran under against the first, as ratios
with ``~`` where the 95% interval holds 1; for one session's outcomes and for the
stored baselines (``vllm-perf table``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pytest_vllm_perf.core.records import MetricVerdict, Outcome
from pytest_vllm_perf.report import text
from pytest_vllm_perf.verdict import compare
from pytest_vllm_perf.verdict.gate import current_passes

__all__ = ["SIDE_BY_SIDE", "Side", "comparison_lines", "side_by_side"]

# the summary's latency and throughput columns: counts do not compare as ratios
SIDE_BY_SIDE: Final = tuple(
    k for k in text.COLUMNS if k not in ("completed", "failed", "preemptions")
)


@dataclass(frozen=True)
class Side:
    """One profile's run of one test: what a side-by-side table compares."""

    test_id: str
    profile: str
    boots: tuple[compare.Passes, ...]
    metrics: Mapping[str, float]

    @classmethod
    def of(cls, o: Outcome) -> Side:
        return cls(o.test_id, o.profile, (current_passes(o.result),), o.result.metrics)


def comparison_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """Side-by-side tables for the tests this session ran under several profiles."""
    return side_by_side([Side.of(o) for o in outcomes])


def side_by_side(sides: Sequence[Side]) -> list[str]:
    """Per test run under several profiles, a table of each profile against the first.

    ``~`` marks a ratio whose 95% interval (verdict.compare) contains 1, i.e. noise;
    ``?`` one with no interval (too few passes measured it), shown as the pooled ratio.
    The worst stall (ITL max) is a single maximum per pass and carries an interval
    over passes like the rest.
    """
    by_test: dict[str, list[Side]] = {}
    for side in sides:
        by_test.setdefault(side.test_id, []).append(side)
    lines: list[str] = []
    for test_id, group in by_test.items():
        if len({s.profile for s in group}) < 2:
            continue
        ref = group[0]
        lines += ["", f"{test_id}: ratios to {ref.profile} (~ = within noise, ? = no interval)"]
        rows = [[ref.profile, *(text.fmt(ref.metrics.get(k), "{:.1f}") for k in SIDE_BY_SIDE)]]
        for other in group[1:]:
            verdicts = {
                v.metric: v
                for v in compare.compare(
                    ref.boots, _merged(other.boots), SIDE_BY_SIDE, _no_tolerance(), pair=True
                )
            }
            rows.append([other.profile, *(_ratio(ref, other, k, verdicts) for k in SIDE_BY_SIDE)])
        labels = [text.label(k, {"itl_max_ms": "worst stall"}) for k in SIDE_BY_SIDE]
        lines += text.table(["profile", *labels], rows)
    return lines


def _no_tolerance() -> dict[str, float]:
    return dict.fromkeys(SIDE_BY_SIDE, 0.0)


def _merged(boots: Sequence[compare.Passes]) -> compare.Passes:
    """All boots of a side as one set of passes (a table compares, it does not gate)."""
    return compare.Passes(
        metrics=tuple(m for b in boots for m in b.metrics),
        indices=tuple(i for b in boots for i in b.indices),
        durations=tuple(d for b in boots for d in b.durations),
        records=tuple(r for b in boots for r in b.records),
    )


def _ratio(ref: Side, other: Side, key: str, verdicts: Mapping[str, MetricVerdict]) -> str:
    a, b = ref.metrics.get(key), other.metrics.get(key)
    value = text.fmt(b, "{:.1f}")
    if not a or b is None or math.isnan(a) or math.isnan(b):
        return value
    v = verdicts.get(key)
    if v is None or math.isnan(v.low) or not math.isfinite(v.ratio):
        # no interval is no evidence of noise: "x363.74~" read as "within noise"
        return f"{value} (x{b / a:.2f}?)"
    noise = "~" if v.low <= 1 <= v.high else ""
    return f"{value} (x{v.ratio:.2f}{noise})"  # the ratio its interval is of
