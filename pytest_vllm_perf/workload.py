"""Declarative workloads: request classes, arrivals, duration, warmup and seed.

A workload is data, so it can come from a marker, a YAML file or code, be hashed
into a baseline key, and be reproduced exactly (seeded arrivals and prompts).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml


class WorkloadError(ValueError):
    """A workload spec that cannot be run; the message names the key."""


@dataclass(frozen=True)
class RequestClass:
    """Requests of one shape, sent by closed-loop users or as Poisson arrivals.

    ``users`` keeps that many requests in flight back to back; ``rate`` sends
    requests at that mean rate per second, whatever the server's pace. ``text``
    sends words rather than token ids, so the API server has to tokenize them.
    """

    name: str
    prompt_tokens: int
    output_tokens: int
    users: int = 0
    rate: float = 0.0
    text: bool = False

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise WorkloadError(f"class {self.name!r}: token counts must be >= 1")
        if (self.users > 0) == (self.rate > 0):
            raise WorkloadError(f"class {self.name!r}: set exactly one of users and rate")


@dataclass(frozen=True)
class Workload:
    """Everything that decides what load a run sends."""

    name: str
    classes: tuple[RequestClass, ...]
    duration_s: float = 20.0
    warmup_requests: int = 2
    seed: int = 0
    request_timeout_s: float = 300.0
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.classes:
            raise WorkloadError(f"workload {self.name!r} has no request classes")
        if self.duration_s <= 0:
            raise WorkloadError(f"workload {self.name!r}: duration_s must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def hash(self) -> str:
        body = self.to_dict()
        body.pop("description")
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
                raise WorkloadError(
                    f"workload {self.name!r}: unknown override {key!r}; fields: "
                    f"{', '.join(sorted(top))}; classes: {', '.join(by_name)}"
                )
        return replace(self, classes=tuple(by_name.values()), **updates)


def _replace_class(cls: RequestClass, changes: Mapping[str, Any]) -> RequestClass:
    known = {f.name for f in fields(cls)} - {"name"}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise WorkloadError(f"class {cls.name!r}: unknown field {unknown[0]!r}")
    return replace(cls, **changes)


def from_dict(data: Mapping[str, Any], source: str = "workload") -> Workload:
    """Build a workload from plain data (a YAML file's contents), naming bad keys."""
    try:
        classes = tuple(RequestClass(**c) for c in data.get("classes", ()))
        rest = {k: v for k, v in data.items() if k != "classes"}
        return Workload(classes=classes, **rest)
    except TypeError as exc:
        raise WorkloadError(f"{source}: {exc}") from exc


def load_file(path: Path) -> Workload:
    """A workload from a YAML file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{path}: malformed YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise WorkloadError(f"{path}: a workload is a mapping")
    data.setdefault("name", path.stem)
    return from_dict(data, str(path))


CHAT = RequestClass("chat", prompt_tokens=64, output_tokens=64, users=4)

NAMED: dict[str, Workload] = {
    "mixed": Workload(
        "mixed",
        (CHAT, RequestClass("long", prompt_tokens=1024, output_tokens=8, rate=0.5)),
        description="Short-prompt/long-decode users with long prompts arriving.",
    ),
    "interference": Workload(
        "interference",
        (
            RequestClass("chat", prompt_tokens=64, output_tokens=128, users=4),
            RequestClass("long", prompt_tokens=3072, output_tokens=4, rate=0.5),
        ),
        description=(
            "Steady streaming decode plus long prompts arriving. Watch chat ITL p99, "
            "the worst stall (chat.itl_max_ms) and long-prompt TTFT."
        ),
    ),
    "decode": Workload(
        "decode",
        (RequestClass("chat", prompt_tokens=64, output_tokens=64, users=8),),
        description=(
            "Steady streaming decode and nothing else: ITL p99 is the tail of ordinary "
            "decode steps, the steadiest latency tail to gate on."
        ),
    ),
    "kv_pressure": Workload(
        "kv_pressure",
        (RequestClass("seq", prompt_tokens=384, output_tokens=256, users=12),),
        description=(
            "More concurrent long sequences than a small KV cache holds. "
            "Watch preemptions, TTFT p99 and kv_cache_usage_peak."
        ),
    ),
    "tokenizer_pressure": Workload(
        "tokenizer_pressure",
        (RequestClass("text", prompt_tokens=2000, output_tokens=2, rate=8.0, text=True),),
        description=(
            "Many long texts with tiny outputs: the API server's tokenizer is the "
            "bottleneck. Watch TTFT p50/p99 and request_throughput."
        ),
    ),
}


def named(name: str) -> Workload:
    """A built-in workload by name."""
    try:
        return NAMED[name]
    except KeyError:
        raise WorkloadError(
            f"unknown workload {name!r}; built in: {', '.join(sorted(NAMED))}"
        ) from None
