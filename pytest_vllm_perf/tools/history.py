"""A history of runs, and the change points in it (``vllm-perf history``).

A pull-request gate answers "is this change worse than its base"; a history answers
"when did it get worse". ``vllm-perf history append REPORT...`` turns ``--vllm-json``
reports into one CSV row per test and profile, in one file per test, profile and
hardware class under the history folder: the run's time, commit, vLLM release, model,
the profile's hash, the passes, and for each compared metric the median over the
passes with its pass-to-pass spread (the sd of the log values). Apache Otava reads such
a folder of CSV files as it is, and git diffs it. ``vllm-perf history analyze DIR``
runs Otava's change-point analysis (its e-divisive means with a t-test merge, the
method of Fleming et al.'s "Hunter") on every metric column and prints each change
point with the run and commit after which it came, the means before and after, and
Otava's p-value; ``--fail-recent N`` exits 1 when one of the last N runs starts a
change beyond the metric's tolerance in its worse direction.

The files and their appending (atomic, idempotent) are the store's: ``store.history``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.registry import (
    METRICS,
    default_tolerances,
    split_key,
    tolerance_for,
)
from pytest_vllm_perf.core.report import Report
from pytest_vllm_perf.store import provenance, reports
from pytest_vllm_perf.store.history import COLUMNS, SPREAD, HistoryError, append, read

__all__ = [
    "COLUMNS", "SPREAD", "ChangePoint", "HistoryError", "analyze", "append", "change_points",
    "is_postgres", "main", "rows_of",
]  # fmt: skip


def _median_and_spread(values: Sequence[float]) -> tuple[str, str]:
    """The median of finite ``values`` and the sd of their logs, as CSV cells ("" where
    there is none)."""
    if not values:
        return "", ""
    logs = [math.log(v) for v in values if v > 0]
    spread = f"{statistics.stdev(logs):.4g}" if len(logs) > 1 else ""
    return f"{statistics.median(values):.6g}", spread


def rows_of(report: Report, time: str, commit: str) -> list[dict[str, str]]:
    """One history row per result of a ``--vllm-json`` report."""
    rows = []
    for result in report.results:
        env = result.environment
        measured = json.dumps([dict(p.metrics) for p in result.passes], sort_keys=True)
        if result.capacity is not None:  # a search has no passes: told apart by its rates
            measured += json.dumps(dict(result.capacity), sort_keys=True)
        run_id = hashlib.sha256(
            f"{result.test}\0{result.profile}\0{measured}".encode()
        ).hexdigest()[:16]
        row = {
            "time": time, "run_id": run_id, "commit": commit,
            "vllm_version": str(env.get("vllm_version", "")), "model": str(env.get("model", "")),
            "hardware_class": str(env.get("hardware_class", "unknown")),
            "platform": str(env.get("platform", "")), "test": result.test,
            "profile": result.profile, "profile_hash": str(result.setup.get("profile_hash", "")),
            "passes": str(len(result.passes)),
        }  # fmt: skip
        for key, values in reports.report_series(result).items():
            row[key], row[key + SPREAD] = _median_and_spread(values)
        # the medians leave out a failed request's infinite TTFT: the count says it
        failed = [p.metrics.get("failed") for p in result.passes]
        counts = [n for n in failed if isinstance(n, int | float)]
        if result.passes and len(counts) == len(failed):
            row["failed"] = f"{sum(counts):g}"
        rows.append(row)
    return rows


@dataclass(frozen=True)
class ChangePoint:
    """One change point Otava found in one metric of one history file."""

    series: str  # hardware/test/profile: the history file under its folder, or PostgreSQL's
    metric: str
    index: int  # the first run after the change, 0-based
    runs: int
    time: str
    commits: tuple[str, str]  # the last run's commit before it, the first one's after
    mean_before: float
    mean_after: float
    pvalue: float
    tolerance: float | None
    higher_is_better: bool

    @property
    def ratio(self) -> float:
        return self.mean_after / self.mean_before if self.mean_before else math.nan

    @property
    def regression(self) -> bool:
        """Worse beyond the metric's tolerance."""
        if self.tolerance is None or not math.isfinite(self.ratio):
            return False
        worse = 1 / self.ratio if self.higher_is_better else self.ratio
        return worse > 1 + self.tolerance

    def line(self) -> str:
        before, after = self.commits
        kind = "regression" if self.regression else "change"
        tol = (
            f" beyond its tolerance {self.tolerance:.0%}"
            if self.regression and self.tolerance
            else ""
        )
        return (
            f"{self.series} {self.metric}: {kind}{tol} at run {self.index + 1} of {self.runs} "
            f"({self.time}, commit {after or '?'}; the run before: {before or '?'}): "
            f"{self.mean_before:.4g} -> {self.mean_after:.4g} (x{self.ratio:.3f}), "
            f"Otava p={self.pvalue:.2g}"
        )


