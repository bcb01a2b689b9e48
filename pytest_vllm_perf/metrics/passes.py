"""One boot's passes as a verdict sees them: a plain record that every verdict module reads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from pytest_vllm_perf.core.records import PassRecord

__all__ = ["Floats", "Passes"]

Floats: TypeAlias = NDArray[np.floating[Any]]


@dataclass(frozen=True)
class Passes:
    """One boot's passes: per-pass metrics, schedule indices and lengths.

    ``records`` are the raw passes when they are at hand (always for the current
    run, for old baselines that stored them): only the single-pass bootstrap
    needs them.
    """

    metrics: tuple[Mapping[str, float], ...]
    indices: tuple[int, ...]
    durations: tuple[float, ...]
    records: tuple[PassRecord, ...] = ()

    def values(self, key: str) -> Floats:
        return np.array([m.get(key, math.nan) for m in self.metrics], dtype=float)

    def measured(self, key: str) -> Passes:
        """The passes that measured ``key``: a pass in which a request class sent nothing
        (a rare arrival class in a short pass) has no value for that class's metrics,
        which says nothing about the others. Failures are infinite, not missing: kept."""
        keep = [i for i, m in enumerate(self.metrics) if not math.isnan(m.get(key, math.nan))]
        if len(keep) == len(self.metrics):
            return self
        return Passes(
            tuple(self.metrics[i] for i in keep),
            tuple(self.indices[i] for i in keep),
            tuple(self.durations[i] for i in keep),
            self.records,
        )
