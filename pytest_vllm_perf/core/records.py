"""Plain frozen records that cross module boundaries, in the order data flows.

request -> pass -> measurement -> threshold checks and metric verdicts -> gate
result -> outcome. None of them holds a live object (a server, a session, a file
handle), so a report, a plot or the CLI can be built from stored JSON alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pytest_vllm_perf.core.workload import Workload

__all__ = [
    "ABMode",
    "Check",
    "Cost",
    "Environment",
    "GateResult",
    "GateStatus",
    "GaugeReading",
    "Measurement",
    "MetricVerdict",
    "Outcome",
    "PassRecord",
    "Platform",
    "Progress",
    "Provenance",
    "RequestRecord",
    "Verdict",
]

Platform = Literal["cpu", "cuda"]
# how an A/B run keeps its sides: both up, or one booted at a time (measure.run_ab)
ABMode = Literal["resident", "sequential"]
Progress = Callable[[str], None]  # where progress lines go during long boots and runs


@dataclass(frozen=True)
class RequestRecord:
    """One request's timeline, in seconds; ``start`` is relative to the start of the run.

    As ``vllm bench serve`` measures them: ``ttft`` is the time to the first streamed
    chunk that has a choice (its text may be empty: byte-level tokenizers stream
    partial characters as empty chunks), ``itl`` the gaps between consecutive such
    chunks, and ``e2el`` ends at the last of them. ``error`` is None only for a
    request that returned every token it asked for.
    """

    cls: str
    start: float
    ttft: float | None
    itl: tuple[float, ...]
    e2el: float
    prompt_tokens: int
    output_tokens: int
    expected_output_tokens: int
    error: str | None = None
    turn: int = 1  # the turn of a conversation this request was (multi-turn classes)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (E2EL - TTFT) / (tokens - 1)."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord:
        return cls(**{**data, "itl": tuple(data.get("itl", ()))})


@dataclass(frozen=True)
class PassRecord:
    """One pass of a workload; passes run back to back on the same server.

    Requests inside one pass share batches and queues, so passes, not requests,
    are the independent units whose spread is the run-to-run noise a gate must
    beat. Pass ``index`` k replays the seeded schedule ``workload.seed + k``, so
    pass k of two runs can be paired. ``start_s`` is the pass's offset in the run,
    the time base of its records' ``start``.

    ``records`` hold the requests whose latencies are measured: those started during
    the ramp-up (``ramp_s``, while closed-loop users are still joining) are left out
    and kept in ``ramp_records``. Throughput is counted over the **window**
    ``[start_s + ramp_s, start_s + ramp_s + duration_s]``: the tokens of every
    request (ramp-up ones too) that streamed inside it, over its length. In the
    steady shape the window ends at the pass's deadline, so the drain (concurrency
    falling to zero while the last requests finish, ``drain_s``) is never counted as
    measured time; in the bench-serve shape it ends at the last response, as in
    ``vllm bench serve``. ``elapsed_s`` is the whole pass, ramp-up and drain included:
    the span over which ``counters`` (server counter deltas, read at the pass's
    boundaries; NaN where a read failed) were taken.
    """

    records: tuple[RequestRecord, ...]
    duration_s: float
    start_s: float = 0.0
    index: int = 0
    counters: Mapping[str, float] = field(default_factory=dict)
    ramp_s: float = 0.0
    ramp_requests: int = 0
    drain_s: float = 0.0
    overloaded: str = ""  # why the pass measured a growing queue, or empty
    ramp_records: tuple[RequestRecord, ...] = ()
    elapsed_s: float = 0.0
    # how late the client's event loop woke (p99 over the pass, ms; NaN: not measured):
    # every chunk's time is taken on that loop, so a lag near the gaps it times means
    # the client, not the server, set them
    client_lag_p99_ms: float = math.nan
    # the pass's start as Unix time (NaN: not recorded), to line a pass up with a
    # monitor's series (nvidia-smi, DCGM) over the same ``counted_s``
    started_unix: float = math.nan

    @property
    def window(self) -> tuple[float, float]:
        """The throughput window, in the run's time base."""
        begin = self.start_s + self.ramp_s
        return begin, begin + self.duration_s

    @property
    def counted_s(self) -> float:
        """The span the counters cover (older records lack ``elapsed_s``)."""
        return self.elapsed_s or self.ramp_s + self.duration_s + self.drain_s


