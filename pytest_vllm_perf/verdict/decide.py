"""One metric's decision: is the current side worse than the margin, or within the
tolerance, allowing for what its passes cannot show (``drift``)?

Both kinds of verdict decide alike (``sequential`` for the looks of an A/B run; a
stored baseline is one look at the test's share of the stored budget):

- the mean log ratio of the current passes to the base's, pass k against pass k
  where both replayed schedule k (else Welch's unpaired t), with its variance
  widened by a ``drift.Component``: the server offset of two resident servers, or
  the boot drift of sides or baselines from other boots;
- ``regressed`` when worse than the margin (``indifference`` of the tolerance) at the
  look's level, one-sided; ``improved`` the mirror; ``unchanged`` when a change of
  the whole tolerance is ruled out at that level; else ``inconclusive``.

Student's t serves tails too: a pass's p99 over hundreds of requests moves as a
median does, and the signed-rank test it replaces could not reach a p below 1/256
over 8 pairs, nor take a variance component. Failed requests (infinite latencies)
are ranked instead (``ranked``).

**The pair budget's end** (``end_p``): at the last look, a metric still undecided whose
mean lies beyond the tolerance is tested twice more, for a regression that the mean's
spread hides: Yuen's trimmed mean (one deviant pass) and the dispersion of the
candidate's passes (a regression in some passes only, module ``robust``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from pytest_vllm_perf.core.records import Verdict
from pytest_vllm_perf.metrics.passes import Floats
from pytest_vllm_perf.verdict import intervals, robust
from pytest_vllm_perf.verdict.drift import NONE, Component
from pytest_vllm_perf.verdict.sequential import Look

__all__ = [
    "END_SHARE",
    "FUTILITY",
    "RULE_SHARE",
    "Decision",
    "decide",
    "end_p",
    "power_note",
    "ranked",
]

# The share of each look's level spent on the rules that fail a test without a metric
# test (more failed requests, more bursty passes: module ``rules``), and on the two
# tests at the pair budget's end (spent at the last look only); the metric tests get
# the rest.
RULE_SHARE: Final = 0.05
END_SHARE: Final = 0.05
# ``unchanged`` rules out a change of the tolerance at this one-sided level, or at the
# look's own where that is larger. Calling a true change of the tolerance ``unchanged``
# is a missed regression, not a false alarm, so it spends no false-alarm budget: at the
# look's level (a 16th of the test's 1% at 8 pairs) an A/A of interference took 12
# pairs or more 68% of the time; at 1%, 15%, with a x1.05 change still caught 92-93%
# (bench/scenarios.py).
FUTILITY: Final = 0.01


@dataclass(frozen=True)
class Decision:
    """A metric's figures for a verdict, on the log scale, in the worse direction."""

    shift: intervals.MeanShift
    p_regressed: float
    p_improved: float
    p_unchanged: float
    margin: float
    test: str


def decide(
    base: Floats,
    cur: Floats,
    tolerance: float,
    look: Look,
    paired: bool,
    drift: Component = NONE,
) -> Decision:
    """The one-sided tests of ``cur`` against ``base`` (log values, larger is worse; pass k
    against pass k when ``paired``) at the look's margin, with ``drift`` added."""
    margin, at_tol = math.log1p(look.indifference * tolerance), math.log1p(tolerance)
    if paired:
        shift = intervals.mean_shift(cur - base, drift.var, drift.df)
        test = "t"
    else:
        shift = intervals.welch_shift(base, cur, drift.var, drift.df)
        test = "Welch's t"
    p_unch = max(shift.p_below(at_tol), shift.p_above(-at_tol))
    return Decision(shift, shift.p_above(margin), shift.p_below(-margin), p_unch, margin, test)


def ranked(base: Floats, cur: Floats, tolerance: float, look: Look, drift: Component) -> Decision:
    """Failed requests made some values infinite: the exact Mann-Whitney test, unpaired,
    with the infinite values ranked above every finite one (as ``compare`` replaces
    them), its margin widened by ``drift``'s quantile at half the level (the other half
    bounds the chance that the drift itself lies beyond that)."""
    room = drift.sd * intervals.t_quantile(1 - look.level / 2, drift.df) if drift.sd else 0.0
    margin = math.log1p(look.indifference * tolerance) + room
    at_tol = math.log1p(tolerance) - room
    est = intervals.unpaired(base, cur)
    p_reg = intervals.unpaired(base, cur, margin=margin).p_value
    beyond = intervals.unpaired(base, cur, margin=max(0.0, at_tol)).p_value
    shift = intervals.MeanShift(est.shift, math.nan, math.nan)
    p_unch = beyond if est.shift < at_tol else 1.0
    p_imp = p_reg if est.shift < -margin else 1.0
    p_reg = p_reg if est.shift > margin else 1.0
    return Decision(shift, p_reg, p_imp, p_unch, margin, "Mann-Whitney, ranked")


def end_p(
    base: Floats,
    cur: Floats,
    tolerance: float,
    look: Look,
    paired: bool,
    drift: Component,
    dispersion: bool = True,
) -> tuple[float, str]:
    """At the pair budget's end, the p of the two robust tests (Bonferroni over both) for
    a metric whose mean log ratio lies beyond the tolerance, and what they found; (1, "")
    for any other. Paired passes only; ``dispersion`` (a base side of one boot, whose
    passes vary as the candidate's would): the dispersion test too."""
    mean = float(np.mean(cur) - np.mean(base))
    if not (paired and look.last and mean > math.log1p(tolerance)):
        return 1.0, ""
    margin = math.log1p(look.indifference * tolerance)
    found = []
    p_trim, p_disp = 1.0, 1.0
    trimmed = robust.trimmed_shift(cur - base, drift.var, drift.df)
    if trimmed is not None:
        p_trim = trimmed.p_above(margin)
        found.append(f"trimmed mean {math.expm1(trimmed.mean):.1%} worse (p={p_trim:.2g})")
    if dispersion:
        p_disp = robust.dispersion_p(base, cur)
        found.append(f"its passes vary more than the base's (p={p_disp:.2g})")
    p = min(1.0, 2 * min(p_trim, p_disp))
    what = (
        f"estimated {math.expm1(mean):.1%} worse, beyond the {tolerance:.0%} tolerance, at "
        "the last look: "
    )
    return p, what + ", ".join(found)


def verdict(decision: Decision, p_regressed: float, p_improved: float, level: float) -> Verdict:
    """``regressed`` / ``improved`` at ``level`` from Holm-adjusted p-values, else
    ``unchanged`` when the decision's own p of a change of the tolerance is below
    ``FUTILITY`` (or ``level``), else ``inconclusive``."""
    if p_regressed < level:
        return Verdict.REGRESSED
    if p_improved < level:
        return Verdict.IMPROVED
    if decision.p_unchanged < max(level, FUTILITY):
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


def power_note(decision: Decision, tolerance: float, level: float) -> str:
    """How likely these passes' noise lets a change of the tolerance be caught at this
    level: Student's t with the measured standard error, the change taken as known (a
    planning figure, not a test)."""
    shift = decision.shift
    if not shift.se > 0:
        return "no spread between passes"
    gap = math.log1p(tolerance) - decision.margin
    critical = intervals.t_quantile(1 - level, shift.df)
    power = intervals.t_sf(critical - gap / shift.se, shift.df)
    return f"a x{1 + tolerance:.3g} change would be caught at this noise with p~{power:.2f}"
