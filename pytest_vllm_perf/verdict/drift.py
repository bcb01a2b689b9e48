"""What a verdict allows for beyond the spread of its own passes: boot drift and the
offset between two servers.

Passes inside one boot of a server agree more closely than boots do, and two servers of
one config, up at once, differ by a steady offset. Neither shows in a run's own passes,
so a verdict that left them out called them changes:

- **Boot drift.** A stored baseline is judged against a new boot, and an A/B run booted
  in turn (CBBC) compares passes of three boots. With a per-metric drift scale from the
  baseline's own two boots (one degree of freedom, Student's t of 12.7) only a change
  beyond x1.42-x2.27 could fail on the committed H200 baselines; here the scale is
  pooled over every metric of every baseline of the hardware class, with the platform's
  measured drift as a prior worth ``PRIOR_DF`` degrees of freedom.
- **Server offset.** Two resident servers of one H200 config differed by 0.5% on
  average, 0.4-0.6% sd, over the recorded resident A/As; at a 1% mean offset with 0.5%
  sd a test without this allowance failed 2-4% of A/As.

Each is a ``Component``: a standard deviation on the log scale and its degrees of
freedom, added to the variance of a mean log ratio (``intervals.mean_shift``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from pytest_vllm_perf.metrics.passes import Floats

__all__ = [
    "BOOT_DRIFT",
    "NONE",
    "PRIOR_DF",
    "SERVER_OFFSET",
    "Component",
    "boot_drift",
    "boot_means",
    "cbbc",
    "offset",
    "stored",
]


@dataclass(frozen=True)
class Component:
    """A variance component of a mean log ratio: its standard deviation, the degrees of
    freedom it was estimated with (inf: taken as known) and where it came from."""

    sd: float
    df: float
    source: str

    @property
    def var(self) -> float:
        return self.sd * self.sd

    def scaled(self, factor: float, source: str = "") -> Component:
        """This component's variance times ``factor`` (e.g. 1 + 1/boots)."""
        return Component(self.sd * math.sqrt(factor), self.df, source or self.source)


NONE: Final = Component(0.0, math.inf, "")

# The drift of a boot's level about its config's, log-scale sd, pooled over the gated
# metrics of the boots the project measured (bench/results/operating_characteristic.md,
# "Fitted scales"): on the H200 decode (11 boots: ITL p50 0.005, TPOT 0.026, throughput
# 0.052) and interference (6 boots: 0.016-0.036), 0.032; on the CPU engine (5 and 4
# boots of decode and interference on one 2-core VM), 0.044. One scale serves every
# metric: two boots give each metric one degree of freedom of its own, and the metrics'
# own scales differ less than two boots' estimates of them do.
BOOT_DRIFT: Final[Mapping[str, float]] = {"cuda": 0.032, "cpu": 0.044}
# How much the platform's figure weighs against a hardware class's own boots: as much as
# four boots' worth of spread, so that a class's own boots decide once it has a few.
PRIOR_DF: Final = 4.0
# The sd of the steady log ratio of two resident servers of one config. H200: the offset
# over the pairs after the first in the recorded resident A/As (decode TPOT
# +0.6/-0.3/+0.7/+0.7%, throughput +0.5/-0.4/+0.6/+0.9%; interference 0.4-2.2%), 0.4-0.6%
# over the 22 metric-runs once their sampling noise is taken out. CPU engine: the demo's
# A/A read ITL p50 x1.046, TPOT x1.046 and throughput x0.968 between the servers on
# cores 0 and 1 (bench/results/cpu/demo-first-look.txt).
SERVER_OFFSET: Final[Mapping[str, float]] = {"cuda": 0.0055, "cpu": 0.04}
OFFSET_DF: Final = 20.0  # the H200's 22 metric-runs of resident A/A offsets


def offset(platform: str) -> Component:
    """The allowance for two resident servers' steady offset on ``platform``."""
    sd = SERVER_OFFSET.get(platform, max(SERVER_OFFSET.values()))
    return Component(sd, OFFSET_DF, f"server offset sd {sd:.2%} ({platform})")


def boot_means(boots: Sequence[Floats]) -> list[float]:
    """Each boot's mean log value over its finite passes (NaN for a boot with none)."""
    out = []
    for logs in boots:
        finite = logs[np.isfinite(logs)]
        out.append(float(np.mean(finite)) if len(finite) else math.nan)
    return out


def boot_drift(groups: Iterable[Sequence[Floats]], platform: str = "cuda") -> Component:
    """The sd of a boot's level, pooled over ``groups`` (each one metric of one baseline:
    its log values per boot; the gated metrics of every baseline of the hardware class),
    with the platform's measured drift as a prior of ``PRIOR_DF`` degrees of freedom."""
    prior = BOOT_DRIFT.get(platform, max(BOOT_DRIFT.values()))
    squares, df, used = PRIOR_DF * prior * prior, PRIOR_DF, 0
    for group in groups:
        means = [m for m in boot_means(group) if math.isfinite(m)]
        if len(means) >= 2:
            squares += float(np.sum((np.array(means) - np.mean(means)) ** 2))
            df += len(means) - 1
            used += 1
    sd = math.sqrt(squares / df)
    where = f"{used} stored metric(s) of several boots on this hardware and " if used else ""
    return Component(sd, df, f"boot drift sd {sd:.2%} ({where}the {platform} prior)")


def stored(drift: Component, boots: int) -> Component:
    """A new boot against the mean of ``boots`` stored ones: drift var x (1 + 1/boots)."""
    return drift.scaled(1 + 1 / max(1, boots))


def cbbc(drift: Component) -> Component:
    """Sides booted in turn (CBBC): the candidate's passes come from two boots and the
    base's from one, so their mean log ratio carries 1/2 + 1 boot variances."""
    return drift.scaled(1.5, f"{drift.source}, x1.5: two candidate boots and one base")
