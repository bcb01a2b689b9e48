"""Helpers for tests against the real vLLM engine."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest


def require_engine() -> None:
    """Skip without vLLM on a developer machine; in CI a missing engine is a failure."""
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("CI"):
            pytest.fail("vLLM is not installed, and CI must run the engine tests")
        pytest.skip("vLLM is not installed (make setup installs the CPU engine)")


def vllm_processes(marker: str) -> list[str]:
    """Full command lines of live processes that mention ``marker`` (read from /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in args and "pytest_vllm_perf.launch" in args:
            found.append(args)
    return found


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries ``VLLM_PERF_TEST_TAG=tag``: a server
    started under that tag and every process it forked (engine core, workers)."""
    found = []
    needle = f"VLLM_PERF_TEST_TAG={tag}".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                status = (environ.parent / "stat").read_text()
                if status.split(")")[-1].split()[0] != "Z":  # a zombie holds nothing
                    found.append(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return found
