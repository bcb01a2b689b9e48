"""CI's scheduler (tests/lookahead.py): where the next file is a long one and a worker
has a file of its own to finish, it gets a spacer first, so that the long file goes to
a worker about to be free. Broken on purpose (the override removed), the queue's order
is followed and the first test fails; with the old rule (a spacer only behind a long
file), the second fails."""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path

from tests.conftest import LONG as CI_LONG
from tests.conftest import SPACERS, TIMED
from tests.lookahead import LookAheadScheduling

LONG = {"engine_a.py", "engine_b.py", "engine_c.py", "engine_d.py"}
SPACER = {"unit_b.py", "unit_c.py"}
FILES = {
    "engine_a.py": ["engine_a.py::t"],
    "engine_b.py": ["engine_b.py::t"],
    "unit_a.py": ["unit_a.py::t1", "unit_a.py::t2"],  # short, not a spacer
    "engine_c.py": ["engine_c.py::t"],
    "engine_d.py": ["engine_d.py::t"],
    "unit_b.py": ["unit_b.py::t1", "unit_b.py::t2"],
    "unit_c.py": ["unit_c.py::t1", "unit_c.py::t2"],
}


class Node:
    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)


def scheduler(*nodes: Node) -> LookAheadScheduling:
    sched = LookAheadScheduling.__new__(LookAheadScheduling)
    sched._long = lambda scope: scope in LONG
    sched._spacer = lambda scope: scope in SPACER
    sched.workqueue = OrderedDict(
        (scope, dict.fromkeys(ids, False)) for scope, ids in FILES.items()
    )
    sched.assigned_work = {}
    collection = [i for ids in FILES.values() for i in ids]
    sched.registered_collections = dict.fromkeys(nodes, collection)
    return sched


def files_of(sched: LookAheadScheduling, node: Node) -> list[str]:
    return list(sched.assigned_work[node])


def done(sched: LookAheadScheduling, node: Node, scope: str) -> None:
    for nodeid in sched.assigned_work[node][scope]:
        sched.assigned_work[node][scope][nodeid] = True


def test_a_long_file_waits_behind_a_spacer_and_goes_where_one_runs():
    first, second = Node(), Node()
    sched = scheduler(first, second)
    sched._assign_work_unit(first)  # nothing running there: the queue's head, long
    sched._assign_work_unit(first)  # its look-ahead: not engine_b, the first spacer
    assert files_of(sched, first) == ["engine_a.py", "unit_b.py"]
    sched._assign_work_unit(second)  # nothing running: the head, long
    sched._assign_work_unit(second)  # the head is short: it may wait behind engine_b
    assert files_of(sched, second) == ["engine_b.py", "unit_a.py"]
    # engine_a done: the worker runs a spacer now, and the long head follows it
    done(sched, first, "engine_a.py")
    sched._assign_work_unit(first)
    assert files_of(sched, first) == ["engine_a.py", "unit_b.py", "engine_c.py"]
    # engine_b still runs on the other: the next spacer, not engine_d
    sched._assign_work_unit(second)
    assert files_of(sched, second)[-1] == "unit_c.py"


def test_a_long_file_waits_behind_a_spacer_where_a_short_file_runs_too():
    """A short file that is no spacer may still run for half a minute (test_gate_runs.py):
    the long file behind it would wait that long."""
    node = Node()
    sched = scheduler(node)
    del sched.workqueue["engine_a.py"], sched.workqueue["engine_b.py"]
    sched._assign_work_unit(node)  # unit_a, the head
    sched._assign_work_unit(node)  # engine_c would wait behind unit_a: a spacer instead
    assert files_of(sched, node) == ["unit_a.py", "unit_b.py"]
    done(sched, node, "unit_a.py")
    sched._assign_work_unit(node)  # only a spacer left to finish: the long file follows
    assert files_of(sched, node)[-1] == "engine_c.py"


def test_with_no_spacer_left_a_long_one_is_the_look_ahead():
    node = Node()
    sched = scheduler(node)
    for scope in ("unit_a.py", "unit_b.py", "unit_c.py"):
        del sched.workqueue[scope]
    sched._assign_work_unit(node)
    sched._assign_work_unit(node)
    assert files_of(sched, node) == ["engine_a.py", "engine_b.py"]
    assert len(node.sent) == 2  # each file's tests sent to the worker


def test_ci_spacers_are_unit_files_of_two_tests_or_more_that_time_nothing():
    """A spacer of one test would let the long file be handed out while the file the
    spacer waits behind still runs (xdist hands out the next file at two tests left)."""
    root = Path(__file__).resolve().parents[2]
    for scope in SPACERS:
        text = (root / scope).read_text()
        assert len(re.findall(r"^def test_", text, re.M)) >= 2, scope
        assert scope not in TIMED and scope not in CI_LONG, scope
        assert "fake_vllm" not in text and "time.sleep" not in text, scope
