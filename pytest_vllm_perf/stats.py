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


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """Linear-interpolated percentile; infinite samples stay infinite (never NaN)."""
    if len(values) == 0:
        return math.nan
    with np.errstate(invalid="ignore"):  # inf - inf while interpolating between failures
        result = float(np.percentile(np.asarray(values, dtype=float), q))
    return math.inf if math.isnan(result) else result


def describe(prefix: str, seconds: Sequence[float] | np.ndarray) -> dict[str, float]:
    """mean, percentiles and max of latency samples, in milliseconds."""
    empty = len(seconds) == 0
    out = {f"{prefix}_mean_ms": (math.nan if empty else float(np.mean(seconds))) * 1000}
    for name, q in PERCENTILES.items():
        out[f"{prefix}_{name}_ms"] = percentile(seconds, q) * 1000
    out[f"{prefix}_max_ms"] = (math.nan if empty else float(np.max(seconds))) * 1000
    return out


LATENCY_FIELDS = ("ttft", "itl", "tpot", "e2el")


def samples(records: Iterable[RequestRecord]) -> dict[str, np.ndarray]:
    """Per-request arrays in seconds (and completed requests' token counts).

    Unanswered requests enter TTFT and E2EL as infinity: they are never dropped.
    The summary and the regression comparison both read these, so they agree.
    """
    records = list(records)
    return {
        "ttft": np.array([r.ttft if r.ttft is not None else math.inf for r in records]),
        "itl": np.array([x for r in records for x in r.itl]),
        "e2el": np.array([r.e2el if r.ok else math.inf for r in records]),
        "tpot": np.array([r.tpot for r in records if r.ok and r.tpot is not None]),
        "tokens": np.array([r.output_tokens for r in records if r.ok], dtype=float),
    }


def summarize(records: Sequence[RequestRecord], duration_s: float) -> dict[str, float]:
    """All request metrics of one group of records over a measured window."""
    arrays = samples(records)
    out: dict[str, float] = {}
    for name in LATENCY_FIELDS:
        out.update(describe(name, arrays[name]))
    completed = [r for r in records if r.ok]
    out["completed"] = float(len(completed))
    out["failed"] = float(len(records) - len(completed))
    tokens = sum(r.output_tokens for r in completed)
    out["output_throughput"] = tokens / duration_s if duration_s > 0 else math.nan
    out["request_throughput"] = len(completed) / duration_s if duration_s > 0 else math.nan
    return out
