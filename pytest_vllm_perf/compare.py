"""Regression verdicts between a baseline run and the current run, from raw samples.

Requests in one run share batches and queues, so resampling single requests
understates the noise. We resample contiguous time blocks instead (a moving-
block bootstrap), which keeps that correlation, and then require a change to be
both significant (the interval excludes 1) and larger than the metric's tolerance.
``bench/gate_power.py`` measures the false-alarm and detection rates this gives.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_vllm_perf.records import RequestRecord
from pytest_vllm_perf.stats import samples

REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE = "regressed", "improved", "unchanged", "inconclusive"

# Default tolerances: the relative change below which a difference is not worth failing
# a build. Tails move more than medians from run to run on a shared machine.
DEFAULT_TOLERANCES: Mapping[str, float] = {
    "ttft_p50_ms": 0.15,
    "ttft_p99_ms": 0.30,
    "itl_p50_ms": 0.15,
    "itl_p99_ms": 0.15,
    "tpot_mean_ms": 0.10,
    "e2el_p99_ms": 0.25,
    "output_throughput": 0.10,
    "preemptions": 0.50,
}
HIGHER_IS_BETTER = frozenset({"output_throughput"})
BOOTSTRAP = 1000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Verdict:
    """One metric compared: point ratio (current / baseline), its interval, the verdict."""

    metric: str
    baseline: float
    current: float
    ratio: float
    low: float
    high: float
    tolerance: float
    verdict: str

    def describe(self) -> str:
        return (
            f"{self.metric}: {self.baseline:.4g} -> {self.current:.4g} "
            f"(x{self.ratio:.3f}, 95% CI x{self.low:.3f}..x{self.high:.3f}, "
            f"tolerance {self.tolerance:.0%}) {self.verdict}"
        )


Samples = dict[str, np.ndarray]
Statistic = Callable[[Samples, float], float]
FIELDS = ("ttft", "itl", "e2el", "tpot", "tokens")


def _pct(field: str, q: float) -> Statistic:
    def stat(s: Samples, _duration: float) -> float:
        values = s[field]
        if not len(values):
            return math.nan
        with np.errstate(invalid="ignore"):
            out = float(np.percentile(values, q))
        return math.inf if math.isnan(out) else out * 1000

    return stat


def _tpot_mean(s: Samples, _duration: float) -> float:
    return float(np.mean(s["tpot"])) * 1000 if len(s["tpot"]) else math.nan


def _throughput(s: Samples, duration: float) -> float:
    return float(np.sum(s["tokens"])) / duration if duration > 0 else math.nan


STATISTICS: Mapping[str, Statistic] = {
    "ttft_p50_ms": _pct("ttft", 50),
    "ttft_p99_ms": _pct("ttft", 99),
    "itl_p50_ms": _pct("itl", 50),
    "itl_p99_ms": _pct("itl", 99),
    "tpot_mean_ms": _tpot_mean,
    "e2el_p99_ms": _pct("e2el", 99),
    "output_throughput": _throughput,
}


def blocks(records: Sequence[RequestRecord], duration: float, count: int) -> list[Samples]:
    """Samples of ``count`` consecutive time blocks, by request start time."""
    groups: list[list[RequestRecord]] = [[] for _ in range(count)]
    for r in records:
        groups[min(count - 1, max(0, int(r.start / duration * count)))].append(r)
    return [samples(g) for g in groups]


def resample(parts: list[Samples], rng: np.random.Generator) -> Samples:
    """One bootstrap replicate: as many blocks as there are, drawn with replacement."""
    chosen = [parts[j] for j in rng.integers(0, len(parts), len(parts))]
    return {f: np.concatenate([c[f] for c in chosen]) for f in FIELDS}


def bootstrap_ratios(
    base: list[Samples],
    cur: list[Samples],
    base_duration: float,
    cur_duration: float,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Per metric, the ratios current/baseline over block resamples of both runs."""
    out = {m: np.empty(BOOTSTRAP) for m in STATISTICS}
    for i in range(BOOTSTRAP):
        b, c = resample(base, rng), resample(cur, rng)
        for metric, stat in STATISTICS.items():
            with np.errstate(divide="ignore", invalid="ignore"):
                out[metric][i] = np.divide(stat(c, cur_duration), stat(b, base_duration))
    return out


def classify(
    ratio: float, low: float, high: float, tolerance: float, higher_is_better: bool
) -> str:
    """Regressed only when significant and beyond tolerance; likewise for improved."""
    if any(math.isnan(x) for x in (ratio, low, high)):
        return INCONCLUSIVE
    if higher_is_better:
        ratio, low, high = (
            1 / ratio if ratio else math.inf,
            1 / high if high else math.inf,
            (1 / low if low else math.inf),
        )
    if low > 1 and ratio > 1 + tolerance:
        return REGRESSED
    if high < 1 and ratio < 1 / (1 + tolerance):
        return IMPROVED
    if low >= 1 / (1 + tolerance) and high <= 1 + tolerance:
        return UNCHANGED
    return INCONCLUSIVE


def block_count(n_records: int) -> int:
    return max(4, min(12, n_records // 15))


def compare_samples(
    baseline: Sequence[RequestRecord],
    base_duration: float,
    current: Sequence[RequestRecord],
    cur_duration: float,
    tolerances: Mapping[str, float],
    seed: int = 0,
) -> list[Verdict]:
    """A verdict for every latency and throughput metric."""
    rng = np.random.default_rng(seed)
    ratios = bootstrap_ratios(
        blocks(baseline, base_duration, block_count(len(baseline))),
        blocks(current, cur_duration, block_count(len(current))),
        base_duration,
        cur_duration,
        rng,
    )
    whole_b, whole_c = samples(baseline), samples(current)
    alpha = (1 - CONFIDENCE) / 2
    out = []
    for metric, stat in STATISTICS.items():
        b, c = stat(whole_b, base_duration), stat(whole_c, cur_duration)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = float(np.divide(c, b))
        finite = ratios[metric][~np.isnan(ratios[metric])]
        low, high = (
            (float(np.quantile(finite, alpha)), float(np.quantile(finite, 1 - alpha)))
            if len(finite)
            else (math.nan, math.nan)
        )
        tol = tolerances.get(metric, DEFAULT_TOLERANCES[metric])
        verdict = classify(ratio, low, high, tol, metric in HIGHER_IS_BETTER)
        out.append(Verdict(metric, b, c, ratio, low, high, tol, verdict))
    return out


def compare_count(metric: str, baseline: float, current: float, tolerance: float) -> Verdict:
    """Counters such as preemptions: a rise beyond tolerance and by more than 2 regresses."""
    margin = max(2.0, baseline * tolerance)
    if current > baseline + margin:
        verdict = REGRESSED
    elif current < baseline - margin:
        verdict = IMPROVED
    else:
        verdict = UNCHANGED
    ratio = current / baseline if baseline else (1.0 if current == baseline else math.inf)
    return Verdict(metric, baseline, current, ratio, ratio, ratio, tolerance, verdict)
