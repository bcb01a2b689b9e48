"""Where a run came from: the client's machine, the git commit, the plugin's version.

Every store records it with what it keeps (a baseline's boot, a capacity search, a
history row, a pytest-benchmark export).
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["commit_info", "machine_info", "plugin_version"]


def machine_info() -> dict[str, Any]:
    """What ran the client: CPU, Python and OS (the host name is left out: it says
    nothing about performance). pytest-benchmark once supplied this; it is no longer a
    dependency, since this was all it did for us and it added 46 options to --help."""
    brand = platform.processor()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        brand = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in cpuinfo.splitlines()
                if ln.startswith("model name")
            ),
            brand,
        )
    except OSError:
        pass
    return {
        "cpu": {"brand_raw": brand or None, "count": os.cpu_count(), "arch": platform.machine()},
        "machine": platform.machine(),
        "python_implementation": platform.python_implementation(),
        "python_version": platform.python_version(),
        "release": platform.release(),
        "system": platform.system(),
    }


def commit_info() -> dict[str, Any]:
    """The git commit the run came from: id, branch, whether the tree had changes, and the
    commit time; ``None`` values outside a git checkout or without git."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv, no shell
                ["git", *args],  # noqa: S607 - git from PATH, as a user runs it
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "id": git("rev-parse", "HEAD"),
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": None if status is None else bool(status),
        "time": git("show", "-s", "--format=%cI", "HEAD"),
    }


def plugin_version() -> str:
    try:
        return metadata.version("pytest-vllm-perf")
    except metadata.PackageNotFoundError:
        return "unknown"
