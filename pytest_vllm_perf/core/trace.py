"""Request traces: recorded arrival times and lengths, replayed as one request class.

The format is JSON lines, one request per line, as the Mooncake traces that several
serving benchmarks read::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}

``timestamp`` is the arrival in milliseconds (non-decreasing; the first request arrives
at 0 after shifting), ``input_length`` and ``output_length`` are token counts, and the
optional ``hash_ids`` name the prompt's blocks of ``BLOCK_TOKENS`` tokens: two requests
that share a block id share that block's content, so the prefix cache sees what the
recorded traffic shared. A malformed line is an error naming the file and the line.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf.core.errors import WorkloadError

__all__ = ["BLOCK_TOKENS", "TraceRequest", "digest", "load", "parse"]

BLOCK_TOKENS: Final = 512  # tokens per hash block, as in the Mooncake traces
REQUIRED: Final = ("timestamp", "input_length", "output_length")


@dataclass(frozen=True)
class TraceRequest:
    """One recorded request: when it arrived (seconds after the first) and its lengths."""

    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def _count(entry: dict[str, Any], key: str, where: str) -> int:
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{where}: {key} must be a whole number >= 1, got {value!r}")
    return value


def parse(text: str, source: str) -> tuple[TraceRequest, ...]:
    """The requests of a JSON-lines trace; WorkloadError ``SOURCE:LINE: problem``."""
    requests: list[TraceRequest] = []
    first: float | None = None
    last = -1.0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(entry, dict):
            raise WorkloadError(f"{where}: expected an object, got {type(entry).__name__}")
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            raise WorkloadError(f"{where}: missing {', '.join(missing)}")
        stamp = entry["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or stamp < 0:
            raise WorkloadError(f"{where}: timestamp must be milliseconds >= 0, got {stamp!r}")
        if stamp < last:
            raise WorkloadError(f"{where}: timestamp {stamp} is before the previous line's {last}")
        ids = entry.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise WorkloadError(f"{where}: hash_ids must be a list of whole numbers")
        first = stamp if first is None else first
        last = stamp
        requests.append(
            TraceRequest(
                (stamp - first) / 1000.0,
                _count(entry, "input_length", where),
                _count(entry, "output_length", where),
                tuple(ids),
            )
        )
    if not requests:
        raise WorkloadError(f"{source}: the trace holds no requests")
    return tuple(requests)


@functools.lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int) -> tuple[TraceRequest, ...]:
    return parse(Path(path).read_text(encoding="utf-8"), path)


def load(path: str | Path) -> tuple[TraceRequest, ...]:
    """The requests of the trace file at ``path`` (parsed once while it is unchanged)."""
    try:
        stat = Path(path).stat()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    return _load(str(path), stat.st_mtime_ns)


def digest(path: str | Path) -> str:
    """What a trace replays, for the workload's hash: its content, not its path."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
