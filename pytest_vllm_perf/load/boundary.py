"""What a pass reads at its boundaries and makes of its records: the server's counters
and the GPUs' energy at its start and end, their deltas over the pass, whether its
open-loop arrivals outpaced the server, and the client's event-loop lag."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Final

from pytest_vllm_perf.core.records import RequestRecord
from pytest_vllm_perf.core.workload import Workload
from pytest_vllm_perf.load import scrape
from pytest_vllm_perf.serving.energy import EnergyMeter

__all__ = ["Boundary", "boundary", "counter_deltas", "overload", "p99", "pass_deltas"]

OVERLOAD_GROWTH: Final = 2.0  # last-third / first-third median TTFT of an open-loop class
OVERLOAD_MIN_ARRIVALS: Final = 6


def p99(values: list[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


Boundary = tuple[Mapping[str, float] | None, float | None, bool]


def boundary(base_url: str, meter: EnergyMeter | None, ending: bool = False) -> Boundary:
    """One pass boundary's reads: the server's counters, its GPUs' energy (J), and
    whether energy is metered at all. The energy is read nearest the pass (after the
    scrape at its start, before it at its end), so that it spans the pass alone."""
    joules = meter.read_j() if meter is not None and ending else None
    counters = scrape.scrape(base_url)
    if meter is not None and not ending:
        joules = meter.read_j()
    return counters, joules, meter is not None


def pass_deltas(before: Boundary, after: Boundary) -> dict[str, float]:
    """The counters' deltas over a pass (``counter_deltas``), with ``energy_j`` where
    energy is metered (NaN when a read failed)."""
    out = {}
    if before[2]:
        joules = (before[1], after[1])
        out["energy_j"] = (
            joules[1] - joules[0] if joules[0] is not None and joules[1] is not None else math.nan
        )
    return out | counter_deltas(before[0], after[0])


def counter_deltas(
    before: Mapping[str, float] | None, after: Mapping[str, float] | None
) -> dict[str, float]:
    """Counter deltas over a pass: NaN when a read failed (the verdict then fails on
    it, rather than losing the counter), absent when the server exports none."""
    if before is None or after is None:
        return {"preemptions": math.nan}
    out = {}
    for key, names in scrape.COUNTERS.items():
        b, a = scrape.first(before, names), scrape.first(after, names)
        if b is not None and a is not None:
            out[key] = a - b
        elif b is not None or a is not None:
            out[key] = math.nan
    return out


def overload(workload: Workload, records: tuple[RequestRecord, ...]) -> str:
    """Why a pass's open-loop arrivals outpaced the server, or "" when they did not.

    Under a stable load TTFT does not depend on when a request arrived; when
    arrivals outpace completions the queue, and with it TTFT, grows through the
    pass. So: the median TTFT of the last third of a class's arrivals against the
    first third's.
    """
    for cls in workload.classes:
        if not cls.rate and not cls.trace:  # closed-loop users wait: no queue grows
            continue
        ttfts = [
            r.ttft if r.ttft is not None else float("inf") for r in records if r.cls == cls.name
        ]
        if len(ttfts) < OVERLOAD_MIN_ARRIVALS:
            continue
        third = len(ttfts) // 3
        early, late = statistics.median(ttfts[:third]), statistics.median(ttfts[-third:])
        if early > 0 and late / early >= OVERLOAD_GROWTH:
            return (
                f"class {cls.name!r}: TTFT grew x{late / early:.1f} from the first to the "
                "last third of its arrivals; arrivals outpace completions, so its latencies "
                "measure a growing queue (lower its rate)"
            )
    return ""
