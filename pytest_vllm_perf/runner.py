"""Drive a workload against a running server and collect what it measured.

Closed-loop users and Poisson arrivals run side by side in one event loop; the
server's ``/metrics`` are read before, during and after. Warmup requests of
every class are sent first and excluded. A run is one or more passes of the
workload back to back (``repeat``): passes are what a regression verdict
compares, and their results are also pooled into one set of metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pytest_vllm_perf import client, metrics, prompts, stats
from pytest_vllm_perf.records import Repetition, RequestRecord
from pytest_vllm_perf.workload import RequestClass, Workload

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunResult:
    """One workload run: its passes, server counters and the metrics of all passes pooled."""

    workload: Workload
    repetitions: tuple[Repetition, ...]
    counters: dict[str, float]
    samples: tuple[metrics.Sample, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def records(self) -> tuple[RequestRecord, ...]:
        return tuple(r for rep in self.repetitions for r in rep.records)

    @property
    def duration_s(self) -> float:
        """Measured time, summed over passes (the throughput denominator)."""
        return sum(rep.duration_s for rep in self.repetitions)

    @property
    def failures(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]


def summarize(
    workload: Workload,
    records: Sequence[RequestRecord],
    duration_s: float,
    counters: dict[str, float],
) -> dict[str, float]:
    """Flat metrics: all requests unprefixed, each class as ``cls.metric``, server counters."""
    out = stats.summarize(records, duration_s)
    for cls in workload.classes:
        group = [r for r in records if r.cls == cls.name]
        out.update({f"{cls.name}.{k}": v for k, v in stats.summarize(group, duration_s).items()})
    out.update(counters)
    return out


@dataclass
class _Run:
    workload: Workload
    session: aiohttp.ClientSession
    base_url: str
    model: str
    factory: prompts.PromptFactory
    t0: float = 0.0
    deadline: float = 0.0
    label: str = ""
    records: list[RequestRecord] = field(default_factory=list)
    inflight: int = 0

    def spec(self, cls: RequestClass, rng: random.Random) -> client.RequestSpec:
        prompt: list[int] | str = (
            self.factory.text(cls.prompt_tokens, rng)
            if cls.text
            else self.factory.ids(cls.prompt_tokens, rng)
        )
        return client.RequestSpec(cls.name, prompt, cls.prompt_tokens, cls.output_tokens)

    async def one(self, cls: RequestClass, rng: random.Random) -> None:
        self.inflight += 1
        try:
            record = await client.send(
                self.session, self.base_url, self.model, self.spec(cls, rng), self.t0
            )
        finally:
            self.inflight -= 1
        self.records.append(record)

    async def user(self, cls: RequestClass, rng: random.Random) -> None:
        while time.perf_counter() < self.deadline:
            await self.one(cls, rng)

    async def arrivals(self, cls: RequestClass, rng: random.Random) -> None:
        tasks: list[asyncio.Task[None]] = []
        next_at = time.perf_counter() + rng.expovariate(cls.rate)
        while next_at < self.deadline:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            tasks.append(asyncio.create_task(self.one(cls, random.Random(rng.random()))))
            next_at += rng.expovariate(cls.rate)
        await asyncio.gather(*tasks)


async def run(
    workload: Workload,
    base_url: str,
    model: str,
    progress: Progress | None = None,
    progress_every_s: float = 5.0,
    repeat: int = 1,
) -> RunResult:
    """Run ``workload`` ``repeat`` times back to back against ``base_url``."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    timeout = aiohttp.ClientTimeout(total=workload.request_timeout_s)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        factory = await prompts.build(session, base_url, model)
        state = _Run(workload, session, base_url, model, factory)
        await _warmup(state)
        timeline = metrics.MetricsTimeline(before=await metrics.scrape(session, base_url))
        stop = asyncio.Event()
        state.t0 = time.perf_counter()
        background = [
            asyncio.create_task(metrics.sample_until(session, base_url, timeline, stop, state.t0)),
            asyncio.create_task(_report(state, stop, progress, progress_every_s)),
        ]
        reps: list[Repetition] = []
        try:
            for i in range(repeat):
                state.label = f" pass {i + 1}/{repeat}" if repeat > 1 else ""
                reps.append(await _pass(state, i))
        finally:
            stop.set()
            await asyncio.gather(*background)
        timeline.after = await metrics.scrape(session, base_url)
    counters = timeline.counters()
    result = RunResult(workload, tuple(reps), counters, tuple(timeline.samples))
    metrics_ = summarize(workload, result.records, result.duration_s, counters)
    return dataclasses.replace(result, metrics=metrics_)


async def _pass(state: _Run, index: int) -> Repetition:
    """One pass of the workload; records are timed from the start of the whole run."""
    start = time.perf_counter()
    state.deadline = start + state.workload.duration_s
    state.records = []
    # Each pass draws its own seeded arrivals and prompts, so passes are replicates,
    # not copies (a copy would also hit the prefix cache the previous pass filled).
    await _drive(state, state.workload.seed + index)
    records = tuple(sorted(state.records, key=lambda r: r.start))
    return Repetition(records, time.perf_counter() - start, start - state.t0)


async def _warmup(state: _Run) -> None:
    """Send the warmup requests of every class shape and throw their records away.

    The first request of a shape pays one-off costs (allocations, kernel setup);
    warming every class keeps them out of the first pass's tail latencies.
    """
    rng = random.Random(state.workload.seed - 1)
    state.t0 = time.perf_counter()
    for _ in range(state.workload.warmup_requests):
        for cls in state.workload.classes:
            await state.one(cls, rng)
    state.records.clear()


async def _drive(state: _Run, seed: int) -> None:
    rng = random.Random(seed)
    jobs: list[Any] = []
    for cls in state.workload.classes:
        if cls.users:
            jobs += [state.user(cls, random.Random(rng.random())) for _ in range(cls.users)]
        else:
            jobs.append(state.arrivals(cls, random.Random(rng.random())))
    await asyncio.gather(*jobs)


async def _report(
    state: _Run, stop: asyncio.Event, progress: Progress | None, every: float
) -> None:
    if progress is None:
        return
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            total = state.workload.duration_s
            elapsed = time.perf_counter() - (state.deadline - total)
            failed = sum(not r.ok for r in state.records)
            progress(
                f"{state.workload.name}{state.label}: {elapsed:.0f}/{total:.0f}s, "
                f"{len(state.records)} done, {failed} failed, {state.inflight} in flight"
            )
