"""What one request measured: the values every statistic and report is built from."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RequestRecord:
    """One request's timeline, in seconds relative to the start of the run.

    ``ttft`` is the time to the first streamed chunk with content, ``itl`` the gaps
    between consecutive content chunks, as ``vllm bench serve`` measures them.
    ``error`` is None only for a request that returned every token it asked for.
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
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**{**data, "itl": tuple(data.get("itl", ()))})


@dataclass(frozen=True)
class Repetition:
    """One pass of a workload; passes run back to back on the same server.

    Requests inside one pass share batches and queues, so passes, not requests,
    are the independent units whose spread is the run-to-run noise a gate must
    beat. ``start_s`` is the pass's offset in the run, the time base of its
    records' ``start``.
    """

    records: tuple[RequestRecord, ...]
    duration_s: float
    start_s: float = 0.0
