"""The history store: one CSV file of runs per test, profile and hardware class,
``ROOT/HARDWARE/TEST/PROFILE.csv`` (``naming``'s rule, the baselines' own).

Appending is atomic (the whole file is written to a temp file and renamed over it) and
idempotent: a row's ``run_id`` is a hash of its test, profile and measured passes, so
the same report appended twice is one row. A malformed history file is an error naming
the file and line, and is never rewritten. A file at the name an older release gave it
(``ROOT/HARDWARE/TEST--PROFILE.csv``, slugged with underscores) is moved to its name
here by the first append that reaches it, its rows kept.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.errors import VllmPerfError
from pytest_vllm_perf.core.registry import COMPARED, split_key
from pytest_vllm_perf.store import naming

__all__ = ["COLUMNS", "SPREAD", "HistoryError", "append", "path_for", "read"]

# The columns every history file starts with; each metric adds KEY and KEY.spread.
COLUMNS: Final = (
    "time", "run_id", "commit", "vllm_version", "model", "hardware_class", "platform",
    "test", "profile", "profile_hash", "passes",
)  # fmt: skip
SPREAD: Final = ".spread"


class HistoryError(VllmPerfError, ValueError):
    """A history file or report that cannot be read; the message names the file."""


def path_for(root: Path, hardware: str, test: str, profile: str) -> Path:
    """``ROOT/1x-nvidia-h200/examples-test_decode.py-test_decode/default.csv``."""
    return naming.path_for(root, hardware, test, profile, ".csv")


def _legacy_slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def legacy_path(root: Path, hardware: str, test: str, profile: str) -> Path:
    """Where an older release kept the same history: ``ROOT/HW/TEST--PROFILE.csv``."""
    return root / _legacy_slug(hardware) / f"{_legacy_slug(test)}--{_legacy_slug(profile)}.csv"


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A history file's header and rows; HistoryError naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], []
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: cannot be read: {exc}") from exc
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise HistoryError(f"{path}:1: empty history file (no header)") from None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise HistoryError(f"{path}:1: not a history header: no column {', '.join(missing)}")
    rows = []
    for line, cells in enumerate(reader, start=2):
        if len(cells) != len(header):
            raise HistoryError(
                f"{path}:{line}: {len(cells)} fields where the header has {len(header)}"
            )
        row = dict(zip(header, cells, strict=True))
        for key in header[len(COLUMNS) :]:
            if row[key]:
                try:
                    float(row[key])
                except ValueError:
                    raise HistoryError(
                        f"{path}:{line}: {key}: not a number: {row[key]!r}"
                    ) from None
        rows.append(row)
    return header, rows


def append(root: Path, rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Append ``rows`` to their history files; a row whose ``run_id`` is there already
    is left out. Returns one line per file touched."""
    by_file: dict[tuple[Path, Path], list[Mapping[str, str]]] = {}
    for row in rows:
        names = (row["hardware_class"], row["test"], row["profile"])
        by_file.setdefault((path_for(root, *names), legacy_path(root, *names)), []).append(row)
    plans = []
    for (path, legacy), new in by_file.items():  # every file is checked before any is written
        moved = legacy if not path.exists() and legacy.is_file() else None
        plans.append((path, moved, new, *read(moved or path)))
    lines = []
    for path, moved, new, header, old in plans:
        if not header:
            header = list(COLUMNS) + sorted({k for r in new for k in r} - set(COLUMNS), key=_order)
        seen = {r["run_id"] for r in old}
        fresh = [r for r in new if r["run_id"] not in seen]
        dropped = sorted({k for r in fresh for k in r} - set(header))
        if fresh or moved:
            out = io.StringIO()
            writer = csv.DictWriter(
                out, header, restval="", extrasaction="ignore", lineterminator="\n"
            )
            writer.writeheader()
            writer.writerows([*old, *fresh])
            atomic.write_text(path, out.getvalue())
        if moved:  # removed only once its rows are in the new file
            moved.unlink()
        note = f" (not in its header, left out: {', '.join(dropped)})" if dropped else ""
        note += f" (moved from {moved})" if moved else ""
        lines.append(f"{path}: {len(old) + len(fresh)} run(s), {len(fresh)} appended{note}")
    return lines


def _order(column: str) -> tuple[int, str]:
    """Metric columns in the registry's order, each followed by its spread."""
    key = column.removesuffix(SPREAD)
    rank = COMPARED.index(split_key(key)[1]) if split_key(key)[1] in COMPARED else len(COMPARED)
    return rank, column
