"""The metric registry: every metric declared once, with its unit, statistic and direction.

Thresholds, statistics, verdicts and every report read this table, so adding a
metric means adding one entry here. Names carry their unit (``itl_p99_ms``), as in
``vllm bench serve``, whose key for each metric is recorded too.

Request metrics exist for all requests (``ttft_p99_ms``) and per request class
(``chat.ttft_p99_ms``); server metrics come from ``/metrics`` and exist only for
the whole run.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pytest_vllm_perf.core.errors import ThresholdError
from pytest_vllm_perf.core.tolerances import AB_TOLERANCES, PLATFORM_TOLERANCES
from pytest_vllm_perf.core.tolerances import DEFAULT_TOLERANCES as _TOLERANCES

__all__ = [
    "AB_TOLERANCES",
    "COMPARED",
    "LATENCIES",
    "METRICS",
    "PERCENTILES",
    "SERVER_COMPARED",
    "SERVER_MEANS",
    "SUMMARY_COLUMNS",
    "MetricDef",
    "Source",
    "Statistic",
    "default_tolerances",
    "from_bench_serve_key",
    "metric",
    "metrics_from_report",
    "metrics_to_report",
    "report_number",
    "split_key",
    "threshold_target",
]

# "search": a figure of a capacity search over passes at several rates, not of a pass
Source = Literal["request", "server", "search"]
# how a metric's value comes from its source: a latency statistic over a pass's
# requests, a count or rate of them, a counter's delta (or its rate, or a ratio of
# two), a gauge's peak, or a capacity search's fit
Statistic = Literal["mean", "p50", "p90", "p99", "p999", "max", "count", "rate", "counter",
                    "counter rate", "counter ratio", "peak", "fit"]  # fmt: skip
LATENCIES: Final = ("ttft", "itl", "tpot", "e2el")
LATENCY_STATS: Final = ("mean", "p50", "p90", "p99", "p999", "max")
PERCENTILES: Final[Mapping[str, float]] = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
_BENCH_SERVE_STAT: Final = {
    "mean": "mean",
    "p50": "median",
    "p90": "p90",
    "p99": "p99",
    "p999": "p99.9",
    "max": "max",
}
_LATENCY_LABEL: Final = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2el": "E2EL"}
# the latencies in the summary table, after the request counts (columns 0 and 1)
_LATENCY_COLUMN: Final = {
    "ttft_p50_ms": 2,
    "ttft_p99_ms": 3,
    "itl_p50_ms": 4,
    "itl_p99_ms": 5,
    "itl_max_ms": 6,
    "tpot_mean_ms": 7,
}


@dataclass(frozen=True)
class MetricDef:
    """One metric: what it measures, in which unit, and how a change of it is judged.

    ``tolerance`` is the default relative change below which a difference is not
    worth failing a build; None means the gate never compares this metric. ``column``
    is its place among the summary table's metric columns (None: not one of them).
    """

    key: str
    label: str
    unit: str
    source: Source
    statistic: Statistic
    field: str | None = None
    higher_is_better: bool = False
    tolerance: float | None = None
    bench_serve_key: str | None = None
    fmt: str = "{:.1f}"
    column: int | None = None

    @property
    def per_class(self) -> bool:
        return self.source == "request"


def _latency(field: str, stat: Statistic) -> MetricDef:
    key = f"{field}_{stat}_ms"
    return MetricDef(
        key=key,
        label=f"{_LATENCY_LABEL[field]} {stat}",
        unit="ms",
        source="request",
        statistic=stat,
        field=field,
        tolerance=_TOLERANCES.get(key),
        bench_serve_key=f"{_BENCH_SERVE_STAT[stat]}_{field}_ms",
        fmt="{:.1f}",
        column=_LATENCY_COLUMN.get(key),
    )


# The engine's own means over a pass, from its histograms' sums and counts (module
# ``load.scrape``): the metric key -> the histogram's counter name and its label.
SERVER_MEANS: Final[Mapping[str, tuple[str, str]]] = {
    "server_ttft_mean_ms": ("server_ttft", "server TTFT mean"),
    "server_itl_mean_ms": ("server_itl", "server ITL mean"),
    "server_tpot_mean_ms": ("server_tpot", "server TPOT mean"),
    "server_queue_mean_ms": ("server_queue", "server queue mean"),
}


def _server_mean(key: str, label: str) -> MetricDef:
    return MetricDef(key, label, "ms", "server", "mean", tolerance=_TOLERANCES.get(key))


def _build() -> dict[str, MetricDef]:
    """Every metric (a data table: its length is its entries, exempt from the 60-line
    rule for functions, as docs/architecture.md names it)."""
    out = {m.key: m for m in (_latency(f, s) for f in LATENCIES for s in LATENCY_STATS)}
    extra = (
        MetricDef("completed", "completed", "requests", "request", "count", fmt="{:.0f}", column=0),
        MetricDef("failed", "failed", "requests", "request", "count", fmt="{:.0f}", column=1),
        MetricDef(
            "output_throughput",
            "out tok/s",
            "tok/s",
            "request",
            "rate",
            field="tokens",
            higher_is_better=True,
            tolerance=_TOLERANCES["output_throughput"],
            bench_serve_key="output_throughput",
            column=8,
        ),
        MetricDef(
            "request_throughput",
            "req/s",
            "req/s",
            "request",
            "rate",
            higher_is_better=True,
            tolerance=_TOLERANCES["request_throughput"],
            bench_serve_key="request_throughput",
            fmt="{:.2f}",
        ),
        # passes whose streams came in bursts (a starved API server): their ITL and
        # TPOT are left out, and a verdict compares how often each side streamed so
        MetricDef("bursty_passes", "bursty", "passes", "request", "count", fmt="{:.0f}"),
        MetricDef("preemptions", "preempt", "count", "server", "counter", fmt="{:.0f}", column=9),
        MetricDef(
            "preemptions_per_s",
            "preempt/s",
            "1/s",
            "server",
            "counter rate",
            tolerance=_TOLERANCES["preemptions_per_s"],
            fmt="{:.2f}",
        ),
        # prompt tokens the prefix cache served, of those looked up (its counters'
        # deltas over the pass): what multi-turn conversations and shared prefixes reuse
        MetricDef(
            "prefix_cache_hit_rate",
            "prefix hit",
            "fraction",
            "server",
            "counter ratio",
            higher_is_better=True,
            fmt="{:.2f}",
        ),
        # the highest rate of one open-loop class at which an SLO holds
        # (``vllm_perf.capacity``): a capacity test's one metric
        MetricDef(
            "capacity_rps",
            "capacity",
            "req/s",
            "search",
            "fit",
            higher_is_better=True,
            tolerance=_TOLERANCES["capacity_rps"],
            fmt="{:.3g}",
        ),
        # the GPUs' energy over a pass (NVML, ``serving.energy``): reported beside every
        # test where measured, gated where a test or profile names it (``gate=``)
        MetricDef("energy_j", "energy", "J", "server", "counter", fmt="{:.0f}"),
        MetricDef(
            "energy_per_1k_tokens_j",
            "J/1k tok",
            "J",
            "server",
            "counter ratio",
            tolerance=_TOLERANCES["energy_per_1k_tokens_j"],
            fmt="{:.1f}",
        ),
        MetricDef("kv_cache_usage_peak", "KV peak", "fraction", "server", "peak", fmt="{:.2f}"),
        MetricDef(
            "num_requests_waiting_peak", "waiting peak", "requests", "server", "peak", fmt="{:.0f}"
        ),
    )
    out.update({m.key: m for m in extra})
    out.update({k: _server_mean(k, label) for k, (_, label) in SERVER_MEANS.items()})
    return out


METRICS: Final[Mapping[str, MetricDef]] = _build()
# The summary table's metric columns, in order: a metric joins it by its ``column``.
SUMMARY_COLUMNS: Final = tuple(
    key for _, key in sorted((m.column, m.key) for m in METRICS.values() if m.column is not None)
)
_BY_BENCH_SERVE: Final = {m.bench_serve_key: k for k, m in METRICS.items() if m.bench_serve_key}

# Compared with the baseline and shown, whether or not a workload gates on them.
COMPARED: Final = (
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "tpot_mean_ms",
    "e2el_p99_ms",
    "output_throughput",
    "preemptions_per_s",
)
# Compared and shown beside the client's figures where the server exports them, not
# gated: on the H200 the engine's mean ITL and TPOT were as noisy per pass as the
# client's (bench/results/h200/plant-l33/pass-noise.txt), and its ITL p50 steadier.
# GPU energy per 1,000 output tokens likewise, where NVML measured every pass.
SERVER_COMPARED: Final = (
    "server_ttft_mean_ms",
    "server_itl_mean_ms",
    "server_tpot_mean_ms",
    "energy_per_1k_tokens_j",
)


def split_key(key: str) -> tuple[str | None, str]:
    """``chat.itl_p99_ms`` -> (``chat``, ``itl_p99_ms``); ``ttft_p50_ms`` -> (None, ...)."""
    cls, _, name = key.rpartition(".")
    return (cls or None), name


def from_bench_serve_key(key: str) -> str:
    """A report's key (``vllm bench serve`` names, ``chat.p99.9_itl_ms``) back to ours.

    A class prefix ends at the first dot; ``p99.9_itl_ms`` has a dot of its own.
    """
    if key in _BY_BENCH_SERVE or key in METRICS:
        return _BY_BENCH_SERVE.get(key, key)
    cls, _, name = key.partition(".")
    return f"{cls}.{_BY_BENCH_SERVE.get(name, name)}" if name else key


def metrics_to_report(metrics: Mapping[str, float]) -> dict[str, float | str | None]:
    """Our metric names -> ``vllm bench serve`` result keys, for a JSON report. JSON has
    no NaN or infinity: NaN is written as null, an infinity as its string."""
    out: dict[str, float | str | None] = {}
    for key, value in metrics.items():
        cls, name = split_key(key)
        found = METRICS.get(name)
        name = found.bench_serve_key or name if found else name
        out[f"{cls}.{name}" if cls else name] = report_number(value)
    return out


def report_number(value: float) -> float | str | None:
    """A figure as a JSON report holds it: None for NaN, a string for infinities."""
    return None if math.isnan(value) else (str(value) if math.isinf(value) else value)


def metrics_from_report(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A report's metrics (``metrics_to_report``'s) back to our names and floats: null -> NaN,
    "inf" -> infinity; a field that is no figure (a bool, a list, other text) is left out."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if value is None:
            out[from_bench_serve_key(key)] = math.nan
        elif isinstance(value, int | float | str) and not isinstance(value, bool):
            try:
                out[from_bench_serve_key(key)] = float(value)
            except ValueError:
                continue
    return out


def metric(key: str) -> MetricDef:
    """The definition of ``[CLASS.]METRIC``; ThresholdError naming the key if there is none."""
    cls, name = split_key(key)
    found = METRICS.get(name)
    if found is None or (cls is not None and not found.per_class):
        allowed = sorted(k for k, m in METRICS.items() if m.per_class or not cls)
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        kind = "request metrics (per class)" if cls else "metrics"
        raise ThresholdError(f"unknown metric {key!r}; {hint}{kind}: {', '.join(allowed)}")
    return found


def threshold_target(key: str) -> tuple[str, bool]:
    """A threshold key ``[CLASS.][min_]METRIC`` -> (the metric key it reads, is a lower bound)."""
    cls, name = split_key(key)
    lower = name.startswith("min_")
    target = f"{cls}.{name.removeprefix('min_')}" if cls else name.removeprefix("min_")
    try:
        metric(target)
    except ThresholdError as exc:
        raise ThresholdError(
            f"unknown threshold {key!r}: {exc} (prefix 'min_' for a lower bound)"
        ) from None
    return target, lower


def default_tolerances(platform: str, ab: bool = False) -> dict[str, float]:
    """The tolerances a platform starts from, before ini, profile and marker overrides;
    ``ab``: an A/B run's, tighter where one machine's A/A holds a metric steady."""
    out = {**_TOLERANCES, **PLATFORM_TOLERANCES.get(platform, {})}
    if ab:
        out.update(AB_TOLERANCES.get(platform, {}))
    return out


def tolerance_for(key: str, tolerances: Mapping[str, float]) -> float | None:
    """A compared key's tolerance: its own entry, else its metric's (``chat.x`` -> ``x``)."""
    if key in tolerances:
        return tolerances[key]
    _, name = split_key(key)
    return tolerances.get(name, METRICS[name].tolerance if name in METRICS else None)


def validate_tolerances(tolerances: Mapping[str, float]) -> None:
    """ThresholdError for a key that names no comparable metric, or a tolerance that is
    no fraction between 0 and 1."""
    for key, value in tolerances.items():
        found = metric(key)
        if found.tolerance is None:
            comparable = ", ".join(k for k, m in METRICS.items() if m.tolerance is not None)
            raise ThresholdError(
                f"tolerance {key!r}: not a compared metric; compared: {comparable}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ThresholdError(f"tolerance {key!r}: expected a number, got {value!r}")
        if not value >= 0:
            raise ThresholdError(f"tolerance {key!r}: expected a fraction >= 0, got {value!r}")
        if value > 1:  # ``itl_p99_ms: 15`` meant 15%, and accepted it gated nothing
            raise ThresholdError(
                f"tolerance {key!r}: expected a fraction of the baseline (0.15 for 15%), "
                f"at most 1, got {value!r}"
            )
