"""Streaming OpenAI-completions client that times every streamed chunk.

Requests use ``ignore_eos`` and ``max_tokens`` so output lengths are exact; a
response with fewer tokens than asked is a failure, never a shorter success.
Timing follows ``vllm bench serve``: every chunk that carries a choice counts,
even one whose text is empty (byte-level BPE tokenizers stream a partial
character that way), and the end-to-end latency ends at the last such chunk,
not at ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from pytest_vllm_perf.core.records import RequestRecord

__all__ = ["DONE", "RequestSpec", "StreamState", "finish", "parse_sse", "payload", "send"]

DONE: Final = object()


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: a prompt (token ids or text) and an exact output length."""

    cls: str
    prompt: list[int] | str
    prompt_tokens: int
    output_tokens: int
    turn: int = 1


@dataclass
class StreamState:
    """Mutable timings of one stream while it is read."""

    start: float
    first: float | None = None
    last: float | None = None
    itl: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    chunks: int = 0
    error: str | None = None

    def on_event(self, event: dict[str, Any], now: float) -> None:
        """Account for one SSE event received at ``now`` (perf_counter seconds)."""
        if "error" in event and not event.get("choices"):
            self.error = _error_text(event["error"])
            return
        if event.get("usage"):
            self.usage = event["usage"]
        if not event.get("choices"):
            return  # the usage-only chunk at the end carries no token
        self.chunks += 1
        if self.first is None:
            self.first = now
        elif self.last is not None:
            self.itl.append(now - self.last)
        self.last = now


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def parse_sse(lines: list[bytes]) -> Iterator[dict[str, Any] | object]:
    """Decode ``data:`` lines of a server-sent event stream; yields DONE at ``[DONE]``."""
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(b":") or not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            yield DONE
            return
        event = json.loads(payload)
        if not isinstance(event, dict):
            raise ValueError(f"stream event is not an object: {payload[:80]!r}")
        yield event


def payload(spec: RequestSpec, model: str) -> dict[str, Any]:
    """The JSON body for a streaming completion with an exact output length."""
    return {
        "model": model,
        "prompt": spec.prompt,
        "max_tokens": spec.output_tokens,
        "min_tokens": spec.output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "skip_special_tokens": False,
    }


async def send(
    session: aiohttp.ClientSession, base_url: str, model: str, spec: RequestSpec, t0: float
) -> RequestRecord:
    """Send one streaming request and return its record; never raises for request errors.

    Anything that goes wrong while one request streams (HTTP errors, timeouts, an
    overlong line, bytes that are not JSON or UTF-8) makes that request a failure
    with its error text; only cancellation propagates.
    """
    state = StreamState(start=time.perf_counter())
    try:
        async with session.post(f"{base_url}/v1/completions", json=payload(spec, model)) as resp:
            if resp.status != 200:
                body = (await resp.text(errors="replace"))[:300]
                state.error = f"HTTP {resp.status}: {body}"
            else:
                await _read_stream(resp, state)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # contained: one request's failure, never the pass's
        state.error = f"{type(exc).__name__}: {exc}"
    return finish(spec, state, t0)


async def _read_stream(resp: aiohttp.ClientResponse, state: StreamState) -> None:
    done = False
    async for raw in resp.content:
        for event in parse_sse([raw]):
            if event is DONE:
                done = True
                break
            assert isinstance(event, dict)
            state.on_event(event, time.perf_counter())
    if not done and state.error is None:
        state.error = "stream ended without [DONE]"


def finish(spec: RequestSpec, state: StreamState, t0: float) -> RequestRecord:
    """Turn a finished stream into a record, classifying short or broken responses."""
    end = time.perf_counter() if state.last is None else state.last
    usage = state.usage or {}
    output = int(usage.get("completion_tokens", state.chunks))
    prompt = int(usage.get("prompt_tokens", spec.prompt_tokens))
    error = state.error
    if error is None and output != spec.output_tokens:
        error = f"short response: {output} of {spec.output_tokens} tokens"
    return RequestRecord(
        cls=spec.cls,
        start=state.start - t0,
        ttft=None if state.first is None else state.first - state.start,
        itl=tuple(state.itl),
        e2el=end - state.start,
        prompt_tokens=prompt,
        output_tokens=output,
        expected_output_tokens=spec.output_tokens,
        error=error,
        turn=spec.turn,
    )
