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
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.errors import BaselineError, VllmPerfError
from pytest_vllm_perf.core.registry import (
    COMPARED,
    METRICS,
    default_tolerances,
    split_key,
    tolerance_for,
)
from pytest_vllm_perf.verdict import baseline, reports

__all__ = [
    "COLUMNS", "PG_TABLE", "ChangePoint", "HistoryError", "analyze", "append", "is_postgres",
    "main", "pg_analyze", "pg_append", "rows_of",
]  # fmt: skip

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


def _median_and_spread(values: Sequence[float]) -> tuple[str, str]:
    """The median of finite ``values`` and the sd of their logs, as CSV cells ("" where
    there is none)."""
    if not values:
        return "", ""
    logs = [math.log(v) for v in values if v > 0]
    spread = f"{statistics.stdev(logs):.4g}" if len(logs) > 1 else ""
    return f"{statistics.median(values):.6g}", spread


def rows_of(report: Mapping[str, Any], time: str, commit: str) -> list[dict[str, str]]:
    """One history row per result of a ``--vllm-json`` report."""
    rows = []
    for result in report.get("results", ()):
        passes = result.get("passes") or ()
        env = result.get("environment", {})
        profile = result.get("profile") or ""
        measured = json.dumps([p.get("metrics", {}) for p in passes], sort_keys=True)
        if "capacity" in result:  # a search has no passes: told apart by its rates, margins
            measured += json.dumps(result["capacity"], sort_keys=True)
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
        for key, values in reports.report_series(result).items():
            row[key], row[key + SPREAD] = _median_and_spread(values)
        # the medians leave out a failed request's infinite TTFT: the count says it
        failed = [p.get("metrics", {}).get("failed") for p in passes]
        if passes and all(isinstance(n, (int, float)) for n in failed):
            row["failed"] = f"{sum(failed):g}"
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

    series: str  # the history file's name, or hardware/test--profile in PostgreSQL
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


def analyze(path: Path, max_pvalue: float = 0.001, window: int = 30) -> list[ChangePoint]:
    """Otava's change points in every metric column of one history file."""
    header, rows = _read(path)
    times = [_epoch(r["time"], path, i + 2) for i, r in enumerate(rows)]
    metrics = [k for k in header[len(COLUMNS) :] if not k.endswith(SPREAD)]
    return _change_points(path.name, rows, times, metrics, max_pvalue, window)


