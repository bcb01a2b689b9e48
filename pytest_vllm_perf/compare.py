"""Regression verdicts between a baseline and the current run, from raw samples.

Requests in one pass of a workload share batches and queues, and whole passes
drift with the machine, so the spread of requests inside one pass understates
the noise between two runs. The unit of noise is therefore the pass
(``Repetition``). With several passes on each side, a metric's ratio is the
Hodges-Lehmann shift of its per-pass log values, with the exact Mann-Whitney
interval: distribution-free, so a pass hit by a machine hiccup (common on
shared CPUs) counts as one pass, not by its size, and exact for few passes,
where a bootstrap over a handful of passes understates the spread and a t
interval assumes normality.
With one pass on either side we fall back to a moving-block bootstrap over time
blocks of the passes, and say that it understates run-to-run noise.
A change is ``regressed`` only when it is significant (the interval excludes 1)
and its point estimate is beyond the metric's tolerance.
``bench/gate_power.py`` measures the false-alarm and detection rates this gives.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_vllm_perf.records import Repetition, RequestRecord
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
# On the embedded CPU engine, whole boots differ: over five boots of one 2-core VM,
# the median pass's ITL p50 ranged x1.22, TPOT x1.13 and throughput x1.07
# (bench/gate_power.py). Passes within one run share their boot, so no interval
# sees that; only a tolerance above it keeps a rerun from failing on it.
PLATFORM_TOLERANCES: Mapping[str, Mapping[str, float]] = {
    "cpu": {"itl_p50_ms": 0.30, "tpot_mean_ms": 0.25, "output_throughput": 0.15},
}
HIGHER_IS_BETTER = frozenset({"output_throughput"})
BOOTSTRAP = 1000
BLOCKS = "time blocks"
CONFIDENCE = 0.95


def default_tolerances(platform: str) -> dict[str, float]:
    """The tolerances a platform starts from, before ini, profile and marker overrides."""
    return {**DEFAULT_TOLERANCES, **PLATFORM_TOLERANCES.get(platform, {})}


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
    basis: str = ""  # what the interval is over: "3 vs 3 passes", time blocks, or a count

    def describe(self) -> str:
        over = f" over {self.basis}" if self.basis else ""
        return (
            f"{self.metric}: {self.baseline:.4g} -> {self.current:.4g} "
            f"(x{self.ratio:.3f}, 95% CI x{self.low:.3f}..x{self.high:.3f}{over}, "
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


@dataclass(frozen=True)
class Block:
    """Samples of one time slice of a pass, with the slice's length."""

    samples: Samples
    duration_s: float


def blocks(rep: Repetition, count: int) -> list[Block]:
    """``count`` consecutive time blocks of one pass, by request start time."""
    groups: list[list[RequestRecord]] = [[] for _ in range(count)]
    span = rep.duration_s or 1.0
    for r in rep.records:
        groups[min(count - 1, max(0, int((r.start - rep.start_s) / span * count)))].append(r)
    return [Block(samples(g), rep.duration_s / count) for g in groups]


def side_blocks(reps: Sequence[Repetition]) -> list[Block]:
    return [b for rep in reps for b in blocks(rep, block_count(len(rep.records)))]


def resample(parts: Sequence[Block], rng: np.random.Generator) -> Block:
    """One bootstrap replicate: as many blocks as there are, drawn with replacement."""
    chosen = [parts[j] for j in rng.integers(0, len(parts), len(parts))]
    return Block(
        {f: np.concatenate([c.samples[f] for c in chosen]) for f in FIELDS},
        sum(c.duration_s for c in chosen),
    )


