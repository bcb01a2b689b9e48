"""Atomic file writes: readers see the old file or the new one, never a partial one.

Baselines and reports are both read by people and tools while a run may be
killed; a temp file in the same folder, fsynced and renamed over the target,
survives a crash or a concurrent writer at any point.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (newline-terminated) in one rename.

    The temp file's name carries the writer's pid: a writer killed with SIGKILL
    cannot remove its own, so the next write removes those whose writer is gone
    (never a live writer's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make a committed baseline private
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _remove_orphans(path: Path) -> None:
    """Remove temp files of ``path`` left by writers that no longer run."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True
