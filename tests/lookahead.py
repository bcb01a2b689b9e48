"""CI's file scheduling: a long file starts on the first worker to free up.

pytest-xdist's ``--dist loadfile`` hands a worker its next file as soon as the current
one has two tests or fewer left (a worker runs a test only once it knows the next), so
that file waits behind them. Behind a long test, a long file waited for it while other
workers sat idle: a 57 s file behind the 67 s capacity search ended a fresh-clone CI run
of ff0f829 36 s after the other workers. This scheduler keeps xdist's order but, where
the queue's next file is a long one and the worker still has a file to finish that is
not a spacer (a unit file of a few quick tests, ``spacer``), queues the first spacer
behind it instead: a long file is handed out only once the worker's own files are done
but for a spacer's last tests. Spacers, not just any short file: a short file of 30 s
(test_gate_runs.py) took that place and the 49 s test_gate.py was queued behind it, on
a worker 26 s from free while another freed 4 s later, and ended the run 27 s after the
next worker; a 52 s unit file did the same behind test_engine.py (fresh clone of
585cb34 beside a CPU-bound process, bench/ci_timeline.sh). A spacer has two tests or
more, so that the file it waits behind is done before the long one is handed out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling


class LookAheadScheduling(LoadFileScheduling):
    """``--dist loadfile``, with a long file handed out only to a worker about to be free."""

    def __init__(
        self,
        config: pytest.Config,
        log: Any,
        long: Callable[[str], bool],
        spacer: Callable[[str], bool],
    ) -> None:
        super().__init__(config, log)
        self._long = long
        self._spacer = spacer

    def _assign_work_unit(self, node: Any) -> None:
        assigned = self.assigned_work.get(node, {})
        # the file the new one would wait behind: the last of the worker's unfinished ones
        waiting = [scope for scope, unit in assigned.items() if not all(unit.values())]
        if waiting and not self._spacer(waiting[-1]) and self._long(next(iter(self.workqueue))):
            spacer = next((s for s in self.workqueue if self._spacer(s)), None)
            if spacer is not None:
                self.workqueue.move_to_end(spacer, last=False)
        super()._assign_work_unit(node)
