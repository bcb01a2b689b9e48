"""CI's scheduler (tests/lookahead.py): a worker running a long file gets a short one as
its look-ahead, and a long file goes where a short one runs. Broken on purpose (the
override removed), the queue's order is followed and the first test fails."""

from __future__ import annotations

from collections import OrderedDict

from tests.lookahead import LookAheadScheduling

LONG = {"engine_a.py", "engine_b.py", "engine_c.py", "engine_d.py"}
FILES = {
    "engine_a.py": ["engine_a.py::t"],
    "engine_b.py": ["engine_b.py::t"],
    "unit_a.py": ["unit_a.py::t1", "unit_a.py::t2"],
    "engine_c.py": ["engine_c.py::t"],
    "engine_d.py": ["engine_d.py::t"],
    "unit_b.py": ["unit_b.py::t"],
    "unit_c.py": ["unit_c.py::t"],
}


class Node:
    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)


def scheduler(*nodes: Node) -> LookAheadScheduling:
    sched = LookAheadScheduling.__new__(LookAheadScheduling)
    sched._long = lambda scope: scope in LONG
    sched.workqueue = OrderedDict(
        (scope, dict.fromkeys(ids, False)) for scope, ids in FILES.items()
    )
    sched.assigned_work = {}
    collection = [i for ids in FILES.values() for i in ids]
    sched.registered_collections = dict.fromkeys(nodes, collection)
    return sched


def files_of(sched: LookAheadScheduling, node: Node) -> list[str]:
    return list(sched.assigned_work[node])


def test_a_long_file_gets_a_short_look_ahead_and_a_long_one_waits_for_a_short_runner():
    first, second = Node(), Node()
    sched = scheduler(first, second)
    sched._assign_work_unit(first)  # nothing running there: the queue's head, long
    sched._assign_work_unit(first)  # its look-ahead: not engine_b but the first short
    assert files_of(sched, first) == ["engine_a.py", "unit_a.py"]
    sched._assign_work_unit(second)  # nothing running: the head, long
    sched._assign_work_unit(second)  # behind engine_b: the short one, past engine_c
    assert files_of(sched, second) == ["engine_b.py", "unit_b.py"]
    # engine_a done: the worker runs a short file now, and a long one may follow it
    sched.assigned_work[first]["engine_a.py"]["engine_a.py::t"] = True
    sched._assign_work_unit(first)
    assert files_of(sched, first) == ["engine_a.py", "unit_a.py", "engine_c.py"]
    # but not a second long one behind that, though the short file still runs
    sched._assign_work_unit(first)
    assert files_of(sched, first)[-1] == "unit_c.py", files_of(sched, first)


def test_with_only_long_files_left_a_long_one_is_the_look_ahead():
    node = Node()
    sched = scheduler(node)
    for scope in ("unit_a.py", "unit_b.py", "unit_c.py"):
        del sched.workqueue[scope]
    sched._assign_work_unit(node)
    sched._assign_work_unit(node)
    assert files_of(sched, node) == ["engine_a.py", "engine_b.py"]
    assert len(node.sent) == 2  # each file's tests sent to the worker
