"""``vllm-perf merge REPORT... [--json OUT] [--markdown OUT]``: the ``--vllm-json``
reports of a run's shards (``--vllm-shard=K/N``, one CI job each) joined into one
report, one summary and one exit status.

The shards must be of one run: the same N, every K from 1 to N once, and the same run
budgets and test counts (each shard's tests were judged at their share of the whole
run's budget, so the merged run keeps ``--vllm-ab-run-alpha`` and
``--vllm-stored-run-alpha``). A missing shard fails the merge, as a regression or a
missed threshold in any shard does; a result twice, or shards of different runs, is
an error (exit 2) naming the files. Each shard job's own exit status still counts: a
test that errored before it measured leaves no result to merge.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.report import formats
from pytest_vllm_perf.report.merged import merge, summary
from pytest_vllm_perf.report.view import View
from pytest_vllm_perf.store import reports

__all__ = ["main", "merge"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-perf merge", description="join the --vllm-json reports of a run's shards"
    )
    parser.add_argument("reports", nargs="+", type=Path, help="each shard's --vllm-json report")
    parser.add_argument("--json", type=Path, help="write the merged report here")
    parser.add_argument("--markdown", type=Path, help="write the merged summary here")
    parser.add_argument("--html", type=Path, help="write the merged report as HTML here")
    args = parser.parse_args(argv)
    try:
        doc, missing = merge([(str(p), reports.read_report(p)) for p in args.reports])
    except BaselineError as exc:
        print(exc, file=sys.stderr)
        return 2
    lines, headline = summary(doc, missing)
    paths = {"vllm_json": args.json, "vllm_markdown": args.markdown, "vllm_html": args.html}
    formats.write(View(doc, headline, missing=tuple(missing)), paths, None)
    print("\n".join([*lines, headline.text]))
    return 1 if headline.failed else 0


if __name__ == "__main__":
    sys.exit(main())