def _change_points(
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


# PostgreSQL: one row per run, series and metric, so that any metric can be added
# without a schema change; the primary key makes appending the same run a no-op. The
# table name is written into each statement (no SQL is built from strings).
PG_TABLE: Final = "vllm_perf_history"
_PG_SCHEMA: Final = """CREATE TABLE IF NOT EXISTS vllm_perf_history (
    hardware_class text NOT NULL, test text NOT NULL, profile text NOT NULL,
    run_id text NOT NULL, time timestamptz NOT NULL, commit text NOT NULL,
    vllm_version text NOT NULL, model text NOT NULL, platform text NOT NULL,
    profile_hash text NOT NULL, passes integer NOT NULL, metric text NOT NULL,
    value double precision, spread double precision,
    PRIMARY KEY (hardware_class, test, profile, run_id, metric))"""


def is_postgres(target: str | Path) -> bool:
    return str(target).startswith(("postgresql://", "postgres://"))


def _connect(url: str) -> Any:
    """A pg8000 connection (Otava's own PostgreSQL driver) for ``postgresql://`` URLs."""
    from urllib.parse import unquote, urlsplit

    try:
        import pg8000.native
    except ImportError as exc:
        raise HistoryError(
            "a PostgreSQL history needs pg8000: pip install 'pytest-vllm-perf[history]'"
        ) from exc
    parts = urlsplit(url)
    try:
        return pg8000.native.Connection(
            unquote(parts.username or "postgres"), host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432, database=(parts.path or "/").lstrip("/") or None,
            password=unquote(parts.password) if parts.password else None, timeout=30,
        )  # fmt: skip
    except (OSError, pg8000.native.Error) as exc:  # the password never reaches the message
        raise HistoryError(f"{parts.hostname}:{parts.port}: PostgreSQL: {exc}") from exc


def pg_append(url: str, rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Append ``rows`` to the PostgreSQL history in one transaction; a run already
    there is left out. One line per series touched."""
    con = _connect(url)
    try:
        con.run(_PG_SCHEMA)
        con.run("BEGIN")
        counts: dict[tuple[str, str, str], int] = {}
        for row in rows:
            key = (row["hardware_class"], row["test"], row["profile"])
            metrics = [k for k in row if k not in COLUMNS and not k.endswith(SPREAD)]
            added = 0
            for metric in metrics:
                value, spread = row[metric], row.get(metric + SPREAD, "")
                done = con.run(
                    "INSERT INTO vllm_perf_history VALUES (:hw, :test, :profile, :run_id, :time, "
                    ":commit, :vllm, :model, :platform, :hash, :passes, :metric, :value, "
                    ":spread) ON CONFLICT DO NOTHING RETURNING 1",
                    hw=key[0], test=key[1], profile=key[2], run_id=row["run_id"],
                    time=row["time"], commit=row["commit"], vllm=row["vllm_version"],
                    model=row["model"], platform=row["platform"], hash=row["profile_hash"],
                    passes=int(row["passes"]), metric=metric,
                    value=float(value) if value else None,
                    spread=float(spread) if spread else None,
                )  # fmt: skip
                added = added or bool(done)
            counts[key] = counts.get(key, 0) + int(added)
        con.run("COMMIT")
        lines = []
        for (hw, test, profile), added in counts.items():
            [[runs]] = con.run(
                "SELECT count(DISTINCT run_id) FROM vllm_perf_history "
                "WHERE hardware_class = :hw AND test = :test AND profile = :profile",
                hw=hw, test=test, profile=profile,
            )  # fmt: skip
            lines.append(f"{PG_TABLE} {hw}/{test}--{profile}: {runs} run(s), {added} appended")
        return lines
    finally:
        con.close()


def pg_analyze(url: str, max_pvalue: float = 0.001, window: int = 30) -> list[ChangePoint]:
    """Otava's change points in every series of the PostgreSQL history."""
    con = _connect(url)
    try:
        con.run(_PG_SCHEMA)
        found = []
        series = con.run(
            "SELECT DISTINCT hardware_class, test, profile FROM vllm_perf_history ORDER BY 1, 2, 3"
        )
        for hw, test, profile in series:
            records = con.run(
                "SELECT run_id, time, commit, platform, metric, value FROM vllm_perf_history "
                "WHERE hardware_class = :hw AND test = :test AND profile = :profile "
                "ORDER BY time, run_id",
                hw=hw, test=test, profile=profile,
            )  # fmt: skip
            runs: dict[str, dict[str, str]] = {}
            stamps: dict[str, int] = {}
            for run_id, time, commit, platform, metric, value in records:
                row = runs.setdefault(
                    run_id, {"time": time.isoformat(), "commit": commit, "platform": platform}
                )
                stamps[run_id] = int(time.timestamp())
                row[metric] = "" if value is None else repr(value)
            metrics = sorted({m for r in runs.values() for m in r} - {"time", "commit", "platform"})
            found += _change_points(
                f"{_slug(hw)}/{_slug(test)}--{_slug(profile)}", list(runs.values()),
                [stamps[k] for k in runs], metrics, max_pvalue, window,
            )  # fmt: skip
        return found
    finally:
        con.close()


def _commit() -> str:
    """The commit being measured: $GITHUB_SHA in a workflow, else git's HEAD, else ''."""
    found = os.environ.get("GITHUB_SHA") or baseline.commit_info()["id"] or ""
    return str(found)[:12]


def _load_report(path: Path) -> Mapping[str, Any]:
    try:
        return reports.read_report(path)
    except BaselineError as exc:
        raise HistoryError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    try:
        if args.action == "append":
            time = args.time or datetime.now(UTC).isoformat(timespec="seconds")
            _epoch(time, Path("--time"), 0)
            commit = args.commit if args.commit is not None else _commit()
            rows = [r for p in args.reports for r in rows_of(_load_report(p), time, commit)]
            done = pg_append(args.to, rows) if is_postgres(args.to) else append(Path(args.to), rows)
            print("\n".join(done) or "no result in the reports")
            return 0
        if is_postgres(args.root):
            points = pg_analyze(args.root, args.max_pvalue, args.window)
            where = PG_TABLE
        else:
            files = sorted(Path(args.root).rglob("*.csv"))
            if not files:
                raise HistoryError(f"{args.root}: no history file (*.csv)")
            points = [cp for path in files for cp in analyze(path, args.max_pvalue, args.window)]
            where = f"{len(files)} file(s)"
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
