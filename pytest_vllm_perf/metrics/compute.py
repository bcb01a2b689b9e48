"""Descriptive statistics of request records, with the definitions of ``vllm bench serve``.

Failed requests are never dropped: a request that produced no first token has an
infinite TTFT and E2EL, so a p99 over a run with more than 1% failures is
infinite and fails any limit. This is deliberate: a user never got that answer.
Every metric name and statistic comes from the registry.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import numpy as np

from pytest_vllm_perf.core.records import PassRecord, RequestRecord
from pytest_vllm_perf.core.registry import LATENCIES, METRICS, PERCENTILES, SERVER_MEANS
from pytest_vllm_perf.core.workload import Workload
from pytest_vllm_perf.metrics.passes import Floats

__all__ = [
    "BURSTY",
    "BURST_GAP_S",
    "bursts",
    "measure_metrics",
    "pass_metrics",
    "percentile",
    "samples",
    "summarize",
    "value",
    "window_counts",
    "window_rates",
]

Samples = dict[str, Floats]


def percentile(values: Sequence[float] | Floats, q: float) -> float:
    """Linear-interpolated percentile (numpy's default) in which infinities stay infinite.

    numpy computes ``a + frac * (b - a)``, which is NaN for ``b = inf`` even when
    ``frac`` is 0; here the value at a whole index is returned as it is, so the
    median of [1, 2, inf] is 2, and only a percentile that interpolates towards an
    infinite sample is infinite.
    """
    if len(values) == 0:
        return math.nan
    ordered = np.sort(np.asarray(values, dtype=float))
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    frac = position - low
    a = float(ordered[low])
    if frac == 0.0:
        return a
    b = float(ordered[low + 1])
    if math.isinf(b) or math.isinf(a):
        return b if math.isinf(b) else a
    return a + frac * (b - a)


def samples(records: Iterable[RequestRecord]) -> Samples:
    """Per-request arrays in seconds (and completed requests' token counts).

    Unanswered requests enter TTFT and E2EL as infinity: they are never dropped.
    """
    records = list(records)
    return {
        "ttft": np.array([r.ttft if r.ttft is not None else math.inf for r in records]),
        "itl": np.array([x for r in records for x in r.itl]),
        "e2el": np.array([r.e2el if r.ok else math.inf for r in records]),
        "tpot": np.array([r.tpot for r in records if r.ok and r.tpot is not None]),
        "tokens": np.array([r.output_tokens for r in records if r.ok], dtype=float),
    }


def _latency_stats(field: str, seconds: Floats) -> dict[str, float]:
    empty = len(seconds) == 0
    out = {f"{field}_mean_ms": (math.nan if empty else float(np.mean(seconds))) * 1000}
    for name, q in PERCENTILES.items():
        out[f"{field}_{name}_ms"] = percentile(seconds, q) * 1000
    out[f"{field}_max_ms"] = (math.nan if empty else float(np.max(seconds))) * 1000
    return out


def summarize(records: Sequence[RequestRecord], duration_s: float) -> dict[str, float]:
    """Every request metric of the registry over one group of records and ``duration_s``.

    Throughput here is every completed token over ``duration_s``; a pass's throughput
    counts tokens inside its window instead (:func:`window_rates`).
    """
    arrays = samples(records)
    out: dict[str, float] = {}
    for field in LATENCIES:
        out.update(_latency_stats(field, arrays[field]))
    completed = sum(r.ok for r in records)
    out["completed"] = float(completed)
    out["failed"] = float(len(records) - completed)
    rate_ok = duration_s > 0
    out["output_throughput"] = float(np.sum(arrays["tokens"])) / duration_s if rate_ok else math.nan
    out["request_throughput"] = completed / duration_s if rate_ok else math.nan
    return out


def window_counts(records: Iterable[RequestRecord], begin: float, end: float) -> tuple[float, int]:
    """Output tokens streamed, and requests completed, inside ``[begin, end]``.

    A token counts when its chunk arrived inside the window (a chunk of several
    tokens counts them all), so requests that started before the window or ended
    after it count for the part they streamed inside it. Failed requests count
    nothing, as in ``vllm bench serve``, which counts only completed requests' tokens.
    """
    tokens, completed = 0.0, 0
    for r in records:
        if not r.ok or r.ttft is None:
            continue
        first = r.start + r.ttft
        if r.start + r.e2el < begin or first > end:
            continue
        completed += begin <= r.start + r.e2el <= end
        times = first + np.concatenate(([0.0], np.cumsum(r.itl)))
        inside = int(np.count_nonzero((times >= begin) & (times <= end)))
        tokens += inside * r.output_tokens / len(times)
    return tokens, completed


def _window_totals(passes: Sequence[PassRecord]) -> tuple[dict[str, tuple[float, int]], float]:
    """Tokens streamed and requests completed inside the passes' windows, by class,
    and the windows' total length: each request's timeline is walked once."""
    totals: dict[str, tuple[float, int]] = {}
    for p in passes:
        by_class: dict[str, list[RequestRecord]] = {}
        for r in (*p.ramp_records, *p.records):
            by_class.setdefault(r.cls, []).append(r)
        for cls, group in by_class.items():
            t, c = window_counts(group, *p.window)
            before = totals.get(cls, (0.0, 0))
            totals[cls] = (before[0] + t, before[1] + c)
    return totals, sum(p.duration_s for p in passes)


def _rates(tokens: float, completed: int, seconds: float) -> dict[str, float]:
    if seconds <= 0:
        return {"output_throughput": math.nan, "request_throughput": math.nan}
    return {"output_throughput": tokens / seconds, "request_throughput": completed / seconds}


def window_rates(passes: Sequence[PassRecord], cls: str | None = None) -> dict[str, float]:
    """Output and request throughput over the passes' windows (``PassRecord``), of one
    class or of all: the tokens streamed inside each window over their total length.

    Counting to the last response instead (the drain included) made 8 s passes of an
    H200 decode load read 13% below 25 s ones, and the bias grows with E2EL, so it
    does not cancel in an A/B ratio.
    """
    totals, seconds = _window_totals(passes)
    chosen = [v for k, v in totals.items() if cls is None or k == cls]
    return _rates(sum(t for t, _ in chosen), sum(c for _, c in chosen), seconds)


def value(name: str, records: Sequence[RequestRecord], duration_s: float) -> float:
    """One request metric of the registry, computing only what it needs.

    The single-pass bootstrap asks for one metric a thousand times per side; the
    whole :func:`summarize` each time would compute every other metric with it.
    """
    found = METRICS[name]
    if found.field in LATENCIES:
        return latency_value(name, samples(records)[found.field])
    return summarize(records, duration_s)[name]


def latency_value(name: str, seconds: Floats) -> float:
    """A latency metric (``ttft_p50_ms``, ``itl_max_ms``, ...) of one array of samples
    in seconds, in milliseconds. The single-pass bootstrap extracts each time block's
    samples once and calls this on their concatenation: taking the samples out of the
    records again for each of its 2000 replicates took 1.1 s a metric."""
    found = METRICS[name]
    if found.statistic in PERCENTILES:
        return percentile(seconds, PERCENTILES[found.statistic]) * 1000
    if not len(seconds):
        return math.nan
    reduce = np.mean if found.statistic == "mean" else np.max
    return float(reduce(seconds)) * 1000


def _by_class(workload: Workload, passes: Sequence[PassRecord]) -> dict[str, float]:
    """All requests unprefixed, each class as ``cls.metric``."""
    records = [r for p in passes for r in p.records]
    totals, duration = _window_totals(passes)
    tokens, completed = sum(t for t, _ in totals.values()), sum(c for _, c in totals.values())
    out = {**summarize(records, duration), **_rates(tokens, completed, duration)}
    for cls in workload.classes:
        group = [r for r in records if r.cls == cls.name]
        found = {**summarize(group, duration), **_rates(*totals.get(cls.name, (0.0, 0)), duration)}
        out.update({f"{cls.name}.{k}": v for k, v in found.items()})
    return out


# A class streamed "in bursts" when half of its inter-chunk gaps are shorter than this:
# the API server sent chunks it had queued together. On two shared CPU cores a
# starved boot streamed with ITL p50 0.0 ms and TTFT p50 891 ms, where a healthy one
# had 2.8 ms and 12 ms, and its per-chunk ITL and TPOT made the healthy boot look
# x1.85-x2.20 slower (docs/results.md, "Results on the CPU engine").
BURST_GAP_S: Final = 0.0002
BURST_MIN_GAPS: Final = 20
PER_CHUNK: Final = ("itl", "tpot")
BURSTY: Final = "bursty_passes"


def bursts(workload: Workload, p: PassRecord) -> dict[str, float]:
    """The classes of a pass that streamed in bursts, with their median gap in seconds."""
    found = {}
    for cls in workload.classes:
        gaps = [x for r in p.records if r.cls == cls.name for x in r.itl]
        if len(gaps) >= BURST_MIN_GAPS and float(np.median(gaps)) < BURST_GAP_S:
            found[cls.name] = float(np.median(gaps))
    return found


def pass_metrics(workload: Workload, p: PassRecord) -> dict[str, float]:
    """Every metric of one pass: what a verdict compares, pass against pass.

    A class that streamed in bursts has its own per-chunk metrics (ITL, TPOT) left
    out (NaN) and ``CLASS.bursty_passes`` set to 1: they measure the API server's
    starvation, not the engine, and shrink as it gets worse. The all-request
    per-chunk metrics are then computed over the classes that streamed normally, and
    left out (``bursty_passes`` 1) only when none did. The verdict compares how
    often each side streamed in bursts (``compare``), so a regression that makes
    streams bursty fails rather than disappears.
    """
    out = _by_class(workload, (p,))
    bursty = bursts(workload, p)
    streamed = {r.cls for r in p.records if r.itl}
    normal = streamed - set(bursty)
    if bursty and normal:  # all-request per-chunk metrics over the normal classes only
        arrays = samples(r for r in p.records if r.cls in normal)
        for field in PER_CHUNK:
            out.update(_latency_stats(field, arrays[field]))
    for cls in workload.classes:
        out[f"{cls.name}.{BURSTY}"] = float(cls.name in bursty)
    out[BURSTY] = float(bool(bursty) and not normal)
    for key in list(out):
        cls_name, _, name = key.rpartition(".")
        if not name.startswith(PER_CHUNK):
            continue
        if out[f"{cls_name}.{BURSTY}" if cls_name else BURSTY]:
            out[key] = math.nan
    if "preemptions" in p.counters:
        out["preemptions"] = p.counters["preemptions"]
        out["preemptions_per_s"] = p.counters["preemptions"] / p.counted_s
    out.update(_prefix_hit_rate((p,)))
    out.update(_server_means((p,)))
    out.update(_energy((p,)))
    return out


def _counter_totals(passes: Sequence[PassRecord], keys: Sequence[str]) -> list[float] | None:
    """Each counter delta of ``keys`` summed over ``passes`` (NaN where a read failed),
    or None unless every pass has every one (the server exports none of them)."""
    if not passes or not all(k in p.counters for p in passes for k in keys):
        return None
    return [math.fsum(p.counters[k] for p in passes) for k in keys]


def _server_means(passes: Sequence[PassRecord]) -> dict[str, float]:
    """The engine's mean TTFT, ITL, TPOT and queue time over ``passes``, in ms, from its
    histograms' sum and count deltas (absent unless every pass has them; NaN where a
    read failed or nothing was observed)."""
    out: dict[str, float] = {}
    for key, (hist, _) in SERVER_MEANS.items():
        totals = _counter_totals(passes, (f"{hist}_sum", f"{hist}_count"))
        if totals is not None:
            total, n = totals
            out[key] = 1000 * total / n if n > 0 else math.nan
    return out


def _energy(passes: Sequence[PassRecord]) -> dict[str, float]:
    """The GPUs' energy over ``passes`` (NVML, ``serving.energy``), in joules, and per
    1,000 output tokens streamed over the same span: every request's tokens, ramp-up
    ones too, since the energy counts the whole pass (absent unless every pass was
    metered; NaN where a read failed or no token streamed)."""
    totals = _counter_totals(passes, ("energy_j",))
    if totals is None:
        return {}
    (joules,) = totals
    tokens = sum(r.output_tokens for p in passes for r in (*p.records, *p.ramp_records))
    per_1k = 1000 * joules / tokens if tokens > 0 else math.nan
    return {"energy_j": joules, "energy_per_1k_tokens_j": per_1k}


def _prefix_hit_rate(passes: Sequence[PassRecord]) -> dict[str, float]:
    """Prompt tokens the prefix cache served over those looked up, over ``passes``
    (absent when the server exports no prefix-cache counters; 0 when it looked nothing
    up, as with prefix caching off: nothing was served from the cache)."""
    totals = _counter_totals(passes, ("prefix_cache_queries", "prefix_cache_hits"))
    if totals is None:
        return {}
    queries, hits = totals
    if math.isnan(queries) or math.isnan(hits):  # a read failed: never 0 by accident
        return {"prefix_cache_hit_rate": math.nan}
    return {"prefix_cache_hit_rate": hits / queries if queries > 0 else 0.0}


def _by_turn(workload: Workload, passes: Sequence[PassRecord]) -> dict[str, float]:
    """TTFT by turn of each multi-turn class: ``chat.turn2.ttft_p50_ms`` (reported: the
    prefix cache shows as later turns' TTFT staying near the first's)."""
    out: dict[str, float] = {}
    for cls in workload.classes:
        if cls.turns < 2:
            continue
        for turn in range(1, cls.turns + 1):
            ttft = [
                r.ttft if r.ttft is not None else math.inf
                for p in passes
                for r in p.records
                if r.cls == cls.name and r.turn == turn
            ]
            if ttft:
                for q in (50, 99):
                    value = float(np.percentile(ttft, q)) * 1000
                    out[f"{cls.name}.turn{turn}.ttft_p{q}_ms"] = value
    return out


def measure_metrics(
    workload: Workload,
    passes: Sequence[PassRecord],
    server: Mapping[str, float],
    per_pass: Sequence[Mapping[str, float]],
) -> dict[str, float]:
    """Every metric over all passes pooled (what thresholds check), plus server gauges.

    ``bursty_passes`` counts the passes that streamed in bursts, from ``per_pass``
    (each pass's :func:`pass_metrics`).
    """
    out = _by_class(workload, passes)
    for key in [BURSTY, *(f"{c.name}.{BURSTY}" for c in workload.classes)]:
        out[key] = float(sum(m[key] for m in per_pass))
    counts = [p.counters["preemptions"] for p in passes if "preemptions" in p.counters]
    if passes and len(counts) == len(passes):
        out["preemptions"] = float(sum(counts))
        seconds = sum(p.counted_s for p in passes)
        out["preemptions_per_s"] = out["preemptions"] / seconds if seconds > 0 else math.nan
    out.update(_prefix_hit_rate(passes))
    out.update(_server_means(passes))
    out.update(_energy(passes))
    out.update(_by_turn(workload, passes))
    out.update(server)
    return out
