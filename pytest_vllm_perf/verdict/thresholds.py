"""Service-level thresholds: limits on measured metrics, checked all at once.

A threshold key is ``[CLASS.][min_]METRIC``: ``ttft_p99_ms`` is an upper bound over
all requests, ``chat.itl_p99_ms`` one over the ``chat`` class only, and
``min_preemptions`` a lower bound. Every checked metric is reported, pass or fail,
so a failure shows the whole picture rather than the first broken limit.
"""

from __future__ import annotations

from collections.abc import Mapping

from pytest_vllm_perf.core.errors import ThresholdError
from pytest_vllm_perf.core.records import Check
from pytest_vllm_perf.core.registry import threshold_target

__all__ = ["check", "validate"]


def validate(thresholds: Mapping[str, float]) -> None:
    """ThresholdError naming the first key that is no known metric or whose limit is no
    number (a marker's ``"250ms"`` was found only after the run, as a traceback)."""
    for key, limit in thresholds.items():
        threshold_target(key)
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            raise ThresholdError(f"threshold {key!r}: expected a number, got {limit!r}")


def check(metrics: Mapping[str, float], thresholds: Mapping[str, float]) -> tuple[Check, ...]:
    """Apply every threshold to the measured metrics, in key order."""
    out = []
    for key, limit in sorted(thresholds.items()):
        target, lower = threshold_target(key)
        out.append(Check(key, target, float(limit), metrics.get(target), lower))
    return tuple(out)
