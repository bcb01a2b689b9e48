"""A regression fails however it shows, and an A/A passes whatever real servers add to it:
the named scenarios of bench/scenarios.py, each run through the real verdict a few
hundred times (seeded, so the counts are exact), and the rules they rest on.

On the verdict these replaced, every power scenario passed every trial (the statistics
audit of the A/B loop: 500 of 500 intermittent and stalled-base runs passed) and the
false-alarm ones failed 2-16% of A/As; bench/operating_characteristic.py runs each 1000
times or more (its ``scenarios``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_vllm_perf.core.records import Verdict
from pytest_vllm_perf.verdict import decide, robust, sequential
from pytest_vllm_perf.verdict.drift import NONE
from tests.bench_module import bench_module

scenarios = bench_module("scenarios")


def rate(name: str, trials: int) -> float:
    [found] = scenarios.run(trials, only=[name])
    return float(found["rate"])


@pytest.mark.parametrize("name", ["intermittent-1in4", "stalled-base", "noisy-candidate-x1.3"])
def test_a_regression_in_some_passes_or_hidden_by_one_fails(name):
    assert rate(name, 100) >= 0.9


@pytest.mark.parametrize("name", ["stored-2boot-x1.3-decode", "stored-2boot-x1.3-interference"])
def test_the_committed_two_boot_baselines_fail_a_30_percent_regression(name):
    assert rate(name, 100) >= 0.9


@pytest.mark.parametrize(
    "name",
    ["cbbc-aa-2pct-decode", "cbbc-aa-2pct-interference", "sporadic-failures-aa",
     "stored-2boot-aa-interference"],
)  # fmt: skip
def test_an_a_a_with_boot_drift_or_sporadic_failures_passes(name):
    assert rate(name, 200) <= 0.01


@pytest.mark.parametrize("name", ["offset-1pct-decode", "offset-1pct-interference"])
def test_an_a_a_of_two_offset_servers_fails_at_most_at_the_tests_level(name):
    # 1% a test: 3 or fewer of 300 (P(>= 4) < 0.36 at exactly 1%); 0-0.8% in 1000 trials
    assert rate(name, 300) <= 3 / 300


def test_a_change_of_the_tolerance_on_the_noisiest_gated_metric_is_caught():
    assert rate("x1.05-interference-long.ttft_p50_ms", 200) >= 0.85


LAST = sequential.Design(first=16, most=16).looks()[0]


def spikes(rng: np.random.Generator, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """16 pairs of a metric at 1% pass noise, every 4th candidate pass ``factor`` worse."""
    base = rng.normal(0, 0.01, 16)
    cur = rng.normal(0, 0.01, 16) + np.where(np.arange(16) % 4 == 3, math.log(factor), 0.0)
    return base, cur


def test_the_budgets_end_tests_only_a_mean_beyond_the_tolerance_at_the_last_look():
    rng = np.random.default_rng(1)
    base, cur = spikes(rng, 1.5)
    p, found = decide.end_p(base, cur, 0.05, LAST, True, NONE)
    assert p < 1e-4 and "beyond the 5% tolerance" in found and "vary more" in found
    # not at an earlier look, not unpaired, nor for a mean inside the tolerance
    first = sequential.Design().looks()[0]
    assert decide.end_p(base, cur, 0.05, first, True, NONE) == (1.0, "")
    assert decide.end_p(base, cur, 0.05, LAST, False, NONE) == (1.0, "")
    assert decide.end_p(base, cur, 0.15, LAST, True, NONE) == (1.0, "")


def test_the_dispersion_test_needs_more_than_one_deviant_pass():
    """Pitman-Morgan's test on every pair left out in turn: one slow candidate pass among
    16 (a stall an A/A shows now and then) is not significant; four are."""
    rng = np.random.default_rng(2)
    base = rng.normal(0, 0.01, 16)
    one = rng.normal(0, 0.01, 16)
    one[5] += math.log(1.5)
    assert robust.dispersion_p(base, one) > 0.01
    _, four = spikes(rng, 1.5)
    assert robust.dispersion_p(base, four) < 1e-4
    # the same spread on both sides: no more dispersed
    assert robust.dispersion_p(base, rng.normal(0, 0.01, 16)) > 0.001


def test_a_candidate_whose_passes_all_read_the_same_varies_no_more():
    """Every candidate pass the same value (in a real engine's A/B run, the KV cache's peak
    usage under a fixed load): the differences and sums correlate at exactly -1, which is
    the least dispersed a candidate can be, not a division by zero."""
    base = np.log([0.95, 0.96, 1.39, 1.26, 1.05, 1.1])
    assert robust.dispersion_p(base, np.full(6, math.log(6.8))) == 1.0
    # and the mirror: the base constant, the candidate spread, is the most dispersed
    assert robust.dispersion_p(np.full(6, 0.0), base) < 0.01


def test_the_trimmed_mean_leaves_a_stalled_pass_out():
    """Candidate 1.3x on every pass, one base pass stalled 3x: the mean's spread hides it,
    the trimmed mean does not."""
    rng = np.random.default_rng(3)
    base = rng.normal(0, 0.01, 16)
    base[2] += math.log(3.0)
    diffs = rng.normal(math.log(1.3), 0.01, 16) - base
    margin = math.log1p(0.0125)
    trimmed = robust.trimmed_shift(diffs)
    assert trimmed is not None and trimmed.p_above(margin) < 1e-6
    assert math.exp(trimmed.mean) == pytest.approx(1.3, rel=0.02)
    assert robust.trimmed_shift(diffs[:2]) is None  # too few to keep three


def test_a_new_boot_drifting_as_boots_do_is_not_a_regression_against_the_stored_boots():
    """The committed H200 decode baseline (2 boots) against a copy of its newest boot 4%
    slower on every gated metric, about what a boot drifts: with the gate's allowance
    (the hardware class's boot drift, ``gate.stored_drift``) nothing regresses; with the
    passes alone (seen failing with the allowance dropped), ITL p50 at 5% does."""
    from pytest_vllm_perf.core.registry import default_tolerances
    from pytest_vllm_perf.store import baselines
    from pytest_vllm_perf.verdict import compare, gate

    stored = baselines.load(scenarios.ROOT / scenarios.STORED_FILES["decode"])
    keys = ("itl_p50_ms", "tpot_mean_ms", "output_throughput")
    newest = stored.boots[-1]
    rows = tuple(
        {k: (v / 1.04 if k == "output_throughput" else v * 1.04) if k in keys else v
         for k, v in m.items()}
        for m in newest.metrics
    )  # fmt: skip
    cur = compare.Passes(rows, newest.indices, newest.durations)
    tol = default_tolerances("cuda")
    allowance = gate.stored_drift(stored, [], keys, scenarios._provenance())
    found = compare.compare(stored.boots, cur, keys, tol, gated=keys, pair=True, drift=allowance)
    assert not [v for v in found if v.verdict is Verdict.REGRESSED], found
    alone = compare.compare(stored.boots, cur, keys, tol, gated=keys, pair=True)
    assert {v.metric for v in alone if v.verdict is Verdict.REGRESSED} >= {"itl_p50_ms"}
