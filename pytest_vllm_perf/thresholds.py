"""Service-level thresholds: which metric names exist and how a limit is checked.

A threshold key is ``[class.][min_]metric``: ``ttft_p99_ms`` is an upper bound over
all requests, ``chat.itl_p99_ms`` one over the ``chat`` class only, and
``min_preemptions`` a lower bound. Every checked metric is reported, pass or fail,
so a failure shows the whole picture rather than the first broken limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

LATENCIES = ("ttft", "itl", "tpot", "e2el")
STATS = ("mean", "p50", "p90", "p99", "p999", "max")
REQUEST_METRICS = frozenset(
    {f"{lat}_{stat}_ms" for lat in LATENCIES for stat in STATS}
    | {"completed", "failed", "output_throughput", "request_throughput"}
)
SERVER_METRICS = frozenset({"preemptions", "kv_cache_usage_peak", "num_requests_waiting_peak"})
METRICS = REQUEST_METRICS | SERVER_METRICS


@dataclass(frozen=True)
class Check:
    """One threshold applied to one measured value."""

    key: str
    limit: float
    measured: float | None

    @property
    def is_lower_bound(self) -> bool:
        return self.key.rsplit(".", 1)[-1].startswith("min_")

    @property
    def passed(self) -> bool:
        if self.measured is None or math.isnan(self.measured):
            return False
        if self.is_lower_bound:
            return self.measured >= self.limit
        return self.measured <= self.limit

    def describe(self) -> str:
        op = ">=" if self.is_lower_bound else "<="
        shown = "missing" if self.measured is None else f"{self.measured:.4g}"
        mark = "ok  " if self.passed else "FAIL"
        return f"{mark} {self.key}: {shown} (limit {op} {self.limit:g})"


def split_key(key: str) -> tuple[str | None, str]:
    """``chat.min_itl_p99_ms`` -> (``chat``, ``itl_p99_ms``)."""
    cls, _, name = key.rpartition(".")
    return (cls or None), name.removeprefix("min_")


def metric_key(key: str) -> str:
    """The measured-metrics key a threshold reads: the key without ``min_``."""
    cls, name = split_key(key)
    return f"{cls}.{name}" if cls else name


def validate_thresholds(thresholds: Mapping[str, float]) -> None:
    """Raise ValueError naming the first key that is no known metric."""
    for key in thresholds:
        cls, name = split_key(key)
        allowed = REQUEST_METRICS if cls else METRICS
        if name not in allowed:
            raise ValueError(
                f"unknown threshold {key!r}; metrics: {', '.join(sorted(METRICS))} "
                "(prefix 'min_' for a lower bound, 'CLASS.' for one request class)"
            )


def check(metrics: Mapping[str, float], thresholds: Mapping[str, float]) -> list[Check]:
    """Apply every threshold to the measured metrics, in key order."""
    validate_thresholds(thresholds)
    return [Check(k, float(v), metrics.get(metric_key(k))) for k, v in sorted(thresholds.items())]


def failure_message(checks: list[Check]) -> str:
    """The text a failed perf test shows: every checked metric against its limit."""
    failed = sum(not c.passed for c in checks)
    lines = [f"{failed} of {len(checks)} vLLM perf thresholds failed:"]
    return "\n".join(lines + ["  " + c.describe() for c in checks])
