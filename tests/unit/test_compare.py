"""Verdicts over passes: methods, boots, pairing and the family-wise correction."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pytest_vllm_perf.core.records import PassRecord, RequestRecord, Verdict
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.verdict import compare, stats

LOAD = Workload("w", (RequestClass("c", 16, 32, users=1),))


def run(scale: float, seed: int, n: int = 120) -> list[RequestRecord]:
    rng = random.Random(seed)
    return [
        RequestRecord(
            "c",
            i * 0.1,
            0.1 * scale * rng.uniform(0.8, 1.5),
            tuple(0.01 * scale * rng.uniform(0.5, 2) for _ in range(31)),
            0.5 * scale * rng.uniform(0.9, 1.1),
            16,
            32,
            32,
        )
        for i in range(n)
    ]


def side(levels: list[float], seed: int, first_index: int = 0) -> compare.Passes:
    """Passes whose whole level differs, as whole runs on a shared machine drift."""
    records = [
        PassRecord(tuple(run(level, seed + i)), 12.0, index=first_index + i)
        for i, level in enumerate(levels)
    ]
    return compare.Passes(
        metrics=tuple(stats.pass_metrics(LOAD, p) for p in records),
        indices=tuple(p.index for p in records),
        durations=tuple(p.duration_s for p in records),
        records=tuple(records),
    )


def verdicts(base, cur, keys=("itl_p50_ms", "tpot_mean_ms", "itl_p99_ms"), **kw):
    found = compare.compare(base, cur, keys, {}, gated=keys, **kw)
    return {v.metric: v for v in found}


def test_same_level_is_unchanged_and_clear_changes_are_called():
    same = verdicts([side([1.0] * 5, 0)], side([1.0] * 5, 100))
    assert {v.verdict for v in same.values()} <= {Verdict.UNCHANGED, Verdict.INCONCLUSIVE}
    assert same["itl_p50_ms"].verdict is Verdict.UNCHANGED
    slower = verdicts([side([1.0] * 5, 0)], side([1.5] * 5, 100))
    assert slower["itl_p50_ms"].verdict is slower["tpot_mean_ms"].verdict is Verdict.REGRESSED
    faster = verdicts([side([1.5] * 5, 0)], side([1.0] * 5, 100))
    assert faster["itl_p50_ms"].verdict is Verdict.IMPROVED


def test_significant_but_within_tolerance_is_not_regressed():
    found = verdicts([side([1.0] * 5, 0)], side([1.05] * 5, 0))
    assert found["itl_p50_ms"].verdict is Verdict.UNCHANGED
    assert found["itl_p50_ms"].low > 1  # every current pass is slower, within 15%
    assert found["itl_p50_ms"].p_value == 1  # the p of a change beyond the tolerance


def test_classify():
    assert compare.classify(1.3, 1.2, 1.4, 0.01, 0.1, False) is Verdict.REGRESSED
    assert (
        compare.classify(1.3, 1.2, 1.4, 0.2, 0.1, False) is Verdict.INCONCLUSIVE
    )  # not significant
    assert compare.classify(1.3, 0.9, 1.7, 0.3, 0.1, False) is Verdict.INCONCLUSIVE
    assert compare.classify(1.02, 0.98, 1.05, 0.5, 0.1, False) is Verdict.UNCHANGED
    # throughput: higher is better, so x0.7 is a regression
    assert compare.classify(0.7, 0.6, 0.8, 0.01, 0.1, True) is Verdict.REGRESSED


def test_holm_makes_a_test_of_many_metrics_as_strict_as_one():
    """Two metrics just significant on their own: Holm doubles the smaller p."""
    base, cur = [side([1.0] * 4, 0)], side([1.5] * 4, 100)  # 4 vs 4: smallest p = 2/70
    one = verdicts(base, cur, keys=("itl_p50_ms",))
    two = verdicts(base, cur, keys=("itl_p50_ms", "tpot_mean_ms"))
    assert one["itl_p50_ms"].p_value == pytest.approx(2 / 70)
    assert one["itl_p50_ms"].verdict is Verdict.REGRESSED
    assert two["itl_p50_ms"].p_holm == pytest.approx(4 / 70)
    assert two["itl_p50_ms"].verdict is Verdict.INCONCLUSIVE
    reported = compare.compare(
        base, cur, ("itl_p50_ms", "tpot_mean_ms"), {}, gated=("tpot_mean_ms",)
    )
    by = {v.metric: v for v in reported}
    assert by["itl_p50_ms"].gated is False and by["itl_p50_ms"].p_holm == by["itl_p50_ms"].p_value


def test_boots_widen_the_interval_by_their_drift():
    """A current boot 12% off is inside what two baseline boots 15% apart already show."""
    one_boot = verdicts([side([1.0] * 6, 0)], side([1.12] * 6, 100), keys=("itl_p50_ms",))
    base = [side([1.0] * 6, 0), side([1.15] * 6, 50)]
    two_boots = verdicts(base, side([1.12] * 6, 100), keys=("itl_p50_ms",))
    a, b = one_boot["itl_p50_ms"], two_boots["itl_p50_ms"]
    assert a.low > 1  # one boot: the 12% is significant
    assert b.low < 1 < b.high and b.high - b.low > a.high - a.low
    # the prediction interval of a third boot: t with 1 degree of freedom (12.706),
    # times sqrt(1 + 1/2), times the sd of the two boot medians (half their gap times
    # sqrt(2)); 1.96 in place of t gave x1.2 here
    medians = [float(np.median(np.log(b.values("itl_p50_ms")))) for b in base]
    sd = abs(medians[1] - medians[0]) / math.sqrt(2)
    allowance = math.exp(12.706 * math.sqrt(1.5) * sd)
    assert f"2 baseline boots, drift allowance x{allowance:.2f}" in b.basis
    assert b.verdict is not Verdict.REGRESSED


def test_pairs_needed_grow_with_the_gated_metrics():
    assert [compare.min_pairs(m) for m in (1, 3, 4, 6)] == [6, 7, 8, 8]


def test_pairing_is_used_when_six_passes_share_their_schedule():
    base = [side([1.0, 1.6, 1.0, 1.6, 1.0, 1.6], 0)]
    cur = side([1.2, 1.92, 1.2, 1.92, 1.2, 1.92], 0)  # x1.2 on a schedule-driven level
    one = ("itl_p50_ms",)
    paired = verdicts(base, cur, keys=one, pair=True)["itl_p50_ms"]
    unpaired = verdicts(base, cur, keys=one, pair=False)["itl_p50_ms"]
    three = verdicts(base, cur, keys=(*one, "tpot_mean_ms", "e2el_p99_ms"), pair=True)
    assert three["itl_p50_ms"].basis.startswith("6 vs 6")  # 7 pairs needed for 3 metrics
    assert paired.basis.startswith("6 pairs of passes, paired")
    assert unpaired.basis.startswith("6 vs 6 passes")
    assert paired.verdict is Verdict.REGRESSED
    assert unpaired.verdict is not Verdict.REGRESSED  # the schedule's spread hides it
    shifted = verdicts(base, side([1.2] * 6, 0, first_index=10), keys=("itl_p50_ms",), pair=True)
    assert shifted["itl_p50_ms"].basis.startswith("6 vs 6")  # no common pass indices


def test_single_pass_falls_back_to_time_blocks_and_says_so():
    found = verdicts([side([1.0], 0)], side([1.5], 1), keys=("itl_p50_ms",))
    assert found["itl_p50_ms"].basis == "time blocks"
    assert found["itl_p50_ms"].verdict is Verdict.REGRESSED
    assert found["itl_p50_ms"].gated is False  # reported, not gated (finding 6)
    note = compare.passes_note([side([1.0], 0)], side([1.0] * 4, 1))
    assert "1 baseline vs 4 current pass(es): reported, not gated" in note


def test_failed_requests_make_a_metric_regressed_naming_them_not_hidden():
    """Finding 3: infinite p99s from failures were 'inconclusive', which never fails."""
    cur = side([1.0] * 4, 5)
    broken = [dict(m, ttft_p99_ms=math.inf, failed=3.0) for m in cur.metrics]
    cur = compare.Passes(tuple(broken), cur.indices, cur.durations)
    found = verdicts([side([1.0] * 4, 0)], cur, keys=("ttft_p99_ms",))
    assert found["ttft_p99_ms"].verdict is Verdict.REGRESSED
    assert found["ttft_p99_ms"].basis == "12 failed request(s) on the current side make it infinite"
    assert found["ttft_p99_ms"].current == math.inf
    assert found["failed"].verdict is Verdict.REGRESSED and found["failed"].gated


def test_counter_rates_are_compared_per_pass():
    def rates(counts):
        metrics = tuple({"preemptions_per_s": c / 10.0} for c in counts)
        return compare.Passes(metrics, tuple(range(len(counts))), (10.0,) * len(counts))

    none = [rates([0, 0, 0, 0, 0])]
    keys = ("preemptions_per_s",)
    assert verdicts(none, rates([0] * 5), keys)["preemptions_per_s"].verdict is Verdict.UNCHANGED
    more = verdicts(none, rates([4, 6, 5, 7, 5]), keys)["preemptions_per_s"]
    assert more.verdict is Verdict.REGRESSED
    # the same rate over 2 or 8 passes is never called a regression by its count
    for n in (2, 8):
        same = verdicts([rates([5] * 5)], rates([5] * n), keys)["preemptions_per_s"]
        assert same.verdict is not Verdict.REGRESSED and same.ratio == pytest.approx(1)


def test_no_counter_events_on_either_side_is_no_change_whatever_the_pass_lengths():
    # on the H200 (bench/results/h200/tokenization-kv-len): 0 preemptions against 0 was called x1.94
    # "regressed" when the candidate's passes drained in half the time, as each side
    # added 1 event per its own pass length
    def zeros(seconds):
        metrics = tuple({"preemptions_per_s": 0.0} for _ in seconds)
        return compare.Passes(metrics, tuple(range(len(seconds))), tuple(seconds))

    keys = ("preemptions_per_s",)
    for pair in (False, True):
        found = compare.compare(
            [zeros([14.0, 15.0, 13.5, 14.2, 14.8, 13.9])],
            zeros([7.1, 7.3, 6.9, 7.0, 7.2, 7.4]),
            keys,
            {"preemptions_per_s": 0.5},
            gated=keys,
            pair=pair,
        )[0]
        assert found.ratio == pytest.approx(1)
        assert found.verdict is Verdict.UNCHANGED


def test_a_server_metric_over_one_pass_a_side_is_inconclusive_not_a_crash():
    # the single-pass bootstrap resamples requests; preemptions are a server counter
    def one(seed, rate):
        p = side([1.0], seed)
        return compare.Passes(
            tuple(dict(m, preemptions_per_s=rate) for m in p.metrics),
            p.indices,
            p.durations,
            p.records,
        )

    [found] = compare.compare(
        [one(0, 0.0)], one(1, 0.5), ("preemptions_per_s",), {"preemptions_per_s": 0.5}
    )
    assert found.verdict is Verdict.INCONCLUSIVE
    assert found.basis == "a server metric gives no interval"
    assert found.current == 0.5


def test_tolerance_of_a_class_metric_falls_back_to_its_metric():
    found = compare.compare(
        [side([1.0] * 4, 0)], side([1.0] * 4, 1), ("c.itl_p50_ms",), {"itl_p50_ms": 0.3}
    )
    assert found[0].tolerance == 0.3
    assert not np.isnan(found[0].ratio)


def test_a_pass_without_requests_of_a_class_is_left_out_of_that_class_only():
    """A rare arrival class may send nothing in a short pass: its metrics are NaN there."""
    base = side([1.0] * 6, 0)
    holes = [dict(m) for m in base.metrics]
    holes[2]["c.ttft_p50_ms"] = math.nan
    base = compare.Passes(tuple(holes), base.indices, base.durations)
    cur = side([1.5] * 6, 100)
    found = verdicts([base], cur, keys=("c.ttft_p50_ms", "itl_p50_ms"))
    assert found["c.ttft_p50_ms"].basis.startswith("5 vs 6 passes")
    assert found["c.ttft_p50_ms"].verdict is Verdict.REGRESSED
    assert found["itl_p50_ms"].basis.startswith("6 vs 6 passes")


def test_a_metric_left_out_of_all_but_one_pass_is_inconclusive_not_bootstrapped():
    """Passes that streamed in bursts lose their ITL and TPOT; time blocks of the raw
    passes would bring those bursts back, so one measured pass gives no verdict."""
    base = side([1.0] * 6, 0)
    cur = side([3.0] * 6, 100)
    holes = [dict(m) for m in cur.metrics]
    for m in holes[1:]:
        m["tpot_mean_ms"] = math.nan
    cur = compare.Passes(tuple(holes), cur.indices, cur.durations, cur.records)
    found = verdicts([base], cur, keys=("tpot_mean_ms", "itl_p50_ms"))
    assert found["tpot_mean_ms"].verdict is Verdict.INCONCLUSIVE
    assert found["tpot_mean_ms"].basis == "6 vs 1 passes measured it"
    assert found["itl_p50_ms"].verdict is Verdict.REGRESSED
