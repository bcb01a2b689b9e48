"""A ``--vllm-json`` report in pytest-benchmark's JSON format, for the dashboards and the
``pytest-benchmark compare`` that read it.

pytest-benchmark times a function in rounds; a served load is not a function, so it is
not a dependency of the plugin (it added 46 options to every ``--help``). Its file
format still fits: one benchmark per test, profile and metric, a pass as a round, the
stats over the passes. Latencies are in seconds (pytest-benchmark's unit); a throughput
is written as its inverse, seconds per token or per request, so that ``ops`` is the
throughput itself and "lower is better" holds for every benchmark. The profile, the
metric's own unit and the serving environment go in ``extra_info``.
"""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from pytest_vllm_perf.core.registry import METRICS, split_key
from pytest_vllm_perf.core.report import Report, ResultEntry
from pytest_vllm_perf.store import reports

__all__ = ["FORMAT_VERSION", "benchmarks", "document"]

# the pytest-benchmark release whose file format this writes (its "version" field)
FORMAT_VERSION: Final = "5.3.1"


def _quartiles(data: Sequence[float]) -> tuple[float, float]:
    """q1 and q3 as pytest-benchmark's ``Stats`` has them (Wikipedia's quartile methods):
    the medians of the halves for an even count, method 3 for an odd one."""
    x, n = sorted(data), len(data)
    if n == 1:
        return x[0], x[0]
    if n % 2 == 0:
        return statistics.median(x[: n // 2]), statistics.median(x[n // 2 :])
    k, r = divmod(n, 4)
    if r == 1:
        return 0.25 * x[k - 1] + 0.75 * x[k], 0.75 * x[3 * k] + 0.25 * x[3 * k + 1]
    return 0.75 * x[k] + 0.25 * x[k + 1], 0.25 * x[3 * k + 1] + 0.75 * x[3 * k + 2]


def _stats(data: Sequence[float]) -> dict[str, Any]:
    """The ``stats`` block of one benchmark, as pytest-benchmark computes it."""
    n = len(data)
    mean = statistics.mean(data)
    stddev = statistics.stdev(data) if n > 1 else 0.0
    q1, q3 = _quartiles(data)
    iqr = q3 - q1
    low_fence, high_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_out = sum(1 for x in data if x < low_fence or x > high_fence)
    sd_out = sum(1 for x in data if abs(x - mean) > stddev) if stddev else 0
    return {
        "min": min(data), "max": max(data), "mean": mean, "stddev": stddev, "rounds": n,
        "median": statistics.median(data), "iqr": iqr, "q1": q1, "q3": q3,
        "iqr_outliers": iqr_out, "stddev_outliers": sd_out,
        "outliers": f"{sd_out};{iqr_out}",
        "ld15iqr": min((x for x in data if x >= low_fence), default=min(data)),
        "hd15iqr": max((x for x in data if x <= high_fence), default=max(data)),
        "ops": 1 / mean if mean else 0.0, "total": sum(data), "iterations": 1,
        "data": list(data),
    }  # fmt: skip


def _seconds(key: str, value: float) -> float | None:
    """A pass's value of ``key`` as seconds (a throughput as its inverse)."""
    found = METRICS.get(split_key(key)[1])
    if found is None or not math.isfinite(value):
        return None
    if found.higher_is_better:
        return 1 / value if value > 0 else None
    return value / 1000 if found.unit == "ms" else None


def benchmarks(result: ResultEntry) -> list[dict[str, Any]]:
    """One benchmark per compared (and gated) metric of one report result."""
    test, profile, passes = result.test, result.profile, len(result.passes)
    out = []
    for key, values in reports.report_series(result).items():
        data = [s for s in (_seconds(key, v) for v in values) if s is not None]
        if not data:
            continue
        found = METRICS[split_key(key)[1]]
        unit = f"s/{found.unit.split('/')[0]}" if found.higher_is_better else "s"
        out.append(
            {
                "group": f"{test} [{profile}]",
                "name": f"{key}[{profile}]",
                "fullname": f"{test}::{key}[{profile}]",
                "params": {"profile": profile},
                "param": profile,
                "extra_info": {
                    "metric": key,
                    "unit": unit,
                    "metric_unit": found.unit,
                    "inverted": found.higher_is_better,
                    "profile_hash": result.setup.get("profile_hash"),
                    "environment": dict(result.environment),
                },
                "options": {"passes": passes},
                "stats": _stats(data),
            }
        )
    return out


def document(
    report: Report, commit: Mapping[str, Any], when: datetime | None = None
) -> dict[str, Any]:
    """The whole file: every result's benchmarks, the machine this was written on, the
    commit measured (``baseline.commit_info``'s fields)."""
    stamp = (when or datetime.now(UTC)).isoformat()
    return {
        "machine_info": {
            "node": platform.node(),
            "processor": platform.processor(),
            "machine": platform.machine(),
            "python_implementation": platform.python_implementation(),
            "python_version": platform.python_version(),
            "system": platform.system(),
            "release": platform.release(),
            "cpu": {},
        },
        "commit_info": dict(commit),
        "benchmarks": [b for r in report.results for b in benchmarks(r)],
        "datetime": stamp,
        "version": FORMAT_VERSION,
    }