def _epoch(value: str, path: Path, line: int) -> int:
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise HistoryError(f"{path}:{line}: time: not an ISO 8601 time: {value!r}") from None
    return int((stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp())


def analyze(
    path: Path, max_pvalue: float = 0.001, window: int = 30, name: str = ""
) -> list[ChangePoint]:
    """Otava's change points in every metric column of one history file, its series
    called ``name`` (default: the file's name)."""
    header, rows = read(path)
    times = [_epoch(r["time"], path, i + 2) for i, r in enumerate(rows)]
    metrics = [k for k in header[len(COLUMNS) :] if not k.endswith(SPREAD)]
    return change_points(name or path.name, rows, times, metrics, max_pvalue, window)


def change_points(
    name: str, rows: Sequence[Mapping[str, str]], times: Sequence[int], metrics: Sequence[str],
    max_pvalue: float, window: int,
) -> list[ChangePoint]:  # fmt: skip
    """Otava's analysis of one series of runs (oldest first)."""
    try:
        from otava.series import AnalysisOptions, Metric, Series
    except ImportError as exc:
        raise HistoryError(
            "vllm-perf history analyze needs Apache Otava: pip install 'pytest-vllm-perf[history]'"
        ) from exc
    if not rows:
        return []
    data = {k: [float(r[k]) if r.get(k) else math.nan for r in rows] for k in metrics}
    data = {k: v for k, v in data.items() if any(math.isfinite(x) for x in v)}
    definitions = {k: METRICS.get(split_key(k)[1]) for k in data}
    series = Series(
        name, None, list(times),
        {k: Metric(1 if (d and d.higher_is_better) else -1) for k, d in definitions.items()},
        data, {"commit": [r["commit"] for r in rows]},
    )  # fmt: skip
    options = AnalysisOptions()
    options.max_pvalue, options.window_len = max_pvalue, window
    analyzed = series.analyze(options)
    tolerances = default_tolerances(rows[-1]["platform"] or "cpu")
    found = []
    for key, points in analyzed.change_points.items():
        d = definitions[key]
        for cp in points:
            i = int(cp.index)
            found.append(
                ChangePoint(
                    name, key, i, len(rows), rows[i]["time"],
                    (rows[i - 1]["commit"] if i else "", rows[i]["commit"]),
                    float(cp.mean_before()), float(cp.mean_after()), float(cp.pvalue()),
                    tolerance_for(key, tolerances) if d else None,
                    bool(d and d.higher_is_better),
                )
            )  # fmt: skip
    return sorted(found, key=lambda c: (c.index, c.metric))


def is_postgres(target: str | Path) -> bool:
    return str(target).startswith(("postgresql://", "postgres://"))


def _commit() -> str:
    """The commit being measured: $GITHUB_SHA in a workflow, else git's HEAD, else ''."""
    found = os.environ.get("GITHUB_SHA") or provenance.commit_info()["id"] or ""
    return str(found)[:12]


def _load_report(path: Path) -> Report:
    try:
        return reports.read_report(path)
    except BaselineError as exc:
        raise HistoryError(str(exc)) from None


def _pg() -> Any:
    """The PostgreSQL store (``history_pg``), loaded only for a ``postgresql://`` target:
    it imports this module's rows and change points."""
    from pytest_vllm_perf.tools import history_pg

    return history_pg


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm-perf history", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    add = sub.add_parser("append", help="--vllm-json reports into the history, one row per test")
    add.add_argument("reports", nargs="+", type=Path, help="--vllm-json reports")
    add.add_argument(
        "--to", default=".vllm-perf-history",
        help="history folder, or a postgresql://USER@HOST:PORT/DB URL",
    )  # fmt: skip
    add.add_argument("--commit", help="the commit measured (default: $GITHUB_SHA, else git HEAD)")
    add.add_argument("--time", help="the run's ISO 8601 time (default: now, UTC)")
    look = sub.add_parser("analyze", help="Otava's change points in every history file")
    look.add_argument(
        "root", nargs="?", default=".vllm-perf-history",
        help="history folder, or a postgresql:// URL",
    )  # fmt: skip
    look.add_argument("--max-pvalue", type=float, default=0.001, help="Otava's (0.001)")
    look.add_argument("--window", type=int, default=30, help="Otava's window of runs (30)")
    look.add_argument(
        "--fail-recent", type=int, default=0, metavar="N",
        help="exit 1 when one of the last N runs starts a regression beyond the tolerance",
    )  # fmt: skip
    return parser


def _append(args: argparse.Namespace) -> list[str]:
    time = args.time or datetime.now(UTC).isoformat(timespec="seconds")
    _epoch(time, Path("--time"), 0)
    commit = args.commit if args.commit is not None else _commit()
    rows = [r for p in args.reports for r in rows_of(_load_report(p), time, commit)]
    return _pg().pg_append(args.to, rows) if is_postgres(args.to) else append(Path(args.to), rows)


def _points(args: argparse.Namespace) -> tuple[list[ChangePoint], str]:
    """Every history file's change points, and where they were looked for."""
    if is_postgres(args.root):
        return _pg().pg_analyze(args.root, args.max_pvalue, args.window), _pg().PG_TABLE
    files = sorted(Path(args.root).rglob("*.csv"))
    if not files:
        raise HistoryError(f"{args.root}: no history file (*.csv)")
    root = Path(args.root)
    points = [
        cp
        for path in files
        for cp in analyze(path, args.max_pvalue, args.window, _series(root, path))
    ]
    return points, f"{len(files)} file(s)"


def _series(root: Path, path: Path) -> str:
    """A history file's series: ``HARDWARE/TEST/PROFILE``, its path under the root."""
    return path.relative_to(root).with_suffix("").as_posix()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.action == "append":
            print("\n".join(_append(args)) or "no result in the reports")
            return 0
        points, where = _points(args)
    except HistoryError as exc:
        print(f"vllm-perf history: {exc}", file=sys.stderr)
        return 4
    for cp in points:
        print(cp.line())
    recent = [
        cp for cp in points if cp.regression and cp.index >= cp.runs - args.fail_recent
    ] if args.fail_recent else []  # fmt: skip
    print(
        f"history: {where}, {len(points)} change point(s)"
        + (
            f"; {len(recent)} regression(s) in the last {args.fail_recent} runs"
            if args.fail_recent
            else ""
        )
    )
    return 1 if recent else 0


if __name__ == "__main__":
    raise SystemExit(main())
