"""Where a CI run's time goes: which worker ran which file, and when each ended.

As a pytest plugin (``-p bench.ci_timeline``, with CI_TIMELINE_OUT naming a file), the
controller of a ``pytest -n N`` run appends one line per finished test (seconds since
the session began, the worker, the test) and one per worker that shut down. As a
script, it prints each worker's chain of files from such a file, the files that took
more than a few seconds with the second each ended:

    python bench/ci_timeline.py TIMELINE [--min-s 4]

``bench/ci_timeline.sh`` runs a fresh clone's ``make setup`` and ``make test`` with it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

_T0 = time.monotonic()


def _write(line: str) -> None:
    out = os.environ.get("CI_TIMELINE_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(f"{time.monotonic() - _T0:8.1f} {line}\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(getattr(report, "node", None), "gateway", None)
    if report.when == "teardown" and node is not None:  # the controller's copy
        _write(f"{node.id} {report.nodeid}")


def pytest_testnodedown(node: object, error: object) -> None:
    _write(f"{node.gateway.id} WORKER-DOWN")  # type: ignore[attr-defined]


def chains(lines: list[str], min_s: float) -> list[str]:
    """Per worker, the files it ran in order, each with when it ended and how long
    since the worker's previous file ended; files shorter than ``min_s`` are merged."""
    ended: dict[str, dict[str, float]] = defaultdict(dict)
    for line in lines:
        at, worker, what = line.split(None, 2)
        ended[worker][what.split("::")[0]] = float(at)
    out = []
    for worker in sorted(ended):
        out.append(worker)
        previous = 0.0
        for name, at in ended[worker].items():
            if at - previous >= min_s or name == "WORKER-DOWN":
                out.append(f"  {at:6.1f} s  (+{at - previous:5.1f})  {name}")
                previous = at
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--min-s", type=float, default=4.0)
    args = parser.parse_args()
    print("\n".join(chains(args.timeline.read_text().splitlines(), args.min_s)))


if __name__ == "__main__":
    main()
