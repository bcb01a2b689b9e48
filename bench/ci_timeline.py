"""Where a CI run's time goes: which worker ran which file, when each ended, and the
CPU seconds it took.

As a pytest plugin (``-p bench.ci_timeline``, with CI_TIMELINE_OUT naming a file), the
controller of a ``pytest -n N`` run appends one line per finished test (seconds since
the session began, the worker, the CPU seconds the worker and the processes it reaped
used during the test, the test) and one per worker that shut down. On two cores busy
throughout, CPU seconds, not a worker's wall, say what a file costs the run: a vLLM
server's processes count when they are reaped, a session-scoped server's at the last
test of its worker. As a script, it prints each worker's chain of files from such a
file, the files that took more than a few seconds with the second each ended and their
CPU seconds, then the files by CPU seconds:

    python bench/ci_timeline.py TIMELINE [--min-s 4]

``bench/ci_timeline.sh`` runs a fresh clone's ``make setup`` and ``make test`` with it.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest

_T0 = time.monotonic()
_CPU_KEY = "ci_timeline_cpu_s"
_last_cpu = [0.0]


def _cpu_s() -> float:
    """CPU seconds of this process and of the children it reaped (theirs included)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """On the worker, before the teardown's report is made: its CPU seconds since the
    last test's teardown ride in the report's user properties to the controller."""
    if call.when == "teardown":
        now = _cpu_s()
        item.user_properties.append((_CPU_KEY, round(now - _last_cpu[0], 2)))
        _last_cpu[0] = now


def _write(line: str) -> None:
    out = os.environ.get("CI_TIMELINE_OUT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(f"{time.monotonic() - _T0:8.1f} {line}\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(getattr(report, "node", None), "gateway", None)
    if report.when == "teardown" and node is not None:  # the controller's copy
        cpu = dict(report.user_properties).get(_CPU_KEY, 0.0)
        _write(f"{node.id} {cpu} {report.nodeid}")


def pytest_testnodedown(node: object, error: object) -> None:
    _write(f"{node.gateway.id} 0 WORKER-DOWN")  # type: ignore[attr-defined]


def chains(lines: list[str], min_s: float) -> list[str]:
    """Per worker, the files it ran in order, each with when it ended, how long since
    the worker's previous file ended and its CPU seconds; files shorter than ``min_s``
    are merged into the next. Then every file by CPU seconds, most first."""
    ended: dict[str, dict[str, float]] = defaultdict(dict)
    cpu: dict[str, float] = defaultdict(float)
    for line in lines:
        when, worker, used, what = line.split(None, 3)
        name = what.split("::")[0]
        ended[worker][name] = float(when)
        cpu[name] += float(used)
    out = []
    for worker in sorted(ended):
        out.append(worker)
        previous, pending = 0.0, 0.0
        for name, at in ended[worker].items():
            pending += cpu[name]
            if at - previous >= min_s or name == "WORKER-DOWN":
                out.append(f"  {at:6.1f} s  (+{at - previous:5.1f})  {pending:6.1f} cpu-s  {name}")
                previous, pending = at, 0.0
    cpu.pop("WORKER-DOWN", None)
    out.append(f"CPU seconds by file ({sum(cpu.values()):.0f} in all):")
    out += [f"  {used:6.1f}  {name}" for name, used in sorted(cpu.items(), key=lambda x: -x[1])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("timeline", type=Path)
    parser.add_argument("--min-s", type=float, default=4.0)
    args = parser.parse_args()
    print("\n".join(chains(args.timeline.read_text().splitlines(), args.min_s)))


if __name__ == "__main__":
    main()
