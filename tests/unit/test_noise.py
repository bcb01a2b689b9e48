"""The noise model behind the published operating characteristic, and the false-alarm
rate the implemented verdict keeps under it (seeded, so the figures are exact)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.bench_module import bench_module

noise = bench_module("noise")  # bench/noise.py: the simulation lives beside its caller

# scales like the committed H200 decode passes' (bench/results/operating_characteristic.md):
# a few percent between machines, under 1% pass to pass
H200_LIKE = {
    "itl_p50_ms": noise.Scales(boot=0.006, schedule=0.001, residual=0.003, level=5.5),
    "tpot_mean_ms": noise.Scales(boot=0.03, schedule=0.002, residual=0.01, level=5.7),
    "output_throughput": noise.Scales(boot=0.06, schedule=0.005, residual=0.02, level=5000.0),
}
TOLERANCES = {"itl_p50_ms": 0.05, "tpot_mean_ms": 0.10, "output_throughput": 0.15}
STORED = {"itl_p50_ms": 0.05, "tpot_mean_ms": 0.15, "output_throughput": 0.25}
# pass-to-pass noise as large as the tolerances, as on the CPU engine: here the rule,
# not the quiet of the machine, is what keeps an A/A from failing
NOISY = {key: noise.Scales(boot=0.03, schedule=0.02, residual=0.06) for key in TOLERANCES}


def test_fit_recovers_the_scales_it_is_given():
    rng = np.random.default_rng(3)
    truth = noise.Scales(boot=0.05, schedule=0.03, residual=0.01)
    sched = rng.normal(0, truth.schedule, 12)
    boots = [
        dict(enumerate(np.exp(rng.normal(0, truth.boot) + sched + rng.normal(0, 0.01, 12))))
        for _ in range(200)
    ]
    found = noise.fit(boots)
    assert found.boot == pytest.approx(truth.boot, rel=0.25)
    # the schedule's effects are 12 draws, fixed for every boot: their own spread
    assert found.schedule == pytest.approx(float(np.std(sched, ddof=1)), rel=0.1)
    assert found.residual == pytest.approx(truth.residual, rel=0.15)


def test_fit_uses_the_passes_every_boot_measured():
    boots = [{0: 1.0, 1: 1.1, 2: float("nan")}, {0: 1.0, 1: 1.1, 2: 1.2}, {0: 1.01, 1: 1.12}]
    common = [{0: 1.0, 1: 1.1}, {0: 1.0, 1: 1.1}, {0: 1.01, 1: 1.12}]
    assert noise.fit(boots) == noise.fit(common)  # pass 2 left out of every boot
    # the one interaction there is: boot 3's pass 1 rose x1.109 where the others' rose
    # x1.1. One cell off by d in a 3 x 2 table leaves residuals d/3 (twice) and d/6
    # (four times): a mean square of (d**2 / 3) / 2, so the residual scale is d / sqrt(6)
    d = math.log(1.12 / 1.01) - math.log(1.1)
    assert noise.fit(common).residual == pytest.approx(abs(d) / math.sqrt(6), rel=1e-9)
    with pytest.raises(ValueError, match="two boots with two common passes"):
        noise.fit([{0: 1.0}])


@pytest.mark.parametrize("mode", ["stored", "ab"])
def test_the_verdict_keeps_its_false_alarm_rate_under_the_model(mode):
    """No change: any gated metric regressed in at most 5% of comparisons (Holm's
    family-wise level), and most gated metrics come out unchanged. Seen failing: with
    the significance test dropped from classify, the noisy case raised 26 and 9 of 150."""
    trials = 150
    boots = 4
    # stored, the cuda platform's own tolerances (core.tolerances.PLATFORM_TOLERANCES), above
    # a new boot's drift: ITL p50's 5% is not, and is mostly inconclusive
    tolerances = STORED if mode == "stored" else TOLERANCES
    oc = noise.operating_characteristic(
        H200_LIKE, tolerances, (1.0,), mode, baseline_boots=boots, trials=trials
    )
    assert oc["any regressed"][1.0]["True"] / trials <= 0.05
    unchanged = "tpot_mean_ms" if mode == "stored" else "itl_p50_ms"
    assert oc[unchanged][1.0]["unchanged"] / trials >= 0.8
    noisy = noise.operating_characteristic(NOISY, TOLERANCES, (1.0,), mode, trials=trials)
    assert noisy["any regressed"][1.0]["True"] / trials <= 0.05


def test_a_change_well_beyond_the_tolerance_is_caught_in_ab_mode():
    trials = 60
    oc = noise.operating_characteristic(H200_LIKE, TOLERANCES, (1.1, 1.3), "ab", trials=trials)
    assert oc["itl_p50_ms"][1.1]["regressed"] / trials >= 0.9  # tolerance 5%
    assert oc["output_throughput"][1.3]["regressed"] / trials >= 0.9  # tolerance 15%
    # and an improvement is never a regression
    better = noise.operating_characteristic(H200_LIKE, TOLERANCES, (0.9,), "ab", trials=trials)
    assert better["itl_p50_ms"][0.9].get("regressed", 0) == 0
