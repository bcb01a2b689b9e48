"""``vllm-perf table``, ``promote`` and ``benchmark-json``: baseline-store commands that
read files only: they import nothing that starts a server.

- ``table [STORE]``: side-by-side tables from stored baselines. Committed
  baselines hold every pass's metrics, so the profile comparison a session
  printed can be regenerated (and reviewed) from the JSON alone, on any machine.
- ``promote REPORT... [--store DIR] [--add]``: baselines from ``--vllm-json``
  reports, one boot per report, in the order given. A GPU CI job's report is its
  artifact; promoting it needs neither push access on the runner nor a second
  run. Without ``--add`` the first report replaces the stored baseline; each
  later report (and every report with ``--add``) is added as a boot, refused if
  its workload or profile differs. Files are written atomically.
- ``benchmark-json REPORT --out FILE``: the report in pytest-benchmark's JSON format
  (``report.benchjson``), which ``pytest-benchmark compare`` and dashboards read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.report import benchjson
from pytest_vllm_perf.report.sides import Side, side_by_side
from pytest_vllm_perf.store import baselines, naming, provenance
from pytest_vllm_perf.store import reports as report_io

__all__ = ["benchmark_json", "promote", "promote_main", "sides", "table"]


def sides(store: Path, hardware: str | None, profiles: list[str]) -> list[Side]:
    """Every stored baseline of one hardware class, ordered by test, then ``profiles``."""
    order = {name: i for i, name in enumerate(profiles)}
    found = []
    for path in sorted(store.glob("*/*/*.json")):
        if hardware and path.parent.parent.name != naming.slug(hardware):
            continue
        stored = baselines.load(path)
        if stored is None or (profiles and stored.profile not in order):
            continue
        found.append(stored)
    found.sort(key=lambda b: (b.test, order.get(b.profile, len(order))))
    return [Side(b.test, b.profile, b.boots, b.metrics) for b in found]


def promote(reports: Sequence[Path], store: Path, add: bool = False) -> list[str]:
    """Write the results of ``reports`` into ``store``; one line per baseline written."""
    docs: dict[Path, dict[str, Any]] = {}
    skipped: list[str] = []
    for report in reports:
        for result in report_io.read_report(report).results:
            if result.capacity is not None:  # a search keeps its rates, not their figures
                skipped.append(f"{report}: {result.test} is a capacity search: not promoted")
                continue
            fresh = report_io.from_report(result.to_json(), str(report))
            hardware = str(fresh["boots"][0]["environment"].get("hardware_class", "unknown"))
            path = naming.path_for(store, hardware, fresh["test"], fresh["profile"]["name"])
            if path in docs:
                docs[path] = baselines.merge_boots(docs[path], fresh, path)
            elif add and (stored := baselines.load(path)) is not None:
                docs[path] = baselines.merge_boots(stored.data, fresh, path)
            else:
                docs[path] = fresh
    lines = []
    for path, doc in docs.items():
        baselines.save(path, doc)
        name = doc["profile"]["name"]
        lines.append(f"{path}: {len(doc['boots'])} boot(s), {doc['test']} [{name}]")
    return lines + skipped


def table(argv: Sequence[str]) -> int:
    """``vllm-perf table [STORE] [--hardware H] [--profiles a,b]``."""
    parser = argparse.ArgumentParser(
        prog="vllm-perf table", description="side-by-side profile tables from a baseline store"
    )
    parser.add_argument("store", nargs="?", default=".vllm-perf", type=Path)
    parser.add_argument("--hardware", help="hardware class, e.g. '1x NVIDIA H200'")
    parser.add_argument(
        "--profiles", default="", help="comma-separated order; first is the reference"
    )
    args = parser.parse_args(argv)
    names = [p for p in args.profiles.split(",") if p]
    try:
        lines = side_by_side(sides(args.store, args.hardware, names))
    except BaselineError as exc:
        print(exc, file=sys.stderr)
        return 2
    print("\n".join(lines).strip() or "no test has baselines under two or more profiles")
    return 0


def promote_main(argv: Sequence[str]) -> int:
    """``vllm-perf promote REPORT... [--store DIR] [--add]``."""
    parser = argparse.ArgumentParser(
        prog="vllm-perf promote", description="baselines from --vllm-json reports, one boot each"
    )
    parser.add_argument("reports", nargs="+", type=Path, help="--vllm-json reports, oldest first")
    parser.add_argument("--store", default=".vllm-perf", type=Path, help="baseline store folder")
    parser.add_argument("--add", action="store_true", help="add boots to the stored baselines")
    args = parser.parse_args(argv)
    try:
        print("\n".join(promote(args.reports, args.store, args.add)))
    except BaselineError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


def benchmark_json(argv: Sequence[str]) -> int:
    """``vllm-perf benchmark-json REPORT --out FILE``."""
    parser = argparse.ArgumentParser(
        prog="vllm-perf benchmark-json", description="a --vllm-json report as pytest-benchmark JSON"
    )
    parser.add_argument("report", type=Path, help="a --vllm-json report")
    parser.add_argument("--out", required=True, type=Path, help="the pytest-benchmark JSON file")
    args = parser.parse_args(argv)
    try:
        doc = report_io.read_report(args.report)
    except BaselineError as exc:
        print(exc, file=sys.stderr)
        return 2
    written = benchjson.document(doc, provenance.commit_info())
    atomic.write_text(args.out, json.dumps(written, indent=2))
    print(
        f"{args.out}: {len(written['benchmarks'])} benchmark(s) from {len(doc.results)} result(s)"
    )
    return 0
