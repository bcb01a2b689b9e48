"""The A/B decision (verdict.sequential): its distributions, its looks, and its verdicts on
the H200's own passes.

tests/unit/data/h200_plant_passes.json holds every pass's compared metrics of the three
prgate runs in bench/results/h200/plant (bench/gpu/gpu_plant.sh): a 34-layer candidate against
the 32-layer preset (x1.0625 the layers), the preset against itself, and 33 layers (x1.031).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pytest_vllm_perf.core.records import Verdict
from pytest_vllm_perf.verdict import compare, drift, intervals, sequential
from tests.bench_module import bench_module

noise = bench_module("noise")  # bench/noise.py

PLANT = json.loads((Path(__file__).parent / "data" / "h200_plant_passes.json").read_text())
# the tolerances the plant runs printed (the cuda platform's, core.tolerances.PLATFORM_TOLERANCES)
TOLERANCES = {
    "itl_p50_ms": 0.05,
    "tpot_mean_ms": 0.05,
    "output_throughput": 0.05,
    "ttft_p50_ms": 0.15,
    "ttft_p99_ms": 0.30,
    "itl_p99_ms": 0.15,
    "e2el_p99_ms": 0.25,
    "preemptions_per_s": 0.5,
}


def sides(step: str, swap: bool = False) -> tuple[compare.Passes, compare.Passes]:
    data = PLANT["steps"][step]

    def side(name: str) -> compare.Passes:
        metrics = tuple(data[name])
        return compare.Passes(metrics, tuple(data[f"{name}_indices"]), (8.0,) * len(metrics))

    base, cur = side("base"), side("candidate")
    return (cur, base) if swap else (base, cur)


def judged(step: str, look: sequential.Look | None, swap: bool = False) -> dict[str, Verdict]:
    base, cur = sides(step, swap)
    gated = PLANT["steps"][step]["gated"]
    found = compare.compare(
        [base], cur, tuple(TOLERANCES), TOLERANCES, gated=gated, pair=True, look=look,
        drift=drift.offset("cuda"),
    )  # fmt: skip
    return {v.metric: v.verdict for v in found if v.gated}


FIRST = sequential.Design().looks()[0]


def test_student_t_matches_the_printed_tables():
    # two-sided 95% and 99% critical values, and a tail, from any t table
    assert intervals.t_quantile(0.975, 7) == pytest.approx(2.3646, abs=1e-4)
    assert intervals.t_quantile(0.995, 7) == pytest.approx(3.4995, abs=1e-4)
    assert intervals.t_quantile(0.95, 1) == pytest.approx(6.3138, abs=1e-4)
    assert intervals.t_quantile(0.975, 1000) == pytest.approx(1.9623, abs=1e-3)
    assert intervals.t_sf(2.0, 10) == pytest.approx(0.03669, abs=1e-5)
    assert intervals.t_sf(0.0, 5) == pytest.approx(0.5)
    assert intervals.t_sf(-2.0, 10) == pytest.approx(1 - 0.03669, abs=1e-5)


def test_student_t_quantiles_invert_the_tail_in_few_evaluations(monkeypatch):
    """Each quantile is the inverse of ``t_sf`` to 1e-9 (``t_sf``'s own precision at 1e5
    degrees of freedom), at the levels the gate asks for
    (one-sided A/B levels down to 1e-5, drift quantiles with 1 degree of freedom) in at
    most 40 evaluations of the tail. Broken on purpose (the fixed 200 bisections it
    replaced, which took 88% of the noise simulation's time), the count fails."""
    calls = []
    real = intervals.t_sf

    def counted(t: float, df: float) -> float:
        calls.append(t)
        return real(t, df)

    monkeypatch.setattr(intervals, "t_sf", counted)
    for q in (0.55, 0.6, 0.9, 0.975, 0.995, 0.99999, 1 - 1e-9, 0.025):
        for df in (1, 2, 3, 7, 11, 15, 30.5, 200, 1e5):
            calls.clear()
            x = intervals.t_quantile(q, df)
            assert len(calls) <= 40, (q, df, len(calls))
            assert real(x, df) == pytest.approx(1 - q, rel=1e-9, abs=1e-15), (q, df)


def test_looks_spend_alpha_by_the_cube_of_the_pairs_and_no_more():
    design = sequential.Design()
    looks = design.looks()
    assert [look.pairs for look in looks] == [8, 12, 16, 20]
    # spent by each look: 1% x (pairs / 20) ** 3, less what earlier looks spent
    assert [look.level for look in looks] == pytest.approx([0.00064, 0.00152, 0.00296, 0.00488])
    assert sum(look.level for look in looks) == pytest.approx(design.alpha)
    assert [look.last for look in looks] == [False, False, False, True]
    # a budget of the first look alone spends all of alpha there
    [only] = sequential.Design(first=8, most=8).looks()
    assert only.level == pytest.approx(0.01) and only.last


def test_pairs_for_grows_as_the_margin_to_the_tolerance_shrinks():
    at_5 = sequential.pairs_for(0.014, 0.05, 0.004)
    at_3 = sequential.pairs_for(0.014, 0.03, 0.004)
    assert at_5 <= 8 < at_3 <= 16, (at_5, at_3)


def test_h200_34_layers_fails_at_the_first_look():
    verdicts = judged("l34", FIRST)
    assert verdicts["itl_p50_ms"] is Verdict.REGRESSED, verdicts


def test_h200_a_a_is_unchanged_on_every_gated_metric():
    verdicts = judged("aa", FIRST)
    assert set(verdicts.values()) == {Verdict.UNCHANGED}, verdicts
    # either side may be called the base: still no regression
    assert Verdict.REGRESSED not in judged("aa", FIRST, swap=True).values()


def test_h200_33_layers_passes_as_within_the_5_percent_tolerance():
    verdicts = judged("l33", FIRST)
    assert Verdict.REGRESSED not in verdicts.values(), verdicts
    assert verdicts["tpot_mean_ms"] is Verdict.UNCHANGED


def test_an_improvement_is_never_regressed():
    # 32 layers judged as the candidate against 34: every gated metric faster
    verdicts = judged("l34", FIRST, swap=True)
    assert Verdict.REGRESSED not in verdicts.values(), verdicts
    assert verdicts["itl_p50_ms"] is Verdict.IMPROVED


def test_a_steady_offset_inside_the_margin_is_not_a_regression_however_many_pairs():
    # resident servers of one H200 read ITL p50 x0.995-x0.996 in an A/A: a steady offset of
    # half that margin, with next to no noise, is still not regressed
    rng = np.random.default_rng(3)
    n = 16
    base = [{"itl_p50_ms": 5.0 * math.exp(rng.normal(0, 0.003))} for _ in range(n)]
    cur = [{"itl_p50_ms": 5.0 * 1.006 * math.exp(rng.normal(0, 0.003))} for _ in range(n)]
    look = sequential.Design(first=n, most=n).looks()[0]
    found = compare.compare(
        [compare.Passes(tuple(base), tuple(range(n)), (8.0,) * n)],
        compare.Passes(tuple(cur), tuple(range(n)), (8.0,) * n),
        ["itl_p50_ms"], {"itl_p50_ms": 0.05}, gated=["itl_p50_ms"], pair=True, look=look,
    )  # fmt: skip
    [itl] = found
    assert itl.ratio == pytest.approx(1.006, abs=0.003)
    assert itl.verdict is Verdict.UNCHANGED


# The resident H200 A/A's pair sds of the log ratio (bench/results/h200/ab-modes-aa/resident/
# ab.json, 8 pairs): ITL p50 0.0139, TPOT 0.0173, throughput 0.0200. A pair's difference of
# two passes has twice a pass's residual variance.
RESIDENT = {
    "itl_p50_ms": noise.Scales(0.0, 0.0, 0.0139 / math.sqrt(2), 5.2),
    "tpot_mean_ms": noise.Scales(0.0, 0.0, 0.0173 / math.sqrt(2), 5.5),
    "output_throughput": noise.Scales(0.0, 0.0, 0.0200 / math.sqrt(2), 5500.0),
}


def operating(ratio: float, trials: int, seed: int) -> Counter[str]:
    """How often the whole test (any gated metric) came out regressed with ITL p50 made
    ``ratio`` times worse, and the pairs each decision took."""
    rng = np.random.default_rng(seed)
    design = sequential.Design()
    out: Counter[str] = Counter()
    keys = tuple(RESIDENT)
    for _ in range(trials):
        [base], cur = noise.simulate(RESIDENT, "ab", design.most, 1, {"itl_p50_ms": ratio}, rng)
        found, pairs = noise.sequential_ab(base, cur, keys, TOLERANCES, design)
        out["regressed" if any(v.verdict is Verdict.REGRESSED for v in found) else "not"] += 1
        out[f"{pairs} pairs"] += 1
    return out


def test_at_the_resident_h200_noise_5_percent_is_caught_and_an_a_a_is_not():
    caught = operating(1.05, 150, seed=1)
    assert caught["regressed"] >= 0.9 * 150, caught
    clean = operating(1.0, 300, seed=2)
    # alpha is 1% per test: 3 or fewer of 300 (P(>= 4) < 0.36 even at exactly 1%)
    assert clean["regressed"] <= 3, clean