@dataclass(frozen=True)
class GaugeReading:
    """One read of the server's gauges, ``t`` seconds after the start of the run."""

    t: float
    kv_cache_usage: float | None
    waiting: float | None


@dataclass(frozen=True)
class Environment:
    """What a result ran on: the keys of a baseline and the facts a reviewer checks."""

    platform: str
    hardware_class: str
    vllm_version: str | None
    torch_version: str | None
    python_version: str
    model: str = ""
    parallelism: Mapping[str, object] = field(default_factory=dict)
    device_env: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "parallelism": dict(self.parallelism)}


@dataclass(frozen=True)
class Provenance:
    """Where a measurement came from, built once when its server is ready."""

    profile: str
    profile_settings: Mapping[str, Any]
    profile_hash: str
    engine_argv: tuple[str, ...]
    engine_notes: tuple[str, ...]
    environment: Environment
    boot_s: float | None = None
    # why its passes have no GPU energy (``serving.energy``); "" where NVML measured it
    energy_note: str = ""


@dataclass(frozen=True)
class Measurement:
    """One workload run: its passes, gauges, and metrics pooled and per pass.

    ``metrics`` pool every pass (what thresholds check); ``pass_metrics[k]`` are the
    same metrics of pass k alone (what verdicts compare).
    """

    workload: Workload
    passes: tuple[PassRecord, ...]
    metrics: Mapping[str, float]
    pass_metrics: tuple[Mapping[str, float], ...]
    gauges: tuple[GaugeReading, ...] = ()

    @property
    def records(self) -> tuple[RequestRecord, ...]:
        return tuple(r for p in self.passes for r in p.records)

    @property
    def duration_s(self) -> float:
        """Measured time, summed over passes (the throughput denominator)."""
        return sum(p.duration_s for p in self.passes)

    @property
    def failures(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]

    @property
    def overloaded(self) -> list[str]:
        return [f"pass {p.index + 1}: {p.overloaded}" for p in self.passes if p.overloaded]


@dataclass(frozen=True)
class Check:
    """One threshold applied to one measured value."""

    key: str
    metric: str
    limit: float
    measured: float | None
    lower_bound: bool = False

    @property
    def passed(self) -> bool:
        if self.measured is None or self.measured != self.measured:  # missing or NaN
            return False
        return self.measured >= self.limit if self.lower_bound else self.measured <= self.limit


