"""What every report file of a run shows, as one record (``report.formats``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_vllm_perf.core.report import Headline, Report

__all__ = ["View"]


@dataclass(frozen=True)
class View:
    """The typed report, its PASS/FAIL line, the notes a reader must see (gate notes,
    side-by-side tables), the plots written, and for a merge of reports the shards
    missing from it (None: one session's report)."""

    report: Report
    headline: Headline
    notes: tuple[str, ...] = ()
    plots: tuple[Path, ...] = ()
    missing: tuple[str, ...] | None = None
    linked: bool = True  # the plots stay where they were drawn: the Markdown links them
