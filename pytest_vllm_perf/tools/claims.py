"""``vllm-perf claims FILE [--root DIR] [--readme docs/results.md [--check]]``: the
tuning-claims table (``report.claims``), each advice judged from the committed A/B
report it cites; ``--readme`` rewrites the file's ``<!-- claims -->`` block, ``--check``
exits 1 when that block no longer matches the results. A maintainer's command: it
regenerates this repository's docs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.report import claims

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-perf claims", description="the tuning-claims table from committed A/B reports"
    )
    parser.add_argument("file", type=Path, help="the claims YAML file")
    parser.add_argument("--root", default=Path(), type=Path, help="where its result paths start")
    parser.add_argument("--readme", type=Path, help="rewrite this file's <!-- claims --> block")
    parser.add_argument("--check", action="store_true", help="with --readme: exit 1 if stale")
    args = parser.parse_args(argv)
    try:
        table = claims.markdown([claims.evaluate(c, args.root) for c in claims.load(args.file)])
    except BaselineError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.readme is None:
        print(table)
        return 0
    old = args.readme.read_text(encoding="utf-8")
    new = claims.render(old, table)
    if args.check:
        if new != old:
            print(f"{args.readme}: the claims table is stale; rerun without --check")
            return 1
        return 0
    atomic.write_text(args.readme, new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
