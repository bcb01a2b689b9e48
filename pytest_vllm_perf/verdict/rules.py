"""The rules that can fail a test without a metric test: more failed requests, and
streams that came in bursts more often, than the base side's.

Each is an exact test at the share of the test's level that ``decide.RULE_SHARE``
gives the rules, so that no rule fails an A/A more often than the test's budget
allows. Four rules that once failed a test at no level at all now go through the
metric tests: an infinite latency from a failed request and a pass with zero
throughput are ranked as the worst values (``compare``); a server counter that could
not be read leaves that pass out of the metric; a metric no current pass measured is
``inconclusive``. With sporadic failures (0.02-0.3 a pass on both sides) the
infinite-latency rule alone failed 8-23% of A/As of a p99-gated test, and the
unmeasured-metric rule 1.6-5% with bursty passes on both sides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np

from pytest_vllm_perf.core.records import MetricVerdict, Verdict
from pytest_vllm_perf.core.registry import split_key
from pytest_vllm_perf.metrics import compute
from pytest_vllm_perf.metrics.passes import Passes

__all__ = ["BURST_SUSPECT", "burst_excess", "failed_requests", "fisher_greater", "streamed_worse"]


def fisher_greater(k_cur: int, n_cur: int, k_base: int, n_base: int) -> float:
    """One-sided exact p that the current side's share (``k_cur`` of ``n_cur``) is the
    larger: Fisher's test, P(X >= k_cur) for the hypergeometric X."""
    total, hits = n_cur + n_base, k_cur + k_base
    denominator = math.comb(total, n_cur)
    tail = sum(
        math.comb(hits, x) * math.comb(total - hits, n_cur - x)
        for x in range(k_cur, min(hits, n_cur) + 1)
    )
    return tail / denominator


def _bursty(key: str, side: Passes) -> tuple[int, int]:
    """How many of a side's passes streamed ``key``'s requests in bursts, of how many.

    Baselines saved before the flag existed left a bursty pass's per-chunk metrics
    out (NaN) and said nothing else: such a pass counts as bursty. An all-request
    metric counts a pass in which any class streamed in bursts: it was computed over
    the other classes only, a population of its own (``mixed`` with its chat class
    bursty in every pass came out ``unchanged`` on the long prompts' chunks)."""
    cls, _ = split_key(key)
    flag = f"{cls}.{compute.BURSTY}" if cls else compute.BURSTY
    suffix = f".{compute.BURSTY}"
    hits = 0
    for m in side.metrics:
        value = m.get(flag)
        if not cls and any(v for k, v in m.items() if k.endswith(suffix)):
            value = 1.0
        hits += bool(value) if value is not None else math.isnan(m.get(key, 0.0))
    return hits, len(side.metrics)


# Bursts more often than the baseline's at this one-sided level, short of the rule's:
# the metric, judged on the passes left, is never ``unchanged`` (nor ``improved``). Up
# to 6 of 8 bursty current passes against none were judged on the rest, and came out
# ``unchanged`` with TTFT x12 in the bursty ones (tests/unit/test_verdict_holes.py); in
# an A/B run the look is then undecided, and the pairs it adds give Fisher's test the
# power it lacked at 8.
BURST_SUSPECT: Final = 0.05


def burst_excess(key: str, base: Sequence[Passes], cur: Passes) -> tuple[float, str]:
    """Fisher's one-sided p that ``key``'s class streamed in bursts more often on the
    current side, and the counts as a line; (1, "") for a metric not per chunk."""
    if not split_key(key)[1].startswith(compute.PER_CHUNK):
        return 1.0, ""
    k_cur, n_cur = _bursty(key, cur)
    k_base, n_base = map(sum, zip(*(_bursty(key, b) for b in base), strict=True))
    if not k_cur:
        return 1.0, ""
    p = fisher_greater(k_cur, n_cur, k_base, n_base)
    return p, (
        f"streamed in bursts (a starved API server) in {k_cur} of {n_cur} current "
        f"passes against {k_base} of {n_base} baseline passes"
    )


def streamed_worse(key: str, base: Sequence[Passes], cur: Passes, alpha: float) -> str:
    """Why ``key`` regressed by rule, or "": its class streamed in bursts more often on
    the current side than the base's, significantly at ``alpha`` (the rules' share of
    the test's level over its gated metrics, Bonferroni)."""
    p_burst, bursts = burst_excess(key, base, cur)
    return bursts if p_burst < alpha else ""


def failed_requests(base: Sequence[Passes], current: Passes, alpha: float) -> list[MetricVerdict]:
    """A ``failed`` verdict whenever the current side failed more requests per pass than
    the baseline, whatever the ``failed`` threshold allows: ``regressed`` when that is
    significant at ``alpha`` (the rules' share of the test's level), else
    ``inconclusive``, still printed with its counts.

    The test is exact and conditional: given K failures on both sides together, the
    current side's share is Binomial(K, its share of the passes) when both fail at one
    rate. "More per pass than the baseline" alone failed 8.7% of A/A tests with
    sporadic failures (0.1 a pass); tests/unit/test_verdict_holes.py measures this
    one's rate."""
    base_failed = np.concatenate([b.values("failed") for b in base])
    cur_failed = current.values("failed")
    if not len(cur_failed) or np.all(np.isnan(cur_failed)):
        return []
    b_rate = float(np.nanmean(base_failed)) if np.any(~np.isnan(base_failed)) else 0.0
    c_rate = float(np.nanmean(cur_failed))
    if c_rate <= b_rate:
        return []
    k_cur, k_base = int(np.nansum(cur_failed)), int(np.nansum(base_failed))
    n_cur, n_base = int(np.sum(~np.isnan(cur_failed))), int(np.sum(~np.isnan(base_failed)))
    share = n_cur / (n_cur + n_base)
    total = k_cur + k_base
    p = sum(math.comb(total, x) * share**x * (1 - share) ** (total - x)
            for x in range(k_cur, total + 1))  # fmt: skip
    basis = (
        f"{k_cur} failed request(s) in {n_cur} current passes, against {b_rate:.2g} a pass "
        f"on the baseline; exact one-sided p={p:.3g} of no more than the baseline's rate"
    )
    verdict = Verdict.REGRESSED if p < alpha else Verdict.INCONCLUSIVE
    ratio = c_rate / b_rate if b_rate else math.inf
    return [MetricVerdict("failed", b_rate, c_rate, ratio, math.nan, math.nan, 0.0, verdict, basis)]
