"""``python -m pytest_vllm_perf.cli table [STORE]``: side-by-side tables from stored baselines.

Committed baselines hold every pass's metrics, so the profile comparison a
session printed can be regenerated (and reviewed) from the JSON alone, on any
machine. This reads files only: it imports nothing that starts a server.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.report import text
from pytest_vllm_perf.verdict import baseline

__all__ = ["main", "sides"]


def sides(store: Path, hardware: str | None, profiles: list[str]) -> list[text.Side]:
    """Every stored baseline of one hardware class, ordered by test, then ``profiles``."""
    order = {name: i for i, name in enumerate(profiles)}
    found = []
    for path in sorted(store.glob("*/*/*.json")):
        if hardware and path.parent.parent.name != baseline.slug(hardware):
            continue
        stored = baseline.load(path)
        if stored is None or (profiles and stored.profile not in order):
            continue
        found.append(stored)
    found.sort(key=lambda b: (b.test, order.get(b.profile, len(order))))
    return [text.Side(b.test, b.profile, b.boots, b.metrics) for b in found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_vllm_perf.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    table = sub.add_parser("table", help="side-by-side profile tables from a baseline store")
    table.add_argument("store", nargs="?", default=".vllm-perf", type=Path)
    table.add_argument("--hardware", help="hardware class, e.g. '1x NVIDIA H200'")
    table.add_argument(
        "--profiles", default="", help="comma-separated order; first is the reference"
    )
    args = parser.parse_args(argv)
    names = [p for p in args.profiles.split(",") if p]
    try:
        lines = text.side_by_side(sides(args.store, args.hardware, names))
    except BaselineError as exc:
        print(exc, file=sys.stderr)
        return 2
    print("\n".join(lines).strip() or "no test has baselines under two or more profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
