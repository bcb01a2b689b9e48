"""Progress of pytest-xdist workers, relayed to the controller's terminal.

xdist keeps a worker's output: under ``pytest -n 2`` two boots and their passes printed
nothing for minutes, where one process prints a progress line every few seconds. So
each worker appends its progress lines to a file of its own, in a folder the
controller makes and names in ``RELAY_ENV`` before its workers start (they inherit
it), and the controller prints every new complete line, with the worker's id, every
``EVERY_S`` and once more when it stops.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["EVERY_S", "RELAY_ENV", "Relay", "worker_progress"]

RELAY_ENV: Final = "VLLM_PERF_PROGRESS_DIR"
EVERY_S: Final = 0.5


def worker_progress(folder: Path, worker: str) -> Callable[[str], None]:
    """A worker's progress writer: one line appended to ``folder/WORKER`` per message."""
    path = folder / worker

    def say(message: str) -> None:
        # a controller gone, or its folder removed: nobody to tell
        with contextlib.suppress(OSError), path.open("a", encoding="utf-8") as fh:
            fh.write(message.replace("\n", " ") + "\n")

    return say


@dataclass
class Relay:
    """The controller's side: a folder for the workers' files, and a thread printing
    what they add through ``write``."""

    write: Callable[[str], None]
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="vllm-perf-")))
    _read: dict[str, int] = field(default_factory=dict)  # bytes printed, per worker
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Name the folder for the workers to come, and print as they write."""
        os.environ[RELAY_ENV] = str(self.folder)
        self._thread = threading.Thread(target=self._run, name="vllm-perf-relay", daemon=True)
        self._thread.start()

    def poll(self) -> None:
        """Print every complete line the workers added since the last poll."""
        for path in sorted(self.folder.glob("*")):
            start = self._read.get(path.name, 0)
            try:
                with path.open("rb") as fh:
                    fh.seek(start)
                    added = fh.read()
            except OSError:
                continue
            complete = added[: added.rfind(b"\n") + 1]
            self._read[path.name] = start + len(complete)
            for line in complete.decode("utf-8", "replace").splitlines():
                self.write(f"[vllm-perf {path.name}] {line}")

    def stop(self) -> None:
        """Print what is left, then remove the folder."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()
        shutil.rmtree(self.folder, ignore_errors=True)
        if os.environ.get(RELAY_ENV) == str(self.folder):
            del os.environ[RELAY_ENV]

    def _run(self) -> None:
        while not self._stop.wait(EVERY_S):
            self.poll()