class Verdict(StrEnum):
    """What the gate concluded for one metric."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"


class GateStatus(StrEnum):
    """What the gate did with one outcome."""

    SAVED = "saved"
    BOOT_ADDED = "boot added"
    MISSING = "no baseline"
    COMPARED = "compared"
    WORKLOAD_CHANGED = "workload changed"
    OTHER_HARDWARE = "other hardware"
    # compared and shown, not gated: the baseline was measured with another vLLM release
    OTHER_RELEASE = "other release"
    # compared and shown, not gated: the baseline was measured on another model
    OTHER_MODEL = "other model"
    # under --vllm-require-baseline: no baseline of this hardware holds two boots, so
    # its boot drift is the platform's figure alone (``verdict.drift``)
    ONE_BOOT = "one boot"
    AB = "a/b"  # compared with the base side of an A/B run, not with a stored baseline


@dataclass(frozen=True)
class MetricVerdict:
    """One metric compared: ratio current / baseline, its 95% interval, the verdict.

    ``p_value`` is the two-sided p of "no change beyond the tolerance" (and the drift
    allowance) from the test whose interval is shown, or, where ``margin`` is set (an
    A/B run's sequential decision), the one-sided p of "no change worse than
    x(1 + margin)"; NaN where a rule decided (a current side that could not be
    measured; ``failed``, whose exact test is in its ``basis``). ``p_holm`` is it
    adjusted over the test's gated metrics. ``gated`` metrics fail the test on
    ``regressed``; the others are reported only.
    """

    metric: str
    baseline: float
    current: float
    ratio: float
    low: float
    high: float
    tolerance: float
    verdict: Verdict
    basis: str = ""
    p_value: float = float("nan")
    p_holm: float = float("nan")
    gated: bool = True
    # the decision's one-sided test: ``p_value`` is then the p of "no change worse than
    # x(1 + margin)", compared (Holm-adjusted) with ``level``; NaN otherwise
    margin: float = float("nan")
    level: float = float("nan")
    # the ratio's one-sided bounds at the levels the decision used (the margin's test at
    # its Holm step, the tolerance's at its own): ``regressed`` where the bound on the
    # worse side clears x(1 + margin), ``unchanged`` where the other stays inside
    # x(1 + tolerance); NaN where no t test decided
    bounds: tuple[float, float] = (float("nan"), float("nan"))


@dataclass(frozen=True)
class GateResult:
    """What the gate concluded for one outcome."""

    status: GateStatus
    path: Path
    verdicts: tuple[MetricVerdict, ...] = ()
    changes: tuple[str, ...] = ()
    note: str = ""

    @property
    def regressions(self) -> list[MetricVerdict]:
        return [v for v in self.verdicts if v.gated and v.verdict is Verdict.REGRESSED]

    def summary(self) -> str:
        """One word per outcome for tables: the worst gated verdict, or the status;
        ``inconclusive`` when nothing was gated (nothing was decided, as
        ``bisect.step_verdict`` has it), not ``unchanged``."""
        if self.status not in (GateStatus.COMPARED, GateStatus.AB):
            return str(self.status)
        order = (Verdict.REGRESSED, Verdict.INCONCLUSIVE, Verdict.IMPROVED, Verdict.UNCHANGED)
        found = {v.verdict for v in self.verdicts if v.gated}
        return str(next((v for v in order if v in found), Verdict.INCONCLUSIVE))


@dataclass(frozen=True)
class Cost:
    """What one test spent: seconds the pool spent booting servers for it, seconds of
    the rest (its warmups, passes and verdicts), and the GPUs held meanwhile (0 on the
    CPU engine; a share of one where pytest-xdist workers share a GPU, 0.5 for two):
    GPU-seconds are seconds times ``gpus``. Its GPUs' energy is a metric
    of its passes (``energy_j``), not of this record."""

    boot_s: float
    load_s: float
    gpus: float

    @property
    def gpu_boot_s(self) -> float:
        return self.boot_s * self.gpus

    @property
    def gpu_load_s(self) -> float:
        return self.load_s * self.gpus

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "gpu_boot_s": self.gpu_boot_s,
            "gpu_load_s": self.gpu_load_s,
        }


@dataclass(frozen=True)
class Outcome:
    """One test's measurement under one profile: provenance, checks and gate result.

    ``base`` is the base side's measurement of an A/B run (its passes pair with
    ``result``'s), kept so that reports can show, and benchmarks re-judge, both sides.
    ``search`` is a capacity test's search as plain data (its class, SLO, and each
    side's rates, margins and fit): its ``result`` holds ``capacity_rps`` alone, and
    its ``gate`` that metric's verdict, so that it reaches every report as a metric.
    """

    test_id: str
    provenance: Provenance
    result: Measurement
    checks: tuple[Check, ...]
    gate: GateResult | None = None
    base: Measurement | None = None
    search: Mapping[str, Any] | None = None
    cost: Cost | None = None  # set when the test's run is collected (the fixture)

    @property
    def profile(self) -> str:
        return self.provenance.profile

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)
