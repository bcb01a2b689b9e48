"""Two tests for a regression that a test of the mean cannot resolve: one that a few
deviant passes hide, and one that shows in some passes and not others.

- ``trimmed_shift``: Yuen's trimmed-mean t for paired log ratios. One base pass
  stalled x3 inflated the spread of 16 pairs so far that a candidate x1.3 worse on
  every pass stayed ``inconclusive`` (500 of 500 simulated A/Bs passed); with a fifth
  of the pairs trimmed from each end, the stall is left out.
- ``dispersion_p``: Pitman and Morgan's test that the candidate's passes vary more than
  the base's, paired pass by pass (the correlation of the pairs' differences with
  their sums). A regression that shows only in the passes whose schedule holds its
  trigger (x1.5 in 1 pass of 4) leaves a mean x1.107 that no t test of 16 pairs
  separates from noise; its passes still vary far more than the base's. The p-value
  is the largest over the pairs left out one at a time, so that one deviant pass on
  its own never decides it.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from pytest_vllm_perf.metrics.passes import Floats
from pytest_vllm_perf.verdict.intervals import MeanShift, satterthwaite, t_sf

__all__ = ["TRIM", "dispersion_p", "trimmed_shift"]

TRIM: Final = 0.2  # the share of pairs trimmed from each end (Wilcox's usual choice)


def trimmed_shift(
    diffs: Floats, extra: float = 0.0, extra_df: float = math.inf, trim: float = TRIM
) -> MeanShift | None:
    """Yuen's test for the trimmed mean of ``diffs``: the mean of the middle values with
    ``trim`` of them cut from each end, and its standard error from the winsorized
    variance, on n - 2g - 1 degrees of freedom; ``extra`` is added as in
    ``intervals.mean_shift``. None with too few values to trim and keep two."""
    n = len(diffs)
    g = math.floor(trim * n)
    kept = n - 2 * g
    if kept < 3:
        return None
    ordered = np.sort(diffs)
    winsorized = np.clip(ordered, ordered[g], ordered[n - g - 1])
    own = float(np.var(winsorized, ddof=1)) / (kept / n) ** 2 / n
    df = satterthwaite([(own, kept - 1), (extra, extra_df)])
    return MeanShift(float(np.mean(ordered[g : n - g])), math.sqrt(own + extra), min(df, 1e6))


def _pitman_morgan(base: Floats, cur: Floats) -> float:
    d, s = cur - base, cur + base
    if float(np.std(d)) == 0 or float(np.std(s)) == 0:
        return 1.0
    r = float(np.corrcoef(d, s)[0, 1])
    if not math.isfinite(r):
        return 1.0
    if r >= 1:
        return 0.0
    if r <= -1:
        # the candidate's passes all read the same (a real engine's KV cache peak did,
        # 0.68% in each pass of a fixed load): it varies less than the base, not more
        return 1.0
    return t_sf(r * math.sqrt(len(d) - 2) / math.sqrt(1 - r * r), len(d) - 2)


def dispersion_p(base: Floats, cur: Floats) -> float:
    """One-sided p that the candidate's log values (``cur``, pass k paired with ``base``
    pass k) vary no more than the base's: Pitman-Morgan's t on the correlation of
    differences and sums, the largest p over each pair left out (5 pairs or more)."""
    n = len(base)
    if n < 5:
        return 1.0
    keep = np.ones(n, dtype=bool)
    worst = 0.0
    for i in range(n):
        keep[i] = False
        worst = max(worst, _pitman_morgan(base[keep], cur[keep]))
        keep[i] = True
    return worst
