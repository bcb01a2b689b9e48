"""pytest-vllm-perf: gate vLLM serving configurations on TTFT, ITL and preemptions.

The public surface, for annotations and for scripts that measure without pytest::

    from pytest_vllm_perf import PerfFixture, Workload

    def test_decode(vllm_perf: PerfFixture) -> None:
        outcome = vllm_perf.run("decode")

Data flows one way, as plain frozen records: profile -> server -> load ->
records -> statistics -> verdict -> report (docs/architecture.md).
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.core.errors import (
    BaselineError,
    ProfileError,
    ServerError,
    ThresholdError,
    VllmPerfError,
    WorkloadError,
)
from pytest_vllm_perf.core.records import (
    Check,
    GateResult,
    GateStatus,
    Measurement,
    MetricVerdict,
    Outcome,
    PassRecord,
    Provenance,
    RequestRecord,
    Verdict,
)
from pytest_vllm_perf.core.registry import METRICS, MetricDef
from pytest_vllm_perf.core.workload import RequestClass, Workload

if TYPE_CHECKING:
    from pytest_vllm_perf.fixture import PerfFixture


def __getattr__(name: str) -> Any:
    """``PerfFixture`` is imported on first use: it pulls in the serving layer, which
    ``vllm-perf table`` (files only) must not import."""
    if name == "PerfFixture":
        from pytest_vllm_perf.fixture import PerfFixture

        return PerfFixture
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


try:
    __version__ = metadata.version("pytest-vllm-perf")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "METRICS",
    "BaselineError",
    "Check",
    "GateResult",
    "GateStatus",
    "Measurement",
    "MetricDef",
    "MetricVerdict",
    "Outcome",
    "PassRecord",
    "PerfFixture",
    "Profile",
    "ProfileError",
    "Provenance",
    "RequestClass",
    "RequestRecord",
    "ServerError",
    "ThresholdError",
    "Verdict",
    "VllmPerfError",
    "Workload",
    "WorkloadError",
    "__version__",
]
