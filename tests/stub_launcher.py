"""A stand-in for ``pytest_vllm_perf.serving.launch``: takes the same command line, behaves as
``STUB_MODE`` says (``a,b``: ``a`` on the first start, ``b`` on later ones), and
appends one line per start to ``STUB_STARTS`` (a file).

Run as a lone script by ``ServerSpec(launcher=(this file,))``, as another venv's
launcher is, so the server lifecycle (boot timeout, port retries, TERM then KILL, the
memo of a failed boot, the stop when the process that started it dies: the launcher's
own ``watch_parent``, the grace period ``STUB_GRACE_S``) is tested without vLLM:

- ``ready``: answers ``/health`` on the given port;
- ``never``: never answers (a boot that hangs);
- ``port-taken``: prints vLLM's bind error and exits 1;
- ``crash``: prints a traceback line and exits 3;
- ``stubborn``: answers ``/health``, ignores SIGTERM, and starts a child in the same
  process group that ignores SIGTERM too (an engine core that hangs on shutdown);
- ``parent``: answers ``/health`` and starts a child in the same process group that
  outlives it (an API server killed, its engine core orphaned); the child's pid is
  appended to ``STUB_STARTS`` as ``child PID``;
- ``slow-exit``: answers ``/health``; on SIGTERM appends ``term PID TIME`` to
  ``STUB_STARTS``, takes a second to shut down (vLLM's CPU server takes about 4),
  then appends ``exit PID TIME`` and exits 0.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import time


def _serve(port: int) -> None:
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()


def main() -> int:
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    starts = os.environ["STUB_STARTS"]
    earlier = 0
    if os.path.exists(starts):
        with open(starts, encoding="utf-8") as fh:
            earlier = len(fh.read().splitlines())
    modes = os.environ.get("STUB_MODE", "ready").split(",")
    mode = modes[min(earlier, len(modes) - 1)]
    with open(starts, "a", encoding="utf-8") as fh:
        fh.write(f"{mode} {port} {os.getpid()}\n")
    print(f"stub vLLM ({mode}) starting on port {port}", flush=True)
    # as the real launcher does: stop the group once the process that started it is gone
    from pytest_vllm_perf.serving import launch

    launch.watch_parent(float(os.environ.get("STUB_GRACE_S", launch.STOP_GRACE_S)))
    if mode == "never":
        time.sleep(3600)
    elif mode == "port-taken":
        print("OSError: [Errno 98] Address already in use", flush=True)
        return 1
    elif mode == "crash":
        print("ValueError: stub engine failed", flush=True)
        return 3
    elif mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
        )
        subprocess.Popen([sys.executable, "-c", child])
    elif mode == "slow-exit":

        def shutdown(_sig: int, _frame: object) -> None:
            with open(starts, "a", encoding="utf-8") as fh:
                fh.write(f"term {os.getpid()} {time.time()}\n")
            time.sleep(1.0)
            with open(starts, "a", encoding="utf-8") as fh:
                fh.write(f"exit {os.getpid()} {time.time()}\n")
            os._exit(0)

        signal.signal(signal.SIGTERM, shutdown)
    elif mode == "parent":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(starts, "a", encoding="utf-8") as fh:
            fh.write(f"child 0 {child.pid}\n")
    _serve(port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
