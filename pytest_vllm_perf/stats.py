"""Latency statistics with the definitions of ``vllm bench serve``.

Failed requests are never dropped: a request that produced no first token has an
infinite TTFT and E2EL, so a p99 over a run with more than 1% failures is
infinite and fails any limit. This is deliberate: a user never got that answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from pytest_vllm_perf.records import RequestRecord

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile; infinite samples stay infinite (never NaN)."""
    if not values:
        return math.nan
    with np.errstate(invalid="ignore"):  # inf - inf while interpolating between failures
        result = float(np.percentile(np.asarray(values, dtype=float), q))
    return math.inf if math.isnan(result) else result


def describe(prefix: str, seconds: Sequence[float]) -> dict[str, float]:
    """mean, percentiles and max of latency samples, in milliseconds."""
    out = {f"{prefix}_mean_ms": _mean(seconds) * 1000}
    for name, q in PERCENTILES.items():
        out[f"{prefix}_{name}_ms"] = percentile(seconds, q) * 1000
    out[f"{prefix}_max_ms"] = (max(seconds) if seconds else math.nan) * 1000
    return out


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def samples(records: Iterable[RequestRecord]) -> dict[str, list[float]]:
    """Per-metric latency samples in seconds; failures enter as infinity where unfinished."""
    out: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": [], "e2el": []}
    for r in records:
        out["ttft"].append(r.ttft if r.ttft is not None else math.inf)
        out["e2el"].append(r.e2el if r.ok else math.inf)
        out["itl"].extend(r.itl)
        if r.ok and r.tpot is not None:
            out["tpot"].append(r.tpot)
    return out


def summarize(records: Sequence[RequestRecord], duration_s: float) -> dict[str, float]:
    """All request metrics of one group of records over a measured window."""
    lat = samples(records)
    out: dict[str, float] = {}
    for name, values in lat.items():
        out.update(describe(name, values))
    completed = [r for r in records if r.ok]
    out["completed"] = float(len(completed))
    out["failed"] = float(len(records) - len(completed))
    tokens = sum(r.output_tokens for r in completed)
    out["output_throughput"] = tokens / duration_s if duration_s > 0 else math.nan
    out["request_throughput"] = len(completed) / duration_s if duration_s > 0 else math.nan
    return out