def bootstrap_ratios(
    base: Sequence[Block], cur: Sequence[Block], rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Per metric, the ratios current/baseline over block resamples of both sides."""
    out = {m: np.empty(BOOTSTRAP) for m in STATISTICS}
    for i in range(BOOTSTRAP):
        b, c = resample(base, rng), resample(cur, rng)
        for metric, stat in STATISTICS.items():
            with np.errstate(divide="ignore", invalid="ignore"):
                out[metric][i] = np.divide(
                    stat(c.samples, c.duration_s), stat(b.samples, b.duration_s)
                )
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


@functools.lru_cache(maxsize=256)
def rank_sum_null(m: int, n: int) -> tuple[int, ...]:
    """How many orderings of ``m`` vs ``n`` values give each Mann-Whitney U = 0..m*n."""
    if m == 0 or n == 0:
        return (1,)
    with_last_m = rank_sum_null(m - 1, n)  # the largest value is one of the m: U += n
    with_last_n = rank_sum_null(m, n - 1)
    out = [0] * (m * n + 1)
    for u, count in enumerate(with_last_m):
        out[u + n] += count
    for u, count in enumerate(with_last_n):
        out[u] += count
    return tuple(out)


def can_be_significant(m: int, n: int) -> bool:
    """Whether ``m`` vs ``n`` passes can ever give an interval that excludes no change."""
    counts = rank_sum_null(m, n)
    return counts[0] <= (1 - CONFIDENCE) / 2 * sum(counts)


def shift_interval(base: np.ndarray, cur: np.ndarray) -> tuple[float, float, float]:
    """Hodges-Lehmann shift ``cur - base`` and its exact distribution-free 95% interval.

    The interval is the k-th smallest and k-th largest of the m*n pairwise
    differences, k from the Mann-Whitney null distribution, so its coverage is at
    least 95% whatever the shape of the per-pass distribution (only a shift of it
    is assumed). With too few passes (fewer than 4 per side when equal) no such k
    exists and the interval is unbounded.
    """
    diffs = np.sort(np.subtract.outer(cur, base).ravel())
    counts = rank_sum_null(len(base), len(cur))
    allowed = (1 - CONFIDENCE) / 2 * sum(counts)
    k, cumulative = 0, 0
    while cumulative + counts[k] <= allowed:
        cumulative += counts[k]
        k += 1
    estimate = float(np.median(diffs))
    if k == 0:
        return estimate, -math.inf, math.inf
    return estimate, float(diffs[k - 1]), float(diffs[len(diffs) - k])


def per_pass(blocks: Sequence[Block], stat: Statistic) -> np.ndarray:
    return np.array([stat(b.samples, b.duration_s) for b in blocks], dtype=float)


def _usable(values: np.ndarray) -> bool:
    """Two or more finite, positive per-pass values: what the log-scale interval needs."""
    return len(values) >= 2 and bool(np.all(np.isfinite(values)) and np.all(values > 0))


def pooled(reps: Sequence[Repetition]) -> Block:
    records = [r for rep in reps for r in rep.records]
    return Block(samples(records), sum(rep.duration_s for rep in reps))


def _quantiles(ratios: np.ndarray, alpha: float) -> tuple[float, float]:
    """The two-sided interval of bootstrap ratios; infinite ratios (failures) stay infinite."""
    known = np.sort(ratios[~np.isnan(ratios)])
    if not len(known):
        return math.nan, math.nan
    at = np.array([alpha, 1 - alpha]) * (len(known) - 1)
    low, high = known[np.floor(at).astype(int)], known[np.ceil(at).astype(int)]
    return float(low[0]), float(high[1])


@dataclass(frozen=True)
class _Fallback:
    """The block bootstrap's ratios and each side's pooled samples."""

    ratios: dict[str, np.ndarray]
    whole: tuple[Block, Block]

    @classmethod
    def of(cls, base: Sequence[Repetition], cur: Sequence[Repetition], seed: int) -> _Fallback:
        rng = np.random.default_rng(seed)
        ratios = bootstrap_ratios(side_blocks(base), side_blocks(cur), rng)
        return cls(ratios, (pooled(base), pooled(cur)))


def compare_runs(
    baseline: Sequence[Repetition],
    current: Sequence[Repetition],
    tolerances: Mapping[str, float],
    seed: int = 0,
) -> list[Verdict]:
    """A verdict for every latency and throughput metric."""
    fallback: _Fallback | None = None  # computed only if some metric needs it
    pass_b, pass_c = ([pooled([rep]) for rep in side] for side in (baseline, current))
    alpha = (1 - CONFIDENCE) / 2
    out = []
    for metric, stat in STATISTICS.items():
        vb, vc = per_pass(pass_b, stat), per_pass(pass_c, stat)
        if _usable(vb) and _usable(vc):
            b, c = float(np.median(vb)), float(np.median(vc))
            shift, low_log, high_log = shift_interval(np.log(vb), np.log(vc))
            ratio, low, high = math.exp(shift), math.exp(low_log), math.exp(high_log)
            basis = f"{len(vb)} vs {len(vc)} passes"
        else:
            fallback = fallback or _Fallback.of(baseline, current, seed)
            whole_b, whole_c = fallback.whole
            b = stat(whole_b.samples, whole_b.duration_s)
            c = stat(whole_c.samples, whole_c.duration_s)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = float(np.divide(c, b))
            low, high = _quantiles(fallback.ratios[metric], alpha)
            basis = BLOCKS
        tol = tolerances.get(metric, DEFAULT_TOLERANCES[metric])
        verdict = classify(ratio, low, high, tol, metric in HIGHER_IS_BETTER)
        out.append(Verdict(metric, b, c, ratio, low, high, tol, verdict, basis))
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
    return Verdict(metric, baseline, current, ratio, ratio, ratio, tolerance, verdict, "counter")
