"""Declarative workloads: request classes, arrivals, duration, warmup, seed and gated metrics.

A workload is data, so it can come from a marker, a YAML file or code, be hashed
into a baseline key, and be reproduced exactly (seeded arrivals and prompts).
The built-in catalog and YAML loading live in ``config.workloads``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final, Literal, get_args

from pytest_vllm_perf.core import trace
from pytest_vllm_perf.core.errors import ThresholdError, WorkloadError
from pytest_vllm_perf.core.registry import metric

__all__ = ["RequestClass", "Shape", "Workload", "WorkloadError", "from_dict", "pass_count"]

# How closed-loop users start, and what a pass measures:
# - "steady": users join staggered over ``ramp_s``; latencies come from requests
#   started after the ramp-up, throughput from the tokens streamed between the end
#   of the ramp-up and the pass's deadline, the window in which every user is busy.
#   Prefills then land in every decode step, as in traffic whose users are out of step.
# - "bench-serve": as ``vllm bench serve --max-concurrency``: every user starts at
#   once, nothing is left out, and throughput is every token over the time to the
#   last response (the drain included). Users stay in step: a wave of prefills, then
#   decode steps without any. For checking this client against vB on one server.
Shape = Literal["steady", "bench-serve"]
SHAPES: Final = get_args(Shape)


@dataclass(frozen=True)
class RequestClass:
    """Requests of one shape, sent by closed-loop users or as Poisson arrivals.

    ``users`` keeps that many requests in flight back to back; ``rate`` sends
    requests at that mean rate per second, whatever the server's pace. ``text``
    sends words rather than token ids, so the API server has to tokenize them.
    ``shared_prompt`` sends one seeded prompt in every request of the class, as a
    long shared document or system prompt does: vLLM's prefix cache then serves
    its prefill, the GPU's share shrinks to the last block, and what the load
    measures is the API server's own work (tokenizing the text).
    """

    name: str
    prompt_tokens: int = 0
    output_tokens: int = 0
    users: int = 0
    rate: float = 0.0
    text: bool = False
    shared_prompt: bool = False
    # a JSON-lines trace (core.trace) whose arrivals and lengths the class replays,
    # its clock multiplied by ``time_scale`` (0.5: twice as fast)
    trace: str = ""
    time_scale: float = 1.0
    # closed-loop users hold conversations of this many turns: turn k sends the whole
    # history (each earlier message and a stand-in reply of output_tokens) plus a new
    # message of prompt_tokens, so the prefix cache can serve the history
    turns: int = 1

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise WorkloadError(f"class {self.name!r}: turns must be >= 1")
        if self.turns > 1 and (not self.users or self.shared_prompt):
            raise WorkloadError(
                f"class {self.name!r}: turns are held by closed-loop users (users > 0), "
                "each with a conversation of its own (no shared_prompt)"
            )
        if self.trace:
            if self.users or self.rate or self.prompt_tokens or self.output_tokens:
                raise WorkloadError(
                    f"class {self.name!r}: a trace sets the arrivals and token counts; "
                    "leave users, rate, prompt_tokens and output_tokens unset"
                )
            if self.shared_prompt:
                raise WorkloadError(
                    f"class {self.name!r}: a trace shares prompts through its hash_ids"
                )
            if self.time_scale <= 0:
                raise WorkloadError(f"class {self.name!r}: time_scale must be > 0")
            return
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise WorkloadError(f"class {self.name!r}: token counts must be >= 1")
        if (self.users > 0) == (self.rate > 0):
            raise WorkloadError(f"class {self.name!r}: set exactly one of users, rate and trace")


LATER_FIELDS: Final[dict[str, object]] = {
    "shared_prompt": False,
    "trace": "",
    "time_scale": 1.0,
    "turns": 1,
}
# top-level fields added later: they count in the hash only when set
LATER_WORKLOAD_FIELDS: Final[dict[str, object]] = {"shape": "steady"}


@dataclass(frozen=True)
class Workload:
    """Everything that decides what load a run sends."""

    name: str
    classes: tuple[RequestClass, ...]
    duration_s: float = 20.0
    warmup_requests: int = 2
    seed: int = 0
    request_timeout_s: float = 300.0
    ramp_s: float = 1.0
    shape: Shape = "steady"
    gate: tuple[str, ...] = field(default=(), compare=False)
    # gated on top of ``gate`` in an A/B run only: what one machine holds steady
    # between two resident servers, but stored baselines from other machines do not
    ab_gate: tuple[str, ...] = field(default=(), compare=False)
    # compared and shown in every mode, never gated: figures too noisy to decide at
    # the tolerances users care about, whose large moves a reader still sees
    report: tuple[str, ...] = field(default=(), compare=False)
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.classes:
            raise WorkloadError(f"workload {self.name!r} has no request classes")
        if self.duration_s <= 0:
            raise WorkloadError(f"workload {self.name!r}: duration_s must be > 0")
        if self.ramp_s < 0:
            raise WorkloadError(f"workload {self.name!r}: ramp_s must be >= 0")
        if self.shape not in SHAPES:
            raise WorkloadError(
                f"workload {self.name!r}: shape must be one of {', '.join(SHAPES)}, "
                f"got {self.shape!r}"
            )
        object.__setattr__(self, "gate", tuple(self.gate))
        object.__setattr__(self, "ab_gate", tuple(self.ab_gate))
        object.__setattr__(self, "report", tuple(self.report))
        names = {c.name for c in self.classes}
        for field_name in ("gate", "ab_gate", "report"):
            for key in getattr(self, field_name):
                try:
                    found = metric(key)
                except ThresholdError as exc:
                    raise WorkloadError(f"workload {self.name!r}: {field_name}: {exc}") from None
                cls = key.rpartition(".")[0]
                if found.tolerance is None or (cls and cls not in names):
                    raise WorkloadError(
                        f"workload {self.name!r}: {field_name}: {key!r} is not a compared "
                        f"metric of its classes ({', '.join(sorted(names))})"
                    )

    def check_classes(self, keys: Iterable[str], what: str) -> None:
        """ThresholdError for a class-qualified key (``long.ttft_p99_ms``) naming a class
        this workload does not have: its metric would never be measured, and a
        threshold on it would fail only after a boot and a full run."""
        names = {c.name for c in self.classes}
        for key in keys:
            cls = key.rpartition(".")[0]
            if cls and cls not in names:
                raise ThresholdError(
                    f"{what} {key!r}: workload {self.name!r} has no class {cls!r} "
                    f"(classes: {', '.join(sorted(names))})"
                )

    @property
    def effective_ramp_s(self) -> float:
        """The ramp-up actually used: ``ramp_s``, but at most a tenth of a pass (none in
        the bench-serve shape, whose users all start at once)."""
        if self.shape == "bench-serve":
            return 0.0
        return min(self.ramp_s, self.duration_s / 10)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def hash(self) -> str:
        """What decides the load sent: two workloads with the same hash send the same load."""
        body = self.to_dict()
        body.pop("description")
        body.pop("gate")
        body.pop("ab_gate")
        body.pop("report")
        for name, default in LATER_WORKLOAD_FIELDS.items():
            if body.get(name) == default:
                del body[name]
        for cls in body["classes"]:
            # fields added later count only when set, so older baselines keep their key
            for name, default in LATER_FIELDS.items():
                if cls.get(name) == default:
                    del cls[name]
            if cls.get("trace"):  # what it replays, wherever the file lies
                cls["trace"] = trace.digest(cls["trace"])
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]

    def override(self, changes: Mapping[str, Any]) -> Workload:
        """A copy with top-level fields or per-class fields (``{"chat": {"users": 4}}``) changed."""
        top = {f.name for f in fields(self)} - {"classes", "name"}
        by_name = {c.name: c for c in self.classes}
        updates: dict[str, Any] = {}
        for key, value in changes.items():
            if key in top:
                updates[key] = value
            elif key in by_name and isinstance(value, Mapping):
                by_name[key] = _replace_class(by_name[key], value)
            else:
                hint = _hint(key, top | set(by_name))
                raise WorkloadError(
                    f"workload {self.name!r}: unknown override {key!r}{hint}; "
                    f"fields: {', '.join(sorted(top))}; classes: {', '.join(by_name)}"
                )
        return replace(self, classes=tuple(by_name.values()), **updates)


def _hint(name: str, valid: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(valid), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _replace_class(cls: RequestClass, changes: Mapping[str, Any]) -> RequestClass:
    known = {f.name for f in fields(cls)} - {"name"}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise WorkloadError(
            f"class {cls.name!r}: unknown field {unknown[0]!r}{_hint(unknown[0], known)}; "
            f"fields: {', '.join(sorted(known))}"
        )
    return replace(cls, **changes)


def from_dict(data: Mapping[str, Any], source: str = "workload") -> Workload:
    """Build a workload from plain data (a YAML file's contents), naming bad keys."""
    try:
        classes = tuple(RequestClass(**c) for c in data.get("classes", ()))
        rest = {k: v for k, v in data.items() if k != "classes"}
        for key in ("gate", "ab_gate", "report"):
            if key in rest:
                rest[key] = tuple(rest[key])
        return Workload(classes=classes, **rest)
    except TypeError as exc:
        raise WorkloadError(f"{source}: {exc}") from exc
    except WorkloadError as exc:
        raise WorkloadError(f"{source}: {exc}") from None


def pass_count(value: object, source: str) -> int:
    """A number of passes (``repeat``) from a command line, ini file or marker."""
    try:
        count = int(str(value))
    except ValueError:
        count = 0
    if count < 1:
        raise WorkloadError(f"{source}: expected a whole number of passes >= 1, got {value!r}")
    return count
