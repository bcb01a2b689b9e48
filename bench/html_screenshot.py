"""Look at a ``--vllm-html`` page in a real headless browser: load it in headless
Chromium through the DevTools protocol and save a full-page screenshot.

The browser is ``@sparticuz/chromium`` (a headless-shell build with its own NSS and
fonts, from the npm registry, the one browser this machine's network reaches); unpack
it once with ``--unpack`` (npm and the ``brotli`` Python package needed):

    .venv/bin/python bench/html_screenshot.py --unpack ~/chromium
    .venv/bin/python bench/html_screenshot.py --chromium ~/chromium \\
        bench/results/cpu/demo-report.html bench/results/cpu/demo-report.png

Chromium's own ``--screenshot`` flag hung or wrote nothing in this sandbox; the
DevTools protocol over its remote-debugging port works. It runs on 127.0.0.1 with a
scratch profile and is stopped with its process group when done.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

PORT = 9333
VERSION = "153.0.0"
FONTS = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>/usr/share/fonts</dir><dir>{here}/fonts</dir>
<cachedir>/tmp/fonts-cache/</cachedir></fontconfig>
"""


def unpack(folder: Path) -> None:
    """``npm pack`` the browser and decompress it into ``folder``."""
    import brotli  # only for unpacking: pip install brotli

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["npm", "pack", f"@sparticuz/chromium@{VERSION}"], cwd=scratch,
                       check=True, capture_output=True)  # fmt: skip
        (tgz,) = Path(scratch).glob("*.tgz")
        with tarfile.open(tgz) as archive:
            archive.extractall(scratch, filter="data")
        bins = Path(scratch) / "package" / "bin"
        (folder / "chromium").write_bytes(brotli.decompress((bins / "chromium.br").read_bytes()))
        (folder / "chromium").chmod(0o755)
        for name in ("al2023", "fonts", "swiftshader"):
            tar = Path(scratch) / f"{name}.tar"
            tar.write_bytes(brotli.decompress((bins / f"{name}.tar.br").read_bytes()))
            with tarfile.open(tar) as archive:
                archive.extractall(folder, filter="data")
    (folder / "fonts.conf").write_text(FONTS.format(here=folder), encoding="utf-8")


async def capture(page: Path, out: Path, width: int) -> None:
    import aiohttp  # the project's own client library

    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            with contextlib.suppress(aiohttp.ClientError):
                targets = await (await session.get(f"http://127.0.0.1:{PORT}/json")).json()
                break
            await asyncio.sleep(0.2)
        else:
            raise SystemExit("the browser did not open its DevTools port")
        url = next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"]
        async with session.ws_connect(url, max_msg_size=0) as ws:
            calls = 0

            async def call(method: str, **params: object) -> dict:
                nonlocal calls
                calls += 1
                await ws.send_json({"id": calls, "method": method, "params": params})
                while True:
                    message = await ws.receive_json()
                    if message.get("id") == calls:
                        return message

            await call("Page.enable")
            await call("Emulation.setDeviceMetricsOverride", width=width, height=900,
                       deviceScaleFactor=1, mobile=False)  # fmt: skip
            await call("Page.navigate", url=page.resolve().as_uri())
            await asyncio.sleep(3)  # the page is local and has no script: 3 s is plenty
            shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            out.write_bytes(base64.b64decode(shot["result"]["data"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", nargs="?", type=Path, help="the HTML file")
    parser.add_argument("out", nargs="?", type=Path, help="the PNG to write")
    parser.add_argument("--chromium", type=Path, default=Path.home() / "chromium")
    parser.add_argument("--unpack", type=Path, help="unpack the browser into this folder")
    parser.add_argument("--width", type=int, default=1300)
    args = parser.parse_args()
    if args.unpack:
        unpack(args.unpack)
        return 0
    if not (args.page and args.out):
        parser.error("give the page and the PNG to write")
    here = args.chromium.resolve()
    env = {**os.environ, "FONTCONFIG_PATH": str(here),
           "LD_LIBRARY_PATH": f"{here / 'lib'}:{here}"}  # fmt: skip
    profile = tempfile.mkdtemp(prefix="vllm-perf-chromium-")
    browser = subprocess.Popen(
        [str(here / "chromium"), "--headless=shell", "--no-sandbox", "--no-zygote",
         "--single-process", "--disable-dev-shm-usage", "--in-process-gpu", "--use-gl=angle",
         "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
         "--remote-debugging-address=127.0.0.1", f"--remote-debugging-port={PORT}",
         f"--user-data-dir={profile}", "about:blank"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    started = time.monotonic()
    try:
        asyncio.run(capture(args.page, args.out, args.width))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(browser.pid, signal.SIGKILL)
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)
    print(f"{args.out}: {args.page} in headless Chromium {VERSION} "
          f"({time.monotonic() - started:.1f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
