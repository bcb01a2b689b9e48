"""Regression verdicts: the current passes against a base side's passes, metric by metric.

The unit of noise is the pass (see ``core.records.PassRecord``). This module assembles
each metric's verdict; ``measured`` chooses the test the data allow and gives its
figures, ``decide`` the decision, ``rules`` the rules, and ``drift`` what a verdict
allows for beyond its passes:

- **Pairing.** When both sides replay the same seeded schedule, pass k is compared
  with pass k (``pair``): what the schedule decides (which passes get the long
  prefills) cancels out. On the committed H200 ``tokenizer_pressure`` passes, pass k
  tracked the schedule across boots (correlation +1.00), and a x1.1 slowdown was
  caught 100% paired against 0% unpaired. A baseline of several boots is paired
  through their mean at pass k.
- **One rule for both kinds of verdict.** A stored baseline and an A/B run's base side
  are judged alike (``decide``): ``regressed`` when the current side is significantly
  worse than a quarter of the tolerance, allowing for what the passes cannot show (the
  boot drift of a stored baseline, the offset of two resident servers: ``drift``);
  ``unchanged`` when a change of the tolerance is ruled out; ``improved`` the mirror;
  else ``inconclusive``. Holm's correction runs over the test's gated metrics.
- **Nothing hides a regression.** A failed request's latency is infinite and a pass with
  no output token has zero throughput: such values rank as the worst, on either side.
  Failed requests significantly more often than the base side's, and streams that came
  in bursts significantly more often, fail by rule (``rules``), inside the budget.
- **Single passes** (one pass on a side) get a time-block bootstrap interval that
  understates run-to-run noise: in a simulated A/A with a 3% pass-to-pass shift,
  17% came out ``regressed``. They are reported, never gated.

Counter rates (preemptions per second) are compared as log(rate + 1 event per
typical pass, the median pass length over both sides), so a pass without
preemptions does not make the ratio infinite, and no preemptions on either side
is a ratio of exactly 1 whatever each side's pass lengths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from pytest_vllm_perf.core.records import MetricVerdict, Verdict
from pytest_vllm_perf.core.registry import METRICS, split_key, tolerance_for
from pytest_vllm_perf.metrics.passes import Passes
from pytest_vllm_perf.verdict import decide, intervals, measured, rules
from pytest_vllm_perf.verdict.drift import NONE, Component
from pytest_vllm_perf.verdict.sequential import Look

__all__ = [
    "ALPHA",
    "MIN_PAIRS",
    "STORED_ALPHA",
    "Passes",
    "classify",
    "compare",
    "measured_counts",
    "passes_note",
]

ALPHA: Final = 1 - intervals.CONFIDENCE
# a stored-baseline test's one-sided bound on a false ``regressed``: one side of ALPHA
STORED_ALPHA: Final = ALPHA / 2
MIN_PAIRS: Final = measured.MIN_PAIRS


def classify(
    ratio: float,
    low: float,
    high: float,
    p: float,
    tolerance: float,
    higher_is_better: bool,
    alpha: float = ALPHA,
) -> Verdict:
    """Regressed (or improved) when ``p``, the two-sided p-value of "no change beyond
    the tolerance", is below ``alpha``; unchanged when the interval lies within
    tolerance. What a capacity search and a single pass's time blocks are judged by."""
    if any(math.isnan(x) for x in (ratio, low, high)):
        return Verdict.INCONCLUSIVE
    if higher_is_better:
        ratio, low, high = (
            1 / ratio if ratio else math.inf,
            1 / high if high else math.inf,
            1 / low if low else math.inf,
        )
    significant = p < alpha
    if significant and ratio > 1 + tolerance:
        return Verdict.REGRESSED
    if significant and ratio < 1 / (1 + tolerance):
        return Verdict.IMPROVED
    if low >= 1 / (1 + tolerance) and high <= 1 + tolerance:
        return Verdict.UNCHANGED
    return Verdict.INCONCLUSIVE


def compare(
    base: Sequence[Passes],
    current: Passes,
    keys: Sequence[str],
    tolerances: Mapping[str, float],
    gated: Sequence[str] = (),
    pair: bool = False,
    seed: int = 0,
    look: Look | None = None,
    alpha: float = ALPHA,
    drift: Mapping[str, Component] | Component | None = None,
) -> list[MetricVerdict]:
    """A verdict for each of ``keys``; Holm's correction runs over the ``gated`` ones.

    ``look``: one look of an A/B run's sequential decision (module ``sequential``);
    without one, a single look at one-sided level ``alpha`` / 2 (a stored baseline's
    two-sided ``alpha``: the test's share of ``--vllm-stored-run-alpha``, doubled).
    Of the look's level, ``decide.RULE_SHARE`` goes to the rules (failed requests,
    bursts) and ``decide.END_SHARE`` to the pair budget's end; the metric tests get
    the rest. ``drift``: what the passes cannot show (``drift``), per key or for all.

    With a single pass on either side nothing is gated (module docstring). A
    ``failed`` verdict, gated, comes first when the current side failed more
    requests per pass than the baseline did: ``regressed`` when significantly more
    (``rules.failed_requests``), else ``inconclusive``, printed either way.
    """
    single = measured.is_single(base, current)
    if look is None:
        look = Look(1, 1, len(current.metrics), alpha / 2)
    m = max(1, len(gated))
    rule_alpha = decide.RULE_SHARE * look.level / m
    level = (1 - decide.RULE_SHARE - decide.END_SHARE) * look.level
    end_level = decide.END_SHARE * look.level / m
    tols = {key: _tolerance(key, tolerances) for key in keys}

    def component(key: str) -> Component:
        if isinstance(drift, Component):
            return drift
        return (drift or {}).get(key, NONE)

    results = {
        key: measured.measure(
            key, base, current, pair, seed, tols[key], rule_alpha, look, component(key)
        )
        for key in keys
    }
    gated_keys = [k for k in keys if k in gated and not single]
    adjusted = dict(
        zip(gated_keys, intervals.holm([results[k].p for k in gated_keys]), strict=True)
    )
    improved = dict(
        zip(gated_keys, intervals.holm([results[k].p_improved for k in gated_keys]), strict=True)
    )
    out = rules.failed_requests(base, current, rule_alpha)
    for key, r in results.items():
        out.append(_verdict(key, r, tols[key], key in gated, single, look, level, end_level,
                            adjusted.get(key, r.p), improved.get(key, r.p_improved)))  # fmt: skip
    return out


def _verdict(
    key: str,
    r: measured.Result,
    tol: float,
    gated: bool,
    single: bool,
    look: Look,
    level: float,
    end_level: float,
    p_holm: float,
    p_improved: float,
) -> MetricVerdict:
    """One metric's verdict from its figures and its Holm-adjusted p-values."""
    higher = METRICS[split_key(key)[1]].higher_is_better
    basis = r.basis
    if r.failed:
        verdict = Verdict.REGRESSED
    elif r.decision is None:
        verdict = classify(r.ratio, r.low, r.high, p_holm, tol, higher, 2 * look.level)
    else:
        verdict = decide.verdict(r.decision, p_holm, p_improved, level)
        if verdict is Verdict.INCONCLUSIVE and gated and r.p_end < end_level:
            verdict = Verdict.REGRESSED
            basis += f"; {r.end} (p={r.p_end:.2g} < {end_level:.2g})"
        elif verdict is Verdict.INCONCLUSIVE and math.isfinite(r.decision.shift.se):
            basis += f"; {decide.power_note(r.decision, tol, level)}"
    if r.suspect:
        # the passes left may be the lucky ones: no all-clear on them
        basis += f"; {r.suspect}"
        if verdict in (Verdict.UNCHANGED, Verdict.IMPROVED):
            verdict = Verdict.INCONCLUSIVE
    decided = r.decision is not None
    return MetricVerdict(
        key, r.baseline, r.current, r.ratio, r.low, r.high, tol, verdict, basis, r.p, p_holm,
        gated and (not single or r.failed),
        margin=look.indifference * tol if decided else math.nan,
        level=level if decided else math.nan,
        bounds=_bounds(r, level, p_holm, higher),
    )  # fmt: skip


def _bounds(r: measured.Result, level: float, p_holm: float, higher: bool) -> tuple[float, float]:
    """The ratio's one-sided bounds at the levels its decision used: the worse side's at
    the level of its Holm step (level x p / p_holm), the other at ``decide.FUTILITY``
    or the level; as current / base."""
    if r.decision is None or not r.decision.shift.se > 0:
        return math.nan, math.nan
    step = level * min(1.0, r.p / p_holm) if p_holm > 0 else level
    worse_low, _ = r.decision.shift.bounds(1 - step)
    _, worse_high = r.decision.shift.bounds(1 - max(level, decide.FUTILITY))
    low, high = math.exp(worse_low), math.exp(worse_high)
    return (1 / high, 1 / low) if higher else (low, high)


def _tolerance(key: str, tolerances: Mapping[str, float]) -> float:
    tol = tolerance_for(key, tolerances)
    assert tol is not None, key
    return tol


def measured_counts(side: Sequence[Passes], key: str) -> int:
    """How many of a side's passes measured ``key`` (after the exclusions)."""
    return sum(len(b.measured(key).metrics) for b in side)


def passes_note(
    base: Sequence[Passes],
    current: Passes,
    gated: Sequence[str] = (),
    boots_matter: bool = True,
) -> str:
    """Say what the intervals cover, and when the passes cannot support a verdict.

    Passes are counted after the exclusions (a class that sent nothing, a pass that
    streamed in bursts), for each gated metric. ``boots_matter`` False (an A/B run,
    both sides measured in the same hour on the same machine) leaves out the note that
    a baseline of one boot has only the platform's drift to go by.
    """
    n_base = sum(len(b.metrics) for b in base)
    n_cur = len(current.metrics)
    if min(n_base, n_cur) < 2:
        # name the short side: "use --vllm-repeat 8" read wrong after 8 current passes
        fix = (
            "re-save the baseline with --vllm-repeat 8 or more"
            if n_base < 2 and n_cur >= 2
            else "run with --vllm-repeat 8 or more"
            if n_cur < 2 <= n_base
            else "use --vllm-repeat 8 or more on both sides"
        )
        return (
            f"{n_base} baseline vs {n_cur} current pass(es): reported, not gated (a single "
            f"pass's interval comes from time blocks inside it and understates run-to-run "
            f"noise); {fix}"
        )
    counts = {k: (measured_counts(base, k), measured_counts([current], k)) for k in gated}
    short = [f"{k} in {m} vs {n}" for k, (m, n) in counts.items() if (m, n) != (n_base, n_cur)]
    hopeless = [k for k, (m, n) in counts.items() if min(m, n) < 2]
    notes = []
    if short:
        notes.append("passes measured after exclusions: " + ", ".join(short))
    if hopeless:
        notes.append(f"{', '.join(hopeless)}: fewer than 2 passes a side measured it")
    if len(base) == 1 and boots_matter:
        notes.append(
            "the baseline holds one boot: its boot drift is the platform's measured figure "
            "and this hardware's other baselines; add boots with --vllm-add-boot so that "
            "the gate learns its own"
        )
    return "; ".join(notes)
