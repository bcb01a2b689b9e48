"""CI's file scheduling: no long file queued behind another long one.

pytest-xdist's ``--dist loadfile`` hands a worker its next file as soon as the current
one has two tests or fewer left (a worker runs a test only once it knows the next), so
that file waits behind them. Behind a long test, a long file waited for it while other
workers sat idle: a 57 s file behind the 67 s capacity search ended a fresh-clone CI run
of ff0f829 36 s after the other workers. This scheduler keeps xdist's order but, where
the last file a worker has yet to finish is a long one, queues the first short file
behind it instead: a long file waits behind a short one or behind nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling


class LookAheadScheduling(LoadFileScheduling):
    """``--dist loadfile``, with a long file never the look-ahead of another."""

    def __init__(self, config: pytest.Config, log: Any, long: Callable[[str], bool]) -> None:
        super().__init__(config, log)
        self._long = long

    def _assign_work_unit(self, node: Any) -> None:
        assigned = self.assigned_work.get(node, {})
        # the file the new one would wait behind: the last of the worker's unfinished ones
        waiting = [scope for scope, unit in assigned.items() if not all(unit.values())]
        if waiting and self._long(waiting[-1]) and self._long(next(iter(self.workqueue))):
            short = next((s for s in self.workqueue if not self._long(s)), None)
            if short is not None:
                self.workqueue.move_to_end(short, last=False)
        super()._assign_work_unit(node)
