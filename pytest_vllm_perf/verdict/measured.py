"""One metric's comparison, before its verdict: the figures of each side, the test the
data allow (paired, unpaired, ranked where failures made a value infinite, time blocks
for a single pass) and its p-values; ``compare`` turns each into a verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from pytest_vllm_perf.core.records import PassRecord, RequestRecord
from pytest_vllm_perf.core.registry import LATENCIES, METRICS, split_key
from pytest_vllm_perf.metrics import compute
from pytest_vllm_perf.metrics.passes import Floats, Passes
from pytest_vllm_perf.verdict import decide, intervals, rules
from pytest_vllm_perf.verdict.drift import Component
from pytest_vllm_perf.verdict.sequential import Look

__all__ = ["MIN_PAIRS", "Result", "is_single", "measure"]

MIN_PAIRS: Final = 3  # the fewest pairs paired: a t over 2 degrees of freedom


@dataclass(frozen=True)
class Result:
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


def _back(key: str, logs: Floats, pseudo_rate: float) -> float:
    """The value whose ``_transform`` is the mean of ``logs``: a side's geometric mean
    (less the pseudo-rate of a counter)."""
    found = METRICS[split_key(key)[1]]
    mean = float(np.mean(logs))
    value = math.exp(-mean if found.higher_is_better else mean)
    return value - pseudo_rate if found.statistic == "counter rate" else value


def measure(
    key: str,
    base: Sequence[Passes],
    cur: Passes,
    pair: bool,
    seed: int,
    tolerance: float,
    rule_alpha: float,
    look: Look,
    drift: Component,
) -> Result:
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
) -> Result:
    """One metric's comparison: paired where ``pair`` and three or more passes share a
    schedule index, else unpaired; ranked where failures made a value infinite."""
    single = is_single(base, cur)
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
        return Result(b_med, c_med, ratio, math.nan, math.nan, math.nan, failure, failed=True)
    seconds = [d for side in (*base, cur) for d in side.durations if d > 0]
    pseudo = 1.0 / float(np.median(seconds)) if seconds else 1.0
    logs = [_transform(key, values, pseudo) for values in raw]
    cur_logs = _transform(key, cur_values, pseudo)
    base_logs = np.concatenate(logs)
    if np.isnan(base_logs).any() or np.isnan(cur_logs).any() or not len(cur_logs):
        return Result(b_med, c_med, math.nan, math.nan, math.nan, math.nan, "no finite values")
    if single:
        return _bootstrap(key, base, cur, b_med, c_med, seed, tolerance)
    if min(len(base_logs), len(cur_logs)) < 2:
        # passes were left out (a class without requests, a pass streamed in bursts):
        # time blocks of the raw passes would bring back exactly what was left out
        basis = f"{len(base_logs)} vs {len(cur_logs)} passes measured it"
        return Result(b_med, c_med, math.nan, math.nan, math.nan, math.nan, basis)
    boots = f", {len(base)} baseline boots" if len(base) > 1 else ""
    allowing = f", allowing {drift.source}" if drift.sd else ""
    sides = _Sides(key, b_med, c_med, f"{boots}{allowing}")
    if np.isinf(base_logs).any() or np.isinf(cur_logs).any():
        return _ranked(sides, base_logs, cur_logs, tolerance, look, drift)
    paired = _pairs(logs, base, cur, cur_logs) if pair else None
    b_side, c_side = paired or (base_logs, cur_logs)
    # each side's value is the statistic the ratio compares (the passes' geometric mean,
    # over the pairs where paired): with each side's median, an A/A printed
    # "339.3 -> 269.7 (x1.197" and "5.874 -> 6.48 (x0.998"
    sides = replace(sides, base=_back(key, b_side, pseudo), current=_back(key, c_side, pseudo))
    return _tested(sides, (b_side, c_side), paired is not None, len(base) == 1,
                   tolerance, look, drift)  # fmt: skip


@dataclass(frozen=True)
class _Sides:
    """What a test's result carries whatever the test: the metric, each side's median
    and what the base side was and allowed for (boots, drift)."""

    key: str
    base: float
    current: float
    allowing: str

    @property
    def higher(self) -> bool:
        return METRICS[split_key(self.key)[1]].higher_is_better


def _ranked(
    sides: _Sides, base_logs: Floats, cur_logs: Floats, tolerance: float, look: Look,
    drift: Component,
) -> Result:  # fmt: skip
    """Failed requests made values infinite: a rank test, the infinite ones the worst."""
    finite = np.concatenate([base_logs, cur_logs])
    finite = finite[np.isfinite(finite)]
    if not len(finite):
        return Result(sides.base, sides.current, math.nan, math.nan, math.nan, math.nan,
                      "no finite values")  # fmt: skip
    low, top = float(finite.min()) - _RANK_GAP, float(finite.max()) + _RANK_GAP
    base_r, cur_r = (np.clip(x, low, top) for x in (base_logs, cur_logs))
    ranked = int(np.sum(np.isinf(base_logs)) + np.sum(np.isinf(cur_logs)))
    made = decide.ranked(base_r, cur_r, tolerance, look, drift)
    shift = _unranked(made.shift.mean)
    basis = (
        f"{len(base_r)} vs {len(cur_r)} passes, {made.test}{sides.allowing}, "
        f"{ranked} value(s) infinite or zero (failed requests, no tokens) ranked as the worst"
    )
    ratio = math.exp(-shift if sides.higher else shift)
    return Result(sides.base, sides.current, ratio, math.nan, math.nan, made.p_regressed, basis,
                  decision=made)  # fmt: skip


def _tested(
    sides: _Sides, logs: tuple[Floats, Floats], paired: bool, one_boot: bool, tolerance: float,
    look: Look, drift: Component,
) -> Result:  # fmt: skip
    """Finite logs on both sides: the paired or unpaired test, and the pair budget's end."""
    b_side, c_side = logs
    made = decide.decide(b_side, c_side, tolerance, look, paired, drift)
    what = (
        f"{len(c_side)} pairs of passes, paired, {made.test}"
        if paired
        else f"{len(b_side)} vs {len(c_side)} passes, {made.test}"
    )
    p_end, end = decide.end_p(b_side, c_side, tolerance, look, paired, drift,
                              dispersion=one_boot)  # fmt: skip
    est, (lo, hi) = made.shift.mean, made.shift.interval()
    if sides.higher:  # back to current / base
        est, lo, hi = -est, -hi, -lo
    return Result(
        sides.base, sides.current, math.exp(est), math.exp(lo), math.exp(hi), made.p_regressed,
        f"{what}{sides.allowing}", decision=made, p_end=p_end, end=end,
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
) -> Result:
    """A single pass on a side: time blocks of the raw passes, when both sides have them."""
    base_records = [r for b in base for r in b.records]
    cls, name = split_key(key)
    # a server metric (preemptions, gauge peaks) is read at the pass's ends, not from
    # its requests: time blocks of requests cannot resample it (it raised KeyError)
    server = METRICS[name].source == "server"
    if server or not base_records or not cur.records:
        what = "a server metric" if server else "a single pass without raw samples"
        ratio = c_med / b_med if b_med else math.nan
        return Result(
            b_med, c_med, ratio, math.nan, math.nan, math.nan, f"{what} gives no interval"
        )

    def mine(records: Sequence[RequestRecord]) -> list[RequestRecord]:
        return [r for r in records if cls is None or r.cls == cls]

    base_blocks, cur_blocks = _blocks(base_records), _blocks(cur.records)
    field = METRICS[name].field
    statistic: intervals.Statistic
    if field in LATENCIES:  # each block's samples once, not once per replicate
        base_blocks, cur_blocks = (
            [(compute.samples(mine(recs))[field], secs) for recs, secs in blocks]
            for blocks in (base_blocks, cur_blocks)
        )

        def statistic(values: Any, seconds: float) -> float:
            return compute.latency_value(name, values)

    else:

        def statistic(values: Any, seconds: float) -> float:
            return compute.value(name, mine(values), seconds)

    ratio, low, high, p = intervals.block_bootstrap(
        base_blocks, cur_blocks, statistic, seed, 1 + tolerance
    )
    return Result(b_med, c_med, ratio, low, high, p, "time blocks")


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


def is_single(base: Sequence[Passes], current: Passes) -> bool:
    """A single pass on either side: compared by time blocks, reported, never gated."""
    return min(sum(len(b.metrics) for b in base), len(current.metrics)) < 2
