"""A fake OpenAI-compatible completions server, for fast tests of parsing and statistics.

It is not vLLM and proves nothing about vLLM; the engine tests do that. It streams
``max_tokens`` chunks ``delay_s`` apart (or ``short_by`` fewer), like vLLM's wire format.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class FakeVllm:
    delay_s: float = 0.005
    short_by: int = 0
    preemptions: float = 0.0
    # a prefix cache that serves every token a prompt shares with the previous prompt
    # (enough for the counters' arithmetic: vLLM's own is block by block)
    prefix_cache: bool = False
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    _last_prompt: list = field(default_factory=list)
    fail_every: int = 0  # answer every n-th completion with HTTP 500 (0: never)
    stall_every: int = 0  # stop every n-th stream half-way, without closing it (0: never)
    requests: list[dict] = field(default_factory=list)
    # a server with a capacity: each token waits this much more per stream in flight,
    # so latency rises with the request rate (for the capacity search's plumbing)
    per_stream_s: float = 0.0
    _streams: int = 0
    # the histograms time each chunk by the wait it was given, not by the clock: what
    # the server reports is then the streams in flight alone, not the machine's pace
    nominal_timing: bool = False
    # when each content chunk was written (perf_counter, the client's clock too): what
    # the server itself streamed, for checks that must not depend on the machine's pace
    written: list[float] = field(default_factory=list)
    # vLLM's histograms as sums and counts of what this server timed itself: each
    # request's first chunk since its arrival, each later chunk since the one before
    ttft_sum: float = 0.0
    ttft_count: int = 0
    itl_sum: float = 0.0
    itl_count: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/completions", self.complete)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        return app

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model"}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": [hash(w) % 1000 for w in body["prompt"].split()]})

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            text='# HELP x\nvllm:num_preemptions_total{engine="0",model_name="m"} '
            f"{self.preemptions}\n"
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
            + (
                f'vllm:prefix_cache_queries_total{{engine="0"}} {self.prefix_queries}\n'
                f'vllm:prefix_cache_hits_total{{engine="0"}} {self.prefix_hits}\n'
                if self.prefix_cache
                else ""
            )
            + f'vllm:time_to_first_token_seconds_sum{{engine="0"}} {self.ttft_sum}\n'
            f'vllm:time_to_first_token_seconds_count{{engine="0"}} {self.ttft_count}\n'
            f'vllm:inter_token_latency_seconds_sum{{engine="0"}} {self.itl_sum}\n'
            f'vllm:inter_token_latency_seconds_count{{engine="0"}} {self.itl_count}\n'
        )

    async def complete(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()
        body = await request.json()
        self.requests.append(body)
        prompt = body.get("prompt")
        if self.prefix_cache and isinstance(prompt, list):
            shared = 0
            for a, b in zip(prompt, self._last_prompt, strict=False):
                if a != b:
                    break
                shared += 1
            self.prefix_queries += len(prompt)
            self.prefix_hits += shared
            self._last_prompt = prompt
        count = len(self.requests)
        if self.fail_every and count % self.fail_every == 0:
            return web.Response(status=500, text="Internal Server Error")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = body["max_tokens"] - self.short_by
        stall = self.stall_every and count % self.stall_every == 0
        self._streams += 1
        last = arrived
        try:
            for i in range(n):
                if stall and i == n // 2:
                    await asyncio.sleep(3600)  # a server that stops mid-stream
                wait = self.delay_s + self.per_stream_s * self._streams
                await asyncio.sleep(wait)
                chunk = {"choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
                now = last + wait if self.nominal_timing else time.perf_counter()
                if i == 0:
                    self.ttft_sum += now - arrived
                    self.ttft_count += 1
                else:
                    self.itl_sum += now - last
                    self.itl_count += 1
                last = now
                self.written.append(time.perf_counter())
        finally:
            self._streams -= 1
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


class ServerThread:
    """Runs a FakeVllm on 127.0.0.1 in a background thread."""

    def __init__(self, fake: FakeVllm) -> None:
        self.fake = fake
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        # a stalled stream (stall_every) is cancelled 1 s into the exit, not aiohttp's
        # 60 s: the thread outlived its 10 s join, 10 s of teardown
        runner = web.AppRunner(self.fake.app(), shutdown_timeout=1.0)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        # what aiohttp left after its timeout (the stalled streams) is cancelled here,
        # not destroyed pending when the process ends
        left = asyncio.all_tasks(self.loop)
        for task in left:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        self.loop.close()

    def __enter__(self) -> str:
        self._thread.start()
        self._ready.wait(10)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
