"""Regression verdicts: the current passes against a baseline's passes, metric by metric.

The unit of noise is the pass (see ``core.records.PassRecord``); the interval
methods are in ``intervals``. This module decides which method the data allow,
how boot-to-boot drift enters, and what each metric's verdict is:

- **Pairing.** When both sides replay the same seeded schedule, pass k can be
  compared with pass k (``paired``): what the schedule decides (which passes get
  the long prefills) cancels out. The exact signed-rank test needs more passes
  than the two-group test to reach a given p-value (6 pairs: at best p = 1/32; 6
  vs 6 passes: p = 1/462), so pairs are used only when there are enough for a
  significant verdict after Holm's correction: 6 for one gated metric, 7 for up
  to 3, 8 for up to 6. Otherwise all passes are compared as two groups.
- **Boots.** A baseline can hold passes from several boots of the server. Passes
  inside one boot agree more closely than boots do (on the H200, decode p99 ITL
  moved 12% between two boots while its passes agreed within a few percent), so
  with two or more boots the interval is widened by the largest difference
  between the baseline's own boots, and the p-value tests for a change beyond
  that drift. With one boot the interval covers only noise inside a boot, and
  the tolerances must absorb boot drift; the gate says so.
- **Verdict.** ``regressed`` only when the change is significant after Holm's
  correction over the test's gated metrics **and** its estimate is beyond the
  metric's tolerance; ``improved`` likewise; ``unchanged`` when the whole interval
  lies within tolerance; otherwise ``inconclusive``.

Counter rates (preemptions per second) are compared as log(rate + 1 event per
typical pass, the median pass length over both sides), so a pass without
preemptions does not make the ratio infinite, and no preemptions on either side
is a ratio of exactly 1 whatever each side's pass lengths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from pytest_vllm_perf.core.records import MetricVerdict, PassRecord, Verdict
from pytest_vllm_perf.core.registry import METRICS, split_key, tolerance_for
from pytest_vllm_perf.verdict import intervals, stats

__all__ = ["MIN_PAIRS", "Passes", "classify", "compare", "min_pairs", "passes_note"]

MIN_PAIRS: Final = 6  # the fewest pairs for which a 95% signed-rank interval is bounded


def min_pairs(gated: int) -> int:
    """The fewest pairs whose best signed-rank p (2 / 2**n) passes Holm over ``gated`` metrics."""
    n = MIN_PAIRS
    while 2 / 2**n >= ALPHA / max(1, gated):
        n += 1
    return n


ALPHA: Final = 1 - intervals.CONFIDENCE


@dataclass(frozen=True)
class Passes:
    """One boot's passes as a verdict sees them: per-pass metrics and schedule indices.

    ``records`` are the raw passes when they are at hand (always for the current
    run, for old baselines that stored them): only the single-pass bootstrap
    needs them.
    """

    metrics: tuple[Mapping[str, float], ...]
    indices: tuple[int, ...]
    durations: tuple[float, ...]
    records: tuple[PassRecord, ...] = ()

    def values(self, key: str) -> np.ndarray:
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


def classify(
    ratio: float, low: float, high: float, p: float, tolerance: float, higher_is_better: bool
) -> Verdict:
    """Regressed only when significant and beyond tolerance; likewise for improved."""
    if any(math.isnan(x) for x in (ratio, low, high)):
        return Verdict.INCONCLUSIVE
    if higher_is_better:
        ratio, low, high = (
            1 / ratio if ratio else math.inf,
            1 / high if high else math.inf,
            1 / low if low else math.inf,
        )
    significant = p < ALPHA
    if significant and ratio > 1 + tolerance and low > 1:
        return Verdict.REGRESSED
    if significant and ratio < 1 / (1 + tolerance) and high < 1:
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


def _transform(key: str, values: np.ndarray, pseudo_rate: float) -> np.ndarray:
    """Log values; counter rates get ``pseudo_rate`` (one event per typical pass) added
    first. The same pseudo-rate on both sides: one event per each pass's own length
    made 0 preemptions against 0 a x1.94 "regression" when one side's passes drained
    faster (session 7's api_server A/B on the H200)."""
    if METRICS[split_key(key)[1]].statistic == "counter rate":
        values = values + pseudo_rate
    with np.errstate(divide="ignore", invalid="ignore"):
        logs: np.ndarray = np.log(values)
    return logs


def _usable(logs: np.ndarray) -> bool:
    return len(logs) >= 1 and bool(np.all(np.isfinite(logs)))


def _one(key: str, base: Sequence[Passes], cur: Passes, pairs: int, seed: int) -> _Result:
    """One metric's comparison; ``pairs`` is the fewest pairs to pair passes by (0: never)."""
    single = min(sum(len(b.metrics) for b in base), len(cur.metrics)) < 2
    base = [b for b in (b.measured(key) for b in base) if b.metrics] or list(base)
    measured = cur.measured(key)
    cur = measured if measured.metrics else cur
    raw = [b.values(key) for b in base]
    cur_values = cur.values(key)
    b_med, c_med = float(np.median(np.concatenate(raw))), float(np.median(cur_values))
    seconds = [d for side in (*base, cur) for d in side.durations if d > 0]
    pseudo = 1.0 / float(np.median(seconds)) if seconds else 1.0
    logs = [_transform(key, values, pseudo) for values in raw]
    base_logs = np.concatenate(logs)
    cur_logs = _transform(key, cur_values, pseudo)
    if not (_usable(base_logs) and _usable(cur_logs)):
        return _Result(b_med, c_med, math.nan, math.nan, math.nan, math.nan, "no finite values")
    if single:
        return _bootstrap(key, base, cur, b_med, c_med, seed)
    if min(len(base_logs), len(cur_logs)) < 2:
        # passes were left out (a class without requests, a pass streamed in bursts):
        # time blocks of the raw passes would bring back exactly what was left out
        basis = f"{len(base_logs)} vs {len(cur_logs)} passes measured it"
        return _Result(b_med, c_med, math.nan, math.nan, math.nan, math.nan, basis)
    drift = float(np.ptp([np.median(x) for x in logs])) if len(logs) > 1 else 0.0
    by_index = _pairs(logs, base, cur, cur_logs, pairs) if pairs else None
    if by_index is not None:
        est = intervals.paired(by_index, margin=drift)
        method = f"{len(by_index)} pairs of passes, paired"
    else:
        est = intervals.unpaired(base_logs, cur_logs, margin=drift)
        method = f"{len(base_logs)} vs {len(cur_logs)} passes"
    if len(base) > 1:
        method += f", {len(base)} baseline boots, drift allowance x{math.exp(drift):.3f}"
    return _Result(
        b_med, c_med, math.exp(est.shift), math.exp(est.low), math.exp(est.high), est.p_value,
        method,
    )  # fmt: skip


def _pairs(
    logs: Sequence[np.ndarray],
    base: Sequence[Passes],
    cur: Passes,
    cur_logs: np.ndarray,
    needed: int,
) -> np.ndarray | None:
    """Log ratios of current pass k to the baseline boots' mean at pass k, if enough pairs."""
    means: dict[int, list[float]] = {}
    for boot_logs, boot in zip(logs, base, strict=True):
        for index, value in zip(boot.indices, boot_logs, strict=True):
            means.setdefault(index, []).append(float(value))
    diffs = [
        value - float(np.mean(means[index]))
        for index, value in zip(cur.indices, cur_logs, strict=True)
        if index in means
    ]
    return np.array(diffs) if len(diffs) >= needed else None


def _bootstrap(
    key: str, base: Sequence[Passes], cur: Passes, b_med: float, c_med: float, seed: int
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

    def statistic(records: Sequence[object], seconds: float) -> float:
        chosen = [r for r in records if cls is None or getattr(r, "cls", None) == cls]
        return stats.value(name, chosen, seconds)  # type: ignore[arg-type]

    ratio, low, high, p = intervals.block_bootstrap(
        _blocks(base_records), _blocks(cur.records), statistic, seed
    )
    return _Result(b_med, c_med, ratio, low, high, p, "time blocks")


def _blocks(passes: Sequence[PassRecord]) -> list[tuple[Sequence[object], float]]:
    """Consecutive time blocks of each pass, by request start time."""
    out: list[tuple[Sequence[object], float]] = []
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
) -> list[MetricVerdict]:
    """A verdict for each of ``keys``; Holm's correction runs over the ``gated`` ones."""
    pairs = min_pairs(len(gated)) if pair else 0
    results = {key: _one(key, base, current, pairs, seed) for key in keys}
    gated_keys = [k for k in keys if k in gated]
    adjusted = dict(
        zip(gated_keys, intervals.holm([results[k].p for k in gated_keys]), strict=True)
    )
    out = []
    for key, r in results.items():
        tol = tolerance_for(key, tolerances)
        assert tol is not None, key
        p_holm = adjusted.get(key, r.p)
        higher = METRICS[split_key(key)[1]].higher_is_better
        verdict = classify(r.ratio, r.low, r.high, p_holm, tol, higher)
        out.append(
            MetricVerdict(
                key, r.baseline, r.current, r.ratio, r.low, r.high, tol, verdict,
                r.basis, r.p, p_holm, key in gated,
            )
        )  # fmt: skip
    return out


def passes_note(
    base: Sequence[Passes], current: Passes, gated: int = 1, boots_matter: bool = True
) -> str:
    """Say what the intervals cover, and when the passes cannot support a verdict.

    ``boots_matter`` False (an A/B run, both sides measured in the same hour on the
    same machine) leaves out the note that one baseline boot cannot show boot drift.

    With Holm over ``gated`` metrics, the smallest p must be below 5% / ``gated``.
    """
    n_base = sum(len(b.metrics) for b in base)
    n_cur = len(current.metrics)
    if min(n_base, n_cur) < 2:
        return (
            f"{n_base} baseline vs {n_cur} current pass(es): intervals come from time "
            "blocks inside a pass and understate run-to-run noise; use --vllm-repeat 6 "
            "or more on both sides for a trustworthy verdict"
        )
    if not intervals.can_be_significant(n_base, n_cur, ALPHA / max(1, gated)):
        return (
            f"{n_base} baseline vs {n_cur} current passes can never give a significant "
            f"verdict over {gated} gated metric(s) at 95%; use more passes "
            "(--vllm-repeat 6 on both sides gates up to 4 metrics)"
        )
    if len(base) == 1 and boots_matter:
        return (
            "the baseline holds one boot: intervals cover noise inside a boot, not between "
            "boots; add boots with --vllm-add-boot so that the gate learns the drift"
        )
    return ""
