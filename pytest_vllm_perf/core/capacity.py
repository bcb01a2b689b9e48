"""A capacity estimate and the search it came from: plain records that the verdict fits
and judges (``verdict.capacity``) and the store keeps (``store.capacity``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

__all__ = ["METRIC", "Capacity", "Search"]

# the report's and history's key of a capacity search's one figure
METRIC: Final = "capacity_rps"


@dataclass(frozen=True)
class Capacity:
    """A capacity estimate: the rate, its 95% interval, and what it was fitted from."""

    rps: float
    low: float
    high: float
    passes: int
    slope: float  # d log m / d log r: how steeply the margin rises with the rate
    # the standard error of log(rps) (the delta method's, or Fieller's half-width in t
    # units where wider), on ``df`` degrees of freedom: what a ratio of two capacities
    # is judged with (``judge``); nan when the fit has no slope
    log_se: float = math.nan
    df: int = 0

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass(frozen=True)
class Search:
    """What a capacity search found, and what it spent: every pass's rate and margin."""

    capacity: Capacity | None  # None: no fit was possible within the passes allowed
    rates: tuple[float, ...]
    margins: tuple[float, ...]
    converged: bool  # the interval got narrower than the tolerance

    @property
    def passes(self) -> int:
        return len(self.rates)

    @property
    def held(self) -> float:
        """The highest rate at which a single pass kept the SLO (0 if none did)."""
        return max(
            (r for r, m in zip(self.rates, self.margins, strict=True) if m <= 1), default=0.0
        )

    @property
    def broke(self) -> float:
        """The lowest rate at which a single pass broke the SLO (inf if none did)."""
        return min(
            (r for r, m in zip(self.rates, self.margins, strict=True) if not m <= 1),
            default=math.inf,
        )

    @property
    def resolved(self) -> bool:
        """Whether the fit gave a bounded interval: its point is then the capacity."""
        return self.capacity is not None and self.capacity.bounded

    @property
    def lower_evidence(self) -> float:
        """What a minimum is checked against: the fitted capacity when its interval is
        bounded, else the highest rate a single pass held at (the fit's point, with an
        unbounded interval, may be anywhere)."""
        return self.capacity.rps if self.resolved and self.capacity else self.held
