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

Appending is atomic (the whole file is written to a temp file and renamed over it) and
idempotent: a row's ``run_id`` is a hash of its test, profile and measured passes, so
the same report appended twice is one row. A malformed history file is an error naming
the file and line, and is never rewritten.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.errors import VllmPerfError
from pytest_vllm_perf.core.registry import (
    COMPARED,
    METRICS,
    default_tolerances,
    from_bench_serve_key,
    split_key,
    tolerance_for,
)
from pytest_vllm_perf.verdict import baseline

__all__ = ["COLUMNS", "ChangePoint", "HistoryError", "analyze", "append", "main", "rows_of"]

# The columns every history file starts with; each metric adds KEY and KEY.spread.
COLUMNS: Final = (
    "time", "run_id", "commit", "vllm_version", "model", "hardware_class", "platform",
    "test", "profile", "profile_hash", "passes",
)  # fmt: skip
SPREAD: Final = ".spread"


class HistoryError(VllmPerfError, ValueError):
    """A history file or report that cannot be read; the message names the file."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def path_for(root: Path, hardware: str, test: str, profile: str) -> Path:
    """``ROOT/1x_NVIDIA_H200/examples_test_decode.py_test_decode--default.csv``."""
    return root / _slug(hardware) / f"{_slug(test)}--{_slug(profile)}.csv"


def _metric_keys(result: Mapping[str, Any]) -> list[str]:
    """The compared metrics and the workload's gated ones (class-prefixed), in order."""
    gate = [
        *result.get("workload", {}).get("gate", ()),
        *result.get("workload", {}).get("ab_gate", ()),
    ]
    return list(dict.fromkeys([*COMPARED, *gate]))


def _median_and_spread(values: Sequence[float]) -> tuple[float, float]:
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return math.nan, math.nan
    mid = len(finite) // 2
    median = finite[mid] if len(finite) % 2 else (finite[mid - 1] + finite[mid]) / 2
    logs = [math.log(v) for v in finite if v > 0]
    if len(logs) < 2:
        return median, math.nan
    mean = sum(logs) / len(logs)
    return median, math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def rows_of(report: Mapping[str, Any], time: str, commit: str) -> list[dict[str, str]]:
    """One history row per result of a ``--vllm-json`` report."""
    rows = []
    for result in report.get("results", ()):
        passes = result.get("passes") or ()
        per_pass = [
            {from_bench_serve_key(k): v for k, v in p.get("metrics", {}).items()} for p in passes
        ]
        env = result.get("environment", {})
        profile = result.get("profile") or ""
        measured = json.dumps([p.get("metrics", {}) for p in passes], sort_keys=True)
        run_id = hashlib.sha256(
            f"{result.get('test')}\0{profile}\0{measured}".encode()
        ).hexdigest()[:16]
        row = {
            "time": time, "run_id": run_id, "commit": commit,
            "vllm_version": str(env.get("vllm_version", "")), "model": str(env.get("model", "")),
            "hardware_class": str(env.get("hardware_class", "unknown")),
            "platform": str(env.get("platform", "")), "test": str(result.get("test", "")),
            "profile": profile, "profile_hash": str(result.get("profile_hash", "")),
            "passes": str(len(passes)),
        }  # fmt: skip
        for key in _metric_keys(result):
            values = [float(m[key]) for m in per_pass if isinstance(m.get(key), (int, float))]
            if not values:
                continue
            median, spread = _median_and_spread(values)
            row[key] = "" if math.isnan(median) else f"{median:.6g}"
            row[key + SPREAD] = "" if math.isnan(spread) else f"{spread:.4g}"
        rows.append(row)
    return rows


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
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
    by_file: dict[Path, list[Mapping[str, str]]] = {}
    for row in rows:
        by_file.setdefault(
            path_for(root, row["hardware_class"], row["test"], row["profile"]), []
        ).append(row)
    lines = []
    for path, new in by_file.items():
        header, old = _read(path)  # every file is checked before any is written
        if not header:
            header = list(COLUMNS) + sorted({k for r in new for k in r} - set(COLUMNS), key=_order)
        seen = {r["run_id"] for r in old}
        fresh = [r for r in new if r["run_id"] not in seen]
        dropped = sorted({k for r in fresh for k in r} - set(header))
        if fresh:
            out = io.StringIO()
            writer = csv.DictWriter(
                out, header, restval="", extrasaction="ignore", lineterminator="\n"
            )
            writer.writeheader()
            writer.writerows([*old, *fresh])
            atomic.write_text(path, out.getvalue())
        note = f" (not in its header, left out: {', '.join(dropped)})" if dropped else ""
        lines.append(f"{path}: {len(old) + len(fresh)} run(s), {len(fresh)} appended{note}")
    return lines


def _order(column: str) -> tuple[int, str]:
    """Metric columns in the registry's order, each followed by its spread."""
    key = column.removesuffix(SPREAD)
    rank = COMPARED.index(split_key(key)[1]) if split_key(key)[1] in COMPARED else len(COMPARED)
    return rank, column


