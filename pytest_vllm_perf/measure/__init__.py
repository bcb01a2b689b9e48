"""One perf test end to end, as plain Python: server -> load -> records -> statistics -> verdict.

This is what the ``vllm_perf`` fixture calls; scripts and benchmarks (``bench/``)
call it too, so they measure exactly what the tests measure. Thresholds and
tolerances are layered here, in one place:

- thresholds: ``{"failed": 0}`` < profile < marker < code;
- tolerances: the registry's defaults for the platform < ini < profile < marker < code.
"""

from pytest_vllm_perf.measure.ab import Turns, alternation, blocks, run_ab
from pytest_vllm_perf.measure.capacity import (
    CapacityRun,
    capacity_ab,
    capacity_gate,
    capacity_search,
    describe,
    judged,
)
from pytest_vllm_perf.measure.modes import Resident, Sequential
from pytest_vllm_perf.measure.plan import (
    DEFAULT_THRESHOLDS,
    Plan,
    assemble,
    layered,
    measure,
    run_sync,
    run_test,
)
from pytest_vllm_perf.verdict.gate import SaveMode

__all__ = [
    "DEFAULT_THRESHOLDS",
    "CapacityRun",
    "Plan",
    "Resident",
    "SaveMode",
    "Sequential",
    "Turns",
    "alternation",
    "assemble",
    "blocks",
    "capacity_ab",
    "capacity_gate",
    "capacity_search",
    "describe",
    "judged",
    "layered",
    "measure",
    "run_ab",
    "run_sync",
    "run_test",
]
