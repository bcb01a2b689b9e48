"""A streaming relay that stretches every inter-chunk gap by a known factor.

It makes a regression of known size mechanically: ITL through the relay is the
server's ITL times ``factor`` (TTFT is unchanged), whatever the server does. The
gate-power benchmark uses it to measure how often a real regression is caught.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web


async def _timestamp_lines(
    up: aiohttp.ClientResponse, out: asyncio.Queue[tuple[float, bytes] | None]
) -> None:
    """Queue each upstream line with its arrival time, however slowly they are relayed."""
    buffer = b""
    async for chunk in up.content.iter_any():
        now = time.perf_counter()
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            out.put_nowait((now, line + b"\n"))
    if buffer:
        out.put_nowait((time.perf_counter(), buffer))
    out.put_nowait(None)


def app(upstream: str, factor: float) -> web.Application:
    session: dict[str, aiohttp.ClientSession] = {}

    async def start(_app: web.Application) -> None:
        session["s"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))

    async def stop(_app: web.Application) -> None:
        await session["s"].close()

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        url = upstream + request.path_qs
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with session["s"].request(request.method, url, data=body, headers=headers) as up:
            resp = web.StreamResponse(
                status=up.status,
                headers={"Content-Type": up.headers.get("Content-Type", "text/plain")},
            )
            await resp.prepare(request)
            lines: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
            reader = asyncio.create_task(_timestamp_lines(up, lines))
            first_in = first_out = None
            while (item := await lines.get()) is not None:
                arrived, line = item
                if line.startswith(b"data:"):
                    if first_in is None:
                        first_in, first_out = arrived, time.perf_counter()
                    release = first_out + (arrived - first_in) * factor
                    await asyncio.sleep(max(0.0, release - time.perf_counter()))
                await resp.write(line)
            await reader
            await resp.write_eof()
            return resp

    application = web.Application()
    application.on_startup.append(start)
    application.on_cleanup.append(stop)
    application.router.add_route("*", "/{tail:.*}", relay)
    return application


async def serve(upstream: str, factor: float, port: int) -> web.AppRunner:
    runner = web.AppRunner(app(upstream, factor))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner
