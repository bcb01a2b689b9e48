"""Regression verdicts: the current passes against a base side's passes, metric by metric.

The unit of noise is the pass (see ``core.records.PassRecord``). This module chooses
what the data allow and assembles each metric's verdict; the decision itself is in
``decide``, the rules in ``rules``, what a verdict allows for beyond its passes in
``drift``:

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
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from pytest_vllm_perf.core.records import MetricVerdict, PassRecord, RequestRecord, Verdict
from pytest_vllm_perf.core.registry import LATENCIES, METRICS, split_key, tolerance_for
from pytest_vllm_perf.verdict import decide, intervals, rules, stats
from pytest_vllm_perf.verdict.drift import NONE, Component
from pytest_vllm_perf.verdict.intervals import Floats
from pytest_vllm_perf.verdict.passes import Passes
from pytest_vllm_perf.verdict.sequential import Look

__all__ = [
    "ALPHA",
    "MAX_BOOTS",
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
# the newest boots a baseline keeps (``baseline.add_boot`` drops the oldest beyond it)
MAX_BOOTS: Final = 8
MIN_PAIRS: Final = 3  # the fewest pairs paired: a t over 2 degrees of freedom


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


@dataclass(frozen=True)
class _Result:
    baseline: float
    current: float
    ratio: float
    low: float
    high: float
    p: float
    basis: str
    failed: bool = False  # regressed by rule (``rules``), named
    decision: decide.Decision | None = None
    # the two tests at the pair budget's end (``decide.end_p``): their p and findings
    p_end: float = 1.0
    end: str = ""
    # more bursty current passes than the baseline's, short of failing (BURST_SUSPECT)
    suspect: str = ""

    @property
    def p_improved(self) -> float:
        return self.decision.p_improved if self.decision else math.nan


def _transform(key: str, values: Floats, pseudo_rate: float) -> Floats:
    """Log values, in the direction in which larger is worse (a higher-is-better
    metric's logs negated); counter rates get ``pseudo_rate`` (one event per typical
    pass) added first. The same pseudo-rate on both sides: one event per each pass's
    own length made 0 preemptions against 0 a x1.94 "regression" when one side's passes
    drained faster (the api_server A/B on the H200, bench/results/h200/tokenization-kv-len)."""
    found = METRICS[split_key(key)[1]]
    if found.statistic == "counter rate":
        values = values + pseudo_rate
    with np.errstate(divide="ignore", invalid="ignore"):
        logs: Floats = np.log(values)
    return -logs if found.higher_is_better else logs


def _one(
    key: str,
    base: Sequence[Passes],
    cur: Passes,
    pair: bool,
    seed: int,
    tolerance: float,
    rule_alpha: float,
    look: Look,
    drift: Component,
) -> _Result:
    """``_measured``, with a burst excess short of failing (``BURST_SUSPECT``) noted."""
    found = _measured(key, base, cur, pair, seed, tolerance, rule_alpha, look, drift)
    p, bursts = rules.burst_excess(key, base, cur)
    if found.failed or p >= rules.BURST_SUSPECT:
        return found
    return replace(found, suspect=f"{bursts} (one-sided p={p:.2g}, short of {rule_alpha:.2g})")


def _measured(
    key: str,
    base: Sequence[Passes],
    cur: Passes,
    pair: bool,
    seed: int,
    tolerance: float,
    rule_alpha: float,
    look: Look,
    drift: Component,
) -> _Result:
    """One metric's comparison: paired where ``pair`` and three or more passes share a
    schedule index, else unpaired; ranked where failures made a value infinite."""
    single = _single(base, cur)
    failure = rules.streamed_worse(key, base, cur, rule_alpha)
    base = [b for b in (b.measured(key) for b in base) if b.metrics] or list(base)
    measured = cur.measured(key)
    cur = measured if measured.metrics else cur
    raw = [b.values(key) for b in base]
    cur_values = cur.values(key)
    b_med, c_med = float(np.median(np.concatenate(raw))), float(np.median(cur_values))
    if failure:
        ratio = c_med / b_med if b_med else math.nan
        # a rule, not a test: no p-value (it printed as "p=0 beyond it")
        return _Result(b_med, c_med, ratio, math.nan, math.nan, math.nan, failure, failed=True)
    seconds = [d for side in (*base, cur) for d in side.durations if d > 0]
    pseudo = 1.0 / float(np.median(seconds)) if seconds else 1.0
    logs = [_transform(key, values, pseudo) for values in raw]
    cur_logs = _transform(key, cur_values, pseudo)
    base_logs = np.concatenate(logs)
    if np.isnan(base_logs).any() or np.isnan(cur_logs).any() or not len(cur_logs):
        return _Result(b_med, c_med, math.nan, math.nan, math.nan, math.nan, "no finite values")
    if single:
        return _bootstrap(key, base, cur, b_med, c_med, seed, tolerance)
    if min(len(base_logs), len(cur_logs)) < 2:
        # passes were left out (a class without requests, a pass streamed in bursts):
        # time blocks of the raw passes would bring back exactly what was left out
        basis = f"{len(base_logs)} vs {len(cur_logs)} passes measured it"
        return _Result(b_med, c_med, math.nan, math.nan, math.nan, math.nan, basis)
    higher = METRICS[split_key(key)[1]].higher_is_better
    boots = f", {len(base)} baseline boots" if len(base) > 1 else ""
    allowing = f", allowing {drift.source}" if drift.sd else ""
    if np.isinf(base_logs).any() or np.isinf(cur_logs).any():
        finite = np.concatenate([base_logs, cur_logs])
        finite = finite[np.isfinite(finite)]
        if not len(finite):
            return _Result(b_med, c_med, math.nan, math.nan, math.nan, math.nan, "no finite values")
        low, top = float(finite.min()) - _RANK_GAP, float(finite.max()) + _RANK_GAP
        base_r, cur_r = (np.clip(x, low, top) for x in (base_logs, cur_logs))
        ranked = int(np.sum(np.isinf(base_logs)) + np.sum(np.isinf(cur_logs)))
        made = decide.ranked(base_r, cur_r, tolerance, look, drift)
        shift = _unranked(made.shift.mean)
        basis = (
            f"{len(base_r)} vs {len(cur_r)} passes, {made.test}{boots}{allowing}, "
            f"{ranked} value(s) infinite or zero (failed requests, no tokens) ranked as the worst"
        )
        ratio = math.exp(-shift if higher else shift)
        return _Result(b_med, c_med, ratio, math.nan, math.nan, made.p_regressed, basis,
                       decision=made)  # fmt: skip
    paired = _pairs(logs, base, cur, cur_logs) if pair else None
    if paired is not None:
        b_side, c_side = paired
        made = decide.decide(b_side, c_side, tolerance, look, True, drift)
        what = f"{len(c_side)} pairs of passes, paired, {made.test}"
    else:
        b_side, c_side = base_logs, cur_logs
        made = decide.decide(b_side, c_side, tolerance, look, False, drift)
        what = f"{len(b_side)} vs {len(c_side)} passes, {made.test}"
    p_end, end = decide.end_p(b_side, c_side, tolerance, look, paired is not None, drift,
                              dispersion=len(base) == 1)  # fmt: skip
    est, (lo, hi) = made.shift.mean, made.shift.interval()
    if higher:  # back to current / base
        est, lo, hi = -est, -hi, -lo
    return _Result(
        b_med, c_med, math.exp(est), math.exp(lo), math.exp(hi), made.p_regressed,
        f"{what}{boots}{allowing}", decision=made, p_end=p_end, end=end,
    )  # fmt: skip


# A failed request's latency is infinite, and so is the log of a throughput of zero
# turned worse-is-larger: rank tests place them beyond every finite value (the log of a
# value this far beyond the extreme finite one), and an estimate that reaches that far
# is unbounded, not a number.
_RANK_GAP: Final = 100.0


def _unranked(log_ratio: float) -> float:
    if abs(log_ratio) >= _RANK_GAP / 2:
        return math.copysign(math.inf, log_ratio)
    return log_ratio


def _pairs(
    logs: Sequence[Floats], base: Sequence[Passes], cur: Passes, cur_logs: Floats
) -> tuple[Floats, Floats] | None:
    """The base side at each schedule index the current side ran (the mean over the
    baseline's boots) and the current side's values there, if ``MIN_PAIRS`` or more."""
    means: dict[int, list[float]] = {}
    for boot_logs, boot in zip(logs, base, strict=True):
        for index, value in zip(boot.indices, boot_logs, strict=True):
            means.setdefault(index, []).append(float(value))
    kept = [(float(np.mean(means[i])), float(v))
            for i, v in zip(cur.indices, cur_logs, strict=True) if i in means]  # fmt: skip
    if len(kept) < MIN_PAIRS:
        return None
    return np.array([b for b, _ in kept]), np.array([c for _, c in kept])


def _bootstrap(
    key: str,
    base: Sequence[Passes],
    cur: Passes,
    b_med: float,
    c_med: float,
    seed: int,
    tolerance: float,
) -> _Result:
    """A single pass on a side: time blocks of the raw passes, when both sides have them."""
    base_records = [r for b in base for r in b.records]
    cls, name = split_key(key)
    # a server metric (preemptions, gauge peaks) is read at the pass's ends, not from
    # its requests: time blocks of requests cannot resample it (it raised KeyError)
    server = METRICS[name].source == "server"
    if server or not base_records or not cur.records:
        what = "a server metric" if server else "a single pass without raw samples"
        ratio = c_med / b_med if b_med else math.nan
        return _Result(
            b_med, c_med, ratio, math.nan, math.nan, math.nan, f"{what} gives no interval"
        )

    def mine(records: Sequence[RequestRecord]) -> list[RequestRecord]:
        return [r for r in records if cls is None or r.cls == cls]

    base_blocks, cur_blocks = _blocks(base_records), _blocks(cur.records)
    field = METRICS[name].field
    statistic: intervals.Statistic
    if field in LATENCIES:  # each block's samples once, not once per replicate
        base_blocks, cur_blocks = (
            [(stats.samples(mine(recs))[field], secs) for recs, secs in blocks]
            for blocks in (base_blocks, cur_blocks)
        )

        def statistic(values: Any, seconds: float) -> float:
            return stats.latency_value(name, values)

    else:

        def statistic(values: Any, seconds: float) -> float:
            return stats.value(name, mine(values), seconds)

    ratio, low, high, p = intervals.block_bootstrap(
        base_blocks, cur_blocks, statistic, seed, 1 + tolerance
    )
    return _Result(b_med, c_med, ratio, low, high, p, "time blocks")


def _blocks(passes: Sequence[PassRecord]) -> list[intervals.Block]:
    """Consecutive time blocks of each pass, by request start time."""
    out: list[intervals.Block] = []
    for p in passes:
        count = max(4, min(12, len(p.records) // 15))
        groups: list[list[object]] = [[] for _ in range(count)]
        span = p.duration_s or 1.0
        first = p.start_s + p.ramp_s
        for r in p.records:
            groups[min(count - 1, max(0, int((r.start - first) / span * count)))].append(r)
        out += [(g, p.duration_s / count) for g in groups]
    return out


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
    single = _single(base, current)
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
        key: _one(key, base, current, pair, seed, tols[key], rule_alpha, look, component(key))
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
    r: _Result,
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


def _bounds(r: _Result, level: float, p_holm: float, higher: bool) -> tuple[float, float]:
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


def _single(base: Sequence[Passes], current: Passes) -> bool:
    """A single pass on either side: compared by time blocks, reported, never gated."""
    return min(sum(len(b.metrics) for b in base), len(current.metrics)) < 2


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
