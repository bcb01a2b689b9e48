"""Read the server's Prometheus ``/metrics``: preemptions, KV usage, queue depth.

vLLM logs no line per preemption, so the counter delta over a run is the only
honest count; KV usage and the waiting queue are gauges, sampled during the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
WAITING = ("vllm:num_requests_waiting",)
RUNNING = ("vllm:num_requests_running",)


def parse(text: str) -> dict[str, float]:
    """Sum each metric's samples over its label sets: ``{name: value}``."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value_part = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        try:
            value = float(value_part)
        except ValueError:
            continue
        totals[name] = totals.get(name, 0.0) + value
    return totals


def first(values: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    """The value of the first of ``names`` the server exports (names moved across releases)."""
    for name in names:
        if name in values:
            return values[name]
    return None


@dataclass(frozen=True)
class Sample:
    """One scrape during a run, ``t`` seconds after its start."""

    t: float
    kv_cache_usage: float | None
    waiting: float | None
    running: float | None


@dataclass
class MetricsTimeline:
    """Counter snapshots around a run plus gauge samples during it."""

    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)

    def counters(self) -> dict[str, float]:
        """Server metrics of the run: preemptions delta and gauge peaks."""
        out: dict[str, float] = {}
        start, end = first(self.before, PREEMPTIONS), first(self.after, PREEMPTIONS)
        if start is not None and end is not None:
            out["preemptions"] = end - start
        kv = [s.kv_cache_usage for s in self.samples if s.kv_cache_usage is not None]
        waiting = [s.waiting for s in self.samples if s.waiting is not None]
        if kv:
            out["kv_cache_usage_peak"] = max(kv)
        if waiting:
            out["num_requests_waiting_peak"] = max(waiting)
        return out


async def scrape(session: aiohttp.ClientSession, base_url: str) -> dict[str, float]:
    """One scrape of ``/metrics``; empty when the server exports none."""
    async with session.get(f"{base_url}/metrics") as resp:
        if resp.status != 200:
            return {}
        return parse(await resp.text())


async def sample_until(
    session: aiohttp.ClientSession,
    base_url: str,
    timeline: MetricsTimeline,
    stop: asyncio.Event,
    t0: float,
    interval_s: float = 0.5,
) -> None:
    """Append gauge samples to ``timeline`` every ``interval_s`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            values = await scrape(session, base_url)
        except (aiohttp.ClientError, TimeoutError):
            values = {}
        timeline.samples.append(
            Sample(
                t=time.perf_counter() - t0,
                kv_cache_usage=first(values, KV_USAGE),
                waiting=first(values, WAITING),
                running=first(values, RUNNING),
            )
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
