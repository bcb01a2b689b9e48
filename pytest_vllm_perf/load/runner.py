"""Drive a workload against a running server and record what every request saw.

Closed-loop users and Poisson arrivals run side by side in one event loop.
Warmup requests of every class are sent first and thrown away. A run is one or
more passes back to back (``repeat``); pass k replays the seeded schedule
``seed + k``, so pass k of two runs can be paired. Each pass:

- starts its closed-loop users staggered over ``ramp_s`` and leaves requests
  started during that ramp-up out of its latencies (they met a half-loaded server),
  or, in the bench-serve shape, starts them all at once and leaves nothing out;
- counts throughput over a window, not to the last response (``PassRecord``);
- reads the server's preemption counter at its start and end (outside the timed
  window), so each pass has its own count;
- runs with the garbage collector frozen, as ``vllm bench serve`` does, so a
  collection pause is never timed as an inter-token gap;
- says so when its open-loop arrivals outpaced the server (``overloaded``): the
  latencies of such a pass measure the length of a growing queue, not the config.

This module records; statistics are computed from the records one layer up.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from pytest_vllm_perf.core import trace
from pytest_vllm_perf.core.records import GaugeReading, PassRecord, Progress, RequestRecord
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import boundary, client, prompts, scrape
from pytest_vllm_perf.serving.energy import EnergyMeter

__all__ = ["GAUGES_EVERY_S", "Recording", "run"]

# Reading /metrics costs the API server time: on the 2-core CPU engine, reading it
# every 0.5 s raised decode p99 ITL x1.32 (95% CI x1.18..x1.50) against not reading
# it, in alternating passes of one boot (bench/results/gate_checks-cpu-decode-0.5s.md).
GAUGES_EVERY_S = 2.0


@dataclass(frozen=True)
class Recording:
    """What a run recorded: its passes and the server's gauges over all of them."""

    passes: tuple[PassRecord, ...]
    gauges: tuple[GaugeReading, ...]


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
    alive: Callable[[], bool] | None = None
    dead: bool = False
    energy: EnergyMeter | None = None  # the server's GPUs' energy, read with the counters

    def spec(self, cls: RequestClass, rng: random.Random) -> client.RequestSpec:
        if cls.trace:  # a warmup request: the trace's first request's shape
            return self.trace_spec(cls, trace.load(cls.trace)[0], rng, -1)
        if cls.shared_prompt:  # the same draw every time: the prefix cache serves it
            rng = random.Random(f"{self.workload.seed}:{cls.name}")
        prompt: list[int] | str = (
            self.factory.text(cls.prompt_tokens, rng)
            if cls.text
            else self.factory.ids(cls.prompt_tokens, rng)
        )
        return client.RequestSpec(cls.name, prompt, cls.prompt_tokens, cls.output_tokens)

    def trace_spec(
        self, cls: RequestClass, req: trace.TraceRequest, rng: random.Random, seed: int | str
    ) -> client.RequestSpec:
        """A traced request: its hash blocks drawn from seeds of (pass, block id), so
        requests of one pass that share a block share its tokens, and the rest drawn
        fresh; a pass does not reuse the previous pass's blocks (a copy would hit the
        prefix cache that pass filled)."""
        ids: list[int] = []
        for block in req.hash_ids:
            if len(ids) >= req.input_tokens:
                break
            n = min(trace.BLOCK_TOKENS, req.input_tokens - len(ids))
            ids += self.factory.ids(n, random.Random(f"{seed}:{cls.name}:{block}"))
        ids += self.factory.ids(req.input_tokens - len(ids), rng)
        return client.RequestSpec(cls.name, ids, req.input_tokens, req.output_tokens)

    async def one(
        self, cls: RequestClass, rng: random.Random, spec: client.RequestSpec | None = None
    ) -> None:
        self.inflight += 1
        try:
            record = await client.send(
                self.session, self.base_url, self.model, spec or self.spec(cls, rng), self.t0
            )
        finally:
            self.inflight -= 1
        self.records.append(record)
        if not record.ok and self.alive is not None and not self.dead and not self.alive():
            # the server died: end the run now rather than fail requests until the deadline
            self.dead = True
            self.deadline = 0.0

    async def user(self, cls: RequestClass, rng: random.Random, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if cls.turns > 1:
            await self.conversations(cls, rng)
            return
        while time.perf_counter() < self.deadline:
            await self.one(cls, rng)

    async def conversations(self, cls: RequestClass, rng: random.Random) -> None:
        """Conversations of ``cls.turns`` turns, back to back: turn k sends the history
        (each earlier message and a stand-in reply of ``output_tokens`` ids drawn from
        the same pool: the model's own reply is not known as ids) plus a new message.
        vLLM's prefix cache can serve every full block of the earlier turns."""
        while time.perf_counter() < self.deadline:
            ids: list[int] = []  # the history, as token ids
            words = ""  # or as text (cls.text)
            for turn in range(1, cls.turns + 1):
                if time.perf_counter() >= self.deadline:
                    return
                spec: client.RequestSpec
                if cls.text:
                    words = f"{words} {self.factory.text(cls.prompt_tokens, rng)}".strip()
                    tokens = round(len(words.split()) * self.factory.tokens_per_word)
                    spec = client.RequestSpec(cls.name, words, tokens, cls.output_tokens, turn)
                    await self.one(cls, rng, spec)
                    words = f"{words} {self.factory.text(cls.output_tokens, rng)}"
                else:
                    ids = ids + self.factory.ids(cls.prompt_tokens, rng)
                    spec = client.RequestSpec(cls.name, ids, len(ids), cls.output_tokens, turn)
                    await self.one(cls, rng, spec)
                    ids = ids + self.factory.ids(cls.output_tokens, rng)

    async def replay(self, cls: RequestClass, rng: random.Random, seed: int | str) -> None:
        """Send the trace's requests at their recorded times (scaled) from the pass's
        start, those scheduled before its deadline (a late event loop sends them late,
        never drops them)."""
        start = self.deadline - self.workload.duration_s
        tasks: list[asyncio.Task[None]] = []
        for req in trace.load(cls.trace):
            at = start + req.arrival_s * cls.time_scale
            if at >= self.deadline:
                break
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            spec = self.trace_spec(cls, req, random.Random(rng.random()), seed)
            tasks.append(asyncio.create_task(self.one(cls, rng, spec)))
        await asyncio.gather(*tasks)

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
    gauges_every_s: float | None = GAUGES_EVERY_S,
    first_index: int = 0,
    alive: Callable[[], bool] | None = None,
    settle: int = 0,
    energy: EnergyMeter | None = None,
) -> Recording:
    """Run ``workload`` ``repeat`` times back to back against ``base_url``.

    ``settle`` passes run first, at full load, and are thrown away (schedules -1, -2,
    ..., never measured, so that their prompts are not in the prefix cache of a
    measured pass); progress says how many requests they failed. On the H200 the first
    pass after the boots ran 2.5-4% slower on ITL p50 than every later pass of the same
    server, in each of the three planted A/B runs (bench/results/h200/plant/*/ab.json:
    base pass 1 5.30 ms against 5.15-5.19), the warmup requests notwithstanding, and
    that one pair was the outlier of every gated metric.

    The passes replay schedules ``first_index`` .. ``first_index + repeat - 1``: an
    A/B run measures pass k on each side in turn (``first_index=k, repeat=1``).
    ``alive`` says whether the server process is still up; when a request fails and
    it is not, the run ends at once (the caller then reports the dead server) instead
    of failing requests until the pass's deadline.

    ``gauges_every_s`` None reads no gauges during the run (for checking that
    reading them does not move the latencies; see bench/gate_power.py). ``energy``
    is read at each pass's boundaries with the server's counters (``energy_j``).
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    timeout = aiohttp.ClientTimeout(total=workload.request_timeout_s)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        factory = await prompts.build(session, base_url, model)
        state = _Run(workload, session, base_url, model, factory, alive=alive, energy=energy)
        await _warmup(state)
        stop = asyncio.Event()
        reporter = asyncio.create_task(_report(state, stop, progress, progress_every_s))
        try:
            await _settle(state, settle, progress)  # progress goes on through it
            return await _measured(state, range(first_index, first_index + repeat), gauges_every_s)
        finally:
            stop.set()
            await reporter


async def _measured(state: _Run, indices: range, gauges_every_s: float | None) -> Recording:
    """The measured passes, the gauges read through them (unless ``gauges_every_s`` is
    None) and the garbage collector frozen; until the server is seen dead."""
    passes: list[PassRecord] = []
    state.t0 = time.perf_counter()
    sampler = scrape.GaugeSampler(state.base_url, state.t0, gauges_every_s or GAUGES_EVERY_S)
    with contextlib.ExitStack() as stack:
        if gauges_every_s is not None:
            stack.enter_context(sampler)
        stack.enter_context(_frozen_gc())
        for i in indices:
            if state.dead:  # died in the settle pass: measure() reports it
                break
            state.label = f" pass {i + 1}/{len(indices)}" if len(indices) > 1 else ""
            passes.append(await _pass(state, i))
            if state.dead:
                break
    return Recording(tuple(passes), tuple(sampler.readings))


@contextlib.contextmanager
def _frozen_gc() -> Iterator[None]:
    """No garbage collection while requests are timed (as ``vllm bench serve`` does)."""
    gc.collect()
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()


async def _pass(state: _Run, index: int) -> PassRecord:
    """One pass of the workload; records are timed from the start of the whole run."""
    before = await asyncio.to_thread(boundary.boundary, state.base_url, state.energy)
    started_unix = time.time()
    start = time.perf_counter()
    workload = state.workload
    state.deadline = start + workload.duration_s
    state.records = []
    # Each pass draws its own seeded arrivals and prompts, so passes are replicates,
    # not copies (a copy would also hit the prefix cache the previous pass filled).
    # a settle pass (index < 0) draws from a seed of its own: random.Random(-1) is
    # random.Random(1), so seed + index would replay pass 1's prompts for a seed of 0
    lags: list[float] = []
    done = asyncio.Event()
    monitor = asyncio.create_task(_loop_lag(done, lags))
    try:
        seed = workload.seed + index if index >= 0 else f"{workload.seed}:settle{index}"
        await _drive(state, seed)
    finally:
        done.set()
        await monitor
    ended = time.perf_counter()
    after = await asyncio.to_thread(boundary.boundary, state.base_url, state.energy, True)
    ramp = workload.effective_ramp_s
    ramp_end = start - state.t0 + ramp
    ordered = sorted(state.records, key=lambda r: r.start)
    kept = tuple(r for r in ordered if r.start >= ramp_end)
    # steady: the window ends at the deadline, when users stop sending and the
    # drain begins; bench-serve: at the last response, as vllm bench serve's
    window_s = ended - start if workload.shape == "bench-serve" else workload.duration_s - ramp
    return PassRecord(
        records=kept,
        duration_s=window_s,
        start_s=start - state.t0,
        index=index,
        counters=boundary.pass_deltas(before, after),
        ramp_s=ramp,
        ramp_requests=len(ordered) - len(kept),
        drain_s=max(0.0, ended - state.deadline),
        overloaded=boundary.overload(workload, kept),
        ramp_records=tuple(r for r in ordered if r.start < ramp_end),
        elapsed_s=ended - start,
        client_lag_p99_ms=1000 * boundary.p99(lags),
        started_unix=started_unix,
    )


# How often the lag monitor wakes: 100 times a second costs the client nothing it
# would notice, and a lag of a few ms (the H200's ITL p50 is 5.2-5.6 ms) still shows.
LAG_EVERY_S: Final = 0.01


async def _loop_lag(done: asyncio.Event, lags: list[float]) -> None:
    """How late the event loop wakes from a sleep, for as long as the pass drives load."""
    while not done.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(LAG_EVERY_S)
        lags.append(max(0.0, time.perf_counter() - asked - LAG_EVERY_S))


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


async def _settle(state: _Run, passes: int, progress: Progress | None) -> None:
    """Run ``passes`` unmeasured passes at full load (``run``'s ``settle``)."""
    for j in range(passes):
        if state.dead:
            break
        state.label = " settling"
        record = await _pass(state, -1 - j)
        if progress is not None:
            failed = sum(1 for r in (*record.ramp_records, *record.records) if r.error)
            progress(
                f"{state.workload.name}: settle pass {j + 1}/{passes} thrown away "
                f"({len(record.ramp_records) + len(record.records)} requests, {failed} failed)"
            )
    state.label = ""


async def _drive(state: _Run, seed: int | str) -> None:
    rng = random.Random(seed)
    ramp = state.workload.effective_ramp_s
    jobs: list[Any] = []
    for cls in state.workload.classes:
        if cls.users:
            jobs += [
                state.user(cls, random.Random(rng.random()), ramp * j / cls.users)
                for j in range(cls.users)
            ]  # bench-serve's ramp is 0: every user starts at once
        elif cls.trace:
            jobs.append(state.replay(cls, random.Random(rng.random()), seed))
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
            # "6/5s" read as 6 s of a 5-s pass: past the deadline it is the drain
            where = (
                f"{elapsed:.0f} s of {total:.0f} s"
                if elapsed <= total
                else f"draining, {elapsed - total:.0f} s past its {total:.0f} s"
            )
            progress(
                f"{state.workload.name}{state.label}: {where}, "
                f"{len(state.records)} done, {failed} failed, {state.inflight} in flight"
            )