@dataclass(frozen=True)
class ChangePoint:
    """One change point Otava found in one metric of one history file."""

    path: Path
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
            f"{self.path.name} {self.metric}: {kind}{tol} at run {self.index + 1} of {self.runs} "
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


def analyze(path: Path, max_pvalue: float = 0.001, window: int = 30) -> list[ChangePoint]:
    """Otava's change points in every metric column of one history file."""
    try:
        from otava.series import AnalysisOptions, Metric, Series
    except ImportError as exc:
        raise HistoryError(
            "vllm-perf history analyze needs Apache Otava: pip install 'pytest-vllm-perf[history]'"
        ) from exc
    header, rows = _read(path)
    if not rows:
        return []
    metrics = [k for k in header[len(COLUMNS) :] if not k.endswith(SPREAD)]
    times = [_epoch(r["time"], path, i + 2) for i, r in enumerate(rows)]
    data = {k: [float(r[k]) if r[k] else math.nan for r in rows] for k in metrics}
    data = {k: v for k, v in data.items() if any(math.isfinite(x) for x in v)}
    definitions = {k: METRICS.get(split_key(k)[1]) for k in data}
    series = Series(
        path.stem, None, times,
        {k: Metric(1 if (d and d.higher_is_better) else -1) for k, d in definitions.items()},
        data, {"commit": [r["commit"] for r in rows]},
    )  # fmt: skip
    options = AnalysisOptions()
    options.max_pvalue, options.window_len = max_pvalue, window
    analyzed = series.analyze(options)
    platform = rows[-1]["platform"] or "cpu"
    tolerances = default_tolerances(platform)
    found = []
    for key, points in analyzed.change_points.items():
        d = definitions[key]
        for cp in points:
            i = int(cp.index)
            found.append(
                ChangePoint(
                    path, key, i, len(rows), rows[i]["time"],
                    (rows[i - 1]["commit"] if i else "", rows[i]["commit"]),
                    float(cp.mean_before()), float(cp.mean_after()), float(cp.pvalue()),
                    tolerance_for(key, tolerances) if d else None,
                    bool(d and d.higher_is_better),
                )
            )  # fmt: skip
    return sorted(found, key=lambda c: (c.index, c.metric))


def _commit() -> str:
    """The commit being measured: $GITHUB_SHA in a workflow, else git's HEAD, else ''."""
    found = os.environ.get("GITHUB_SHA") or baseline.commit_info()["id"] or ""
    return str(found)[:12]


def _load_report(path: Path) -> Mapping[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise HistoryError(f"{path}: not a --vllm-json report: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise HistoryError(f"{path}: not a --vllm-json report (no 'results' list)")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-perf history", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    add = sub.add_parser("append", help="--vllm-json reports into the history, one row per test")
    add.add_argument("reports", nargs="+", type=Path, help="--vllm-json reports")
    add.add_argument("--to", default=Path(".vllm-perf-history"), type=Path, help="history folder")
    add.add_argument("--commit", help="the commit measured (default: $GITHUB_SHA, else git HEAD)")
    add.add_argument("--time", help="the run's ISO 8601 time (default: now, UTC)")
    look = sub.add_parser("analyze", help="Otava's change points in every history file")
    look.add_argument("root", nargs="?", default=Path(".vllm-perf-history"), type=Path)
    look.add_argument("--max-pvalue", type=float, default=0.001, help="Otava's (0.001)")
    look.add_argument("--window", type=int, default=30, help="Otava's window of runs (30)")
    look.add_argument(
        "--fail-recent", type=int, default=0, metavar="N",
        help="exit 1 when one of the last N runs starts a regression beyond the tolerance",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.action == "append":
            time = args.time or datetime.now(UTC).isoformat(timespec="seconds")
            _epoch(time, Path("--time"), 0)
            commit = args.commit if args.commit is not None else _commit()
            rows = [r for p in args.reports for r in rows_of(_load_report(p), time, commit)]
            print("\n".join(append(args.to, rows)) or "no result in the reports")
            return 0
        files = sorted(args.root.rglob("*.csv"))
        if not files:
            raise HistoryError(f"{args.root}: no history file (*.csv)")
        points = [cp for path in files for cp in analyze(path, args.max_pvalue, args.window)]
    except HistoryError as exc:
        print(f"vllm-perf history: {exc}", file=sys.stderr)
        return 4
    for cp in points:
        print(cp.line())
    recent = [
        cp for cp in points if cp.regression and cp.index >= cp.runs - args.fail_recent
    ] if args.fail_recent else []  # fmt: skip
    print(
        f"history: {len(files)} file(s), {len(points)} change point(s)"
        + (
            f"; {len(recent)} regression(s) in the last {args.fail_recent} runs"
            if args.fail_recent
            else ""
        )
    )
    return 1 if recent else 0


if __name__ == "__main__":
    raise SystemExit(main())
