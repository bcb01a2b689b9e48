"""Read the server's Prometheus ``/metrics``: preemptions, prefix-cache lookups, KV usage,
queue depth, and the engine's own latency histograms.

vLLM logs no line per preemption, so the counter's delta is the only honest
count; it is read at every pass boundary, so each pass has its own count. KV
usage and the waiting queue are gauges, read every two seconds during a run.

The latency histograms (``HISTOGRAMS``) are read at the same boundaries: the deltas
of their ``_sum`` and ``_count`` give each pass's exact mean. vLLM's V1 engine stamps
inter-token latency and per-request TPOT with the engine core's clock
(``vllm/v1/metrics/stats.py``, ``engine_core_timestamp``), so neither the API server's
scheduling of the stream nor this client's event loop is in them. Their buckets are
too coarse for a percentile at GPU speed (the first inter-token bucket ends at 10 ms;
the H200's ITL p50 is 5.2-5.6 ms), so only means are taken.

The gauge reader runs in its own thread with a blocking client and parses only
the lines it needs, so it never takes a turn on the event loop that times the
streamed tokens.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Final

from pytest_vllm_perf.core.records import GaugeReading

__all__ = [
    "COUNTERS",
    "HISTOGRAMS",
    "KV_USAGE",
    "PREEMPTIONS",
    "PREFIX_HITS",
    "PREFIX_QUERIES",
    "WAITING",
    "GaugeSampler",
    "first",
    "parse",
    "scrape",
]

# Names moved across releases; the first one a server exports is used.
PREEMPTIONS: Final = ("vllm:num_preemptions_total", "vllm:num_preemptions")
KV_USAGE: Final = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
WAITING: Final = ("vllm:num_requests_waiting",)
# prompt tokens looked up in the prefix cache, and those found (V1 counters)
PREFIX_QUERIES: Final = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS: Final = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
# The engine's latency histograms, by the counter name a pass's deltas are kept under
# (``server_itl_sum``, ``server_itl_count``); names as for the counters above (vLLM
# before 0.11 called inter-token latency ``time_per_output_token_seconds``).
HISTOGRAMS: Final = {
    "server_ttft": ("vllm:time_to_first_token_seconds",),
    "server_itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "server_tpot": ("vllm:request_time_per_output_token_seconds",),
    "server_queue": ("vllm:request_queue_time_seconds",),
}
# the counters read at every pass boundary: the name a pass's delta is kept under
COUNTERS: Final = {
    "preemptions": PREEMPTIONS,
    "prefix_cache_queries": PREFIX_QUERIES,
    "prefix_cache_hits": PREFIX_HITS,
    **{
        f"{key}_{part}": tuple(f"{name}_{part}" for name in names)
        for key, names in HISTOGRAMS.items()
        for part in ("sum", "count")
    },
}
WANTED: Final = frozenset(
    KV_USAGE + WAITING + tuple(name for names in COUNTERS.values() for name in names)
)


def parse(text: str, wanted: Iterable[str] | None = None) -> dict[str, float]:
    """Sum each metric's samples over its label sets: ``{name: value}``.

    With ``wanted``, lines of other metrics are skipped before any parsing.
    """
    keep = None if wanted is None else tuple(wanted)
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if keep is not None and not line.startswith(keep):
            continue
        name_part, _, value_part = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        if keep is not None and name not in keep:
            continue
        try:
            value = float(value_part)
        except ValueError:
            continue
        totals[name] = totals.get(name, 0.0) + value
    return totals


def first(values: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    """The value of the first of ``names`` the server exports."""
    for name in names:
        if name in values:
            return values[name]
    return None


def scrape(base_url: str, timeout_s: float = 5.0) -> dict[str, float] | None:
    """One read of the metrics we use: empty when the server exports none of them,
    None when ``/metrics`` could not be read (a counter read that failed must not
    look like a counter that did not move)."""
    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=timeout_s) as resp:  # noqa: S310
            if resp.status != 200:
                return None
            return parse(resp.read().decode("utf-8", "replace"), WANTED)
    except (urllib.error.URLError, OSError, ValueError):
        return None


class GaugeSampler:
    """Reads the gauges every ``interval_s`` in a background thread until stopped."""

    def __init__(self, base_url: str, t0: float, interval_s: float = 2.0) -> None:
        self.base_url = base_url
        self.t0 = t0
        self.interval_s = interval_s
        self.readings: list[GaugeReading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vllm-perf-gauges", daemon=True)

    def __enter__(self) -> GaugeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            values = scrape(self.base_url, timeout_s=2.0) or {}
            self.readings.append(
                GaugeReading(
                    t=time.perf_counter() - self.t0,
                    kv_cache_usage=first(values, KV_USAGE),
                    waiting=first(values, WAITING),
                )
            )
            self._stop.wait(self.interval_s)


def gauge_peaks(readings: Iterable[GaugeReading]) -> dict[str, float]:
    """Peak KV usage and waiting queue over a run's readings."""
    readings = list(readings)
    kv = [r.kv_cache_usage for r in readings if r.kv_cache_usage is not None]
    waiting = [r.waiting for r in readings if r.waiting is not None]
    out: dict[str, float] = {}
    if kv:
        out["kv_cache_usage_peak"] = max(kv)
    if waiting:
        out["num_requests_waiting_peak"] = max(waiting)
    return out
