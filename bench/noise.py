"""A noise model of per-pass metrics, and the gate's operating characteristic under it.

What the gate is worth is how often it calls each verdict for a given true change.
That depends on three scales of a metric's noise, on the log scale, which
:func:`fit` estimates from recorded boots (a two-way analysis of boot by pass index):

- ``boot``: a boot's own level (its server, its machine), shared by all its passes;
- ``schedule``: pass k replays seeded schedule k in every run, so what the schedule
  decides (which pass gets the long prompts) is shared by pass k of every boot;
- ``residual``: what is left, pass to pass.

:func:`simulate` draws passes from that model, with a true change on the current
side, and :func:`operating_characteristic` runs the real verdict
(``compare.compare``, Holm over the gated metrics, paired) on them. Two modes:

- ``stored``: a stored baseline of ``baseline_boots`` boots against a new boot; every
  boot has its own level.
- ``ab``: both sides on one machine, passes alternated. The H200 A/A runs found no
  boot level between two servers of one machine (ITL p50, TPOT and throughput
  within 1%: drift comes with the machine, not the boot), so the sides share it.
  Decided as ``measure.run_ab`` decides, in looks (``sequential_ab``).

The model assumes normal log-scale effects, independent between metrics: it is
checked against the real A/A and injected comparisons in bench/gate_power.py.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from pytest_vllm_perf.core.records import MetricVerdict, Verdict
from pytest_vllm_perf.core.registry import METRICS, split_key
from pytest_vllm_perf.verdict import compare, drift, sequential

__all__ = ["Mode", "Scales", "fit", "operating_characteristic", "sequential_ab", "simulate"]

Mode = Literal["stored", "ab"]
MODES: Final = ("stored", "ab")


@dataclass(frozen=True)
class Scales:
    """A metric's noise: log-scale standard deviations and its typical level."""

    boot: float
    schedule: float
    residual: float
    level: float = 1.0  # a typical value, so that simulated figures look like real ones


def fit(boots: Sequence[Mapping[int, float]]) -> Scales:
    """The scales from recorded boots, each ``{pass index: value}``.

    Only finite, positive values and the pass indices every boot measured are used
    (a pass left out for bursts is missing in its boot). Mean squares of a two-way
    layout without replication: residual from the interaction, boot and schedule
    from their mean squares less the residual's share (never below zero).
    """
    usable = [{k: math.log(v) for k, v in b.items() if math.isfinite(v) and v > 0} for b in boots]
    common = sorted(set.intersection(*(set(b) for b in usable))) if usable else []
    if len(usable) < 2 or len(common) < 2:
        raise ValueError("fit needs two boots with two common passes")
    x = np.array([[b[k] for k in common] for b in usable])
    n_boots, n_passes = x.shape
    grand = float(x.mean())
    boot_means, pass_means = x.mean(axis=1), x.mean(axis=0)
    resid = x - boot_means[:, None] - pass_means[None, :] + grand
    ms_resid = float((resid**2).sum()) / ((n_boots - 1) * (n_passes - 1))
    ms_boot = n_passes * float(((boot_means - grand) ** 2).sum()) / (n_boots - 1)
    ms_pass = n_boots * float(((pass_means - grand) ** 2).sum()) / (n_passes - 1)
    return Scales(
        boot=math.sqrt(max(0.0, (ms_boot - ms_resid) / n_passes)),
        schedule=math.sqrt(max(0.0, (ms_pass - ms_resid) / n_boots)),
        residual=math.sqrt(ms_resid),
        level=math.exp(grand),
    )


def _worse(key: str, ratio: float) -> float:
    """The factor on a metric's value that makes it ``ratio`` times worse."""
    return 1 / ratio if METRICS[split_key(key)[1]].higher_is_better else ratio


def simulate(
    scales: Mapping[str, Scales],
    mode: Mode,
    passes: int,
    baseline_boots: int,
    change: Mapping[str, float],
    rng: np.random.Generator,
) -> tuple[list[compare.Passes], compare.Passes]:
    """Baseline boots and a current run drawn from the model; ``change`` makes a metric
    that many times worse on the current side (latency x r, throughput / r)."""
    schedule = {key: rng.normal(0.0, s.schedule, passes) for key, s in scales.items()}

    def boot(level_sd: float, factor: Mapping[str, float]) -> compare.Passes:
        values = {}
        for key, s in scales.items():
            shift = math.log(s.level) + rng.normal(0.0, s.boot * level_sd)
            noise = rng.normal(0.0, s.residual, passes)
            values[key] = np.exp(shift + schedule[key] + noise) * factor.get(key, 1.0)
        metrics = tuple({k: float(v[i]) for k, v in values.items()} for i in range(passes))
        return compare.Passes(metrics, tuple(range(passes)), (10.0,) * passes)

    factors = {k: _worse(k, r) for k, r in change.items()}
    if mode == "ab":  # one machine: the sides share its level
        return [boot(0.0, {})], boot(0.0, factors)
    return [boot(1.0, {}) for _ in range(baseline_boots)], boot(1.0, factors)


def _first(side: compare.Passes, n: int) -> compare.Passes:
    return compare.Passes(side.metrics[:n], side.indices[:n], side.durations[:n])


def sequential_ab(
    base: compare.Passes,
    cur: compare.Passes,
    keys: Sequence[str],
    tolerances: Mapping[str, float],
    design: sequential.Design,
    platform: str = "cuda",
) -> tuple[list[MetricVerdict], int]:
    """The A/B decision run as ``measure.run_ab`` runs it, on passes drawn ahead (at
    least ``design.most`` a side): judged at each look on the first pairs, stopped
    when no gated metric is undecided or one regressed. Returns the last look's
    verdicts and the pairs it used."""
    found: list[MetricVerdict] = []
    for look in design.looks():
        found = compare.compare(
            [_first(base, look.pairs)], _first(cur, look.pairs), keys, tolerances,
            gated=keys, pair=True, look=look, drift=drift.offset(platform),
        )  # fmt: skip
        by = [v.verdict for v in found if v.gated]
        if Verdict.REGRESSED in by or Verdict.INCONCLUSIVE not in by:
            return found, look.pairs
    return found, design.looks()[-1].pairs


def operating_characteristic(
    scales: Mapping[str, Scales],
    tolerances: Mapping[str, float],
    ratios: Sequence[float],
    mode: Mode,
    passes: int = 8,
    baseline_boots: int = 2,
    trials: int = 200,
    seed: int = 0,
    most: int = sequential.DEFAULT_MOST,
    platform: str = "cuda",
) -> dict[str, dict[float, Counter[str]]]:
    """For each metric of ``scales`` (all gated, Holm over them) and each true ratio
    (that metric alone made that many times worse), how often each verdict came out;
    ``"any regressed"`` counts trials in which any gated metric was regressed, and
    ``"pairs"`` (``ab`` only) how many pairs each decision used, by true ratio of the
    first metric's rows. ``ab`` runs the sequential A/B decision from ``passes`` pairs
    up to ``most``, allowing for ``platform``'s server offset; ``stored`` the fixed
    comparison of ``passes`` passes, allowing for the boot drift as ``gate`` does."""
    rng = np.random.default_rng(seed)
    keys = tuple(scales)
    design = sequential.Design(first=passes, most=max(passes, most))
    out: dict[str, dict[float, Counter[str]]] = {k: {} for k in (*keys, "any regressed")}
    for key in keys:
        for ratio in ratios:
            counts: Counter[str] = Counter()
            alarms: Counter[str] = Counter()
            used: Counter[str] = Counter()
            for _ in range(trials):
                if mode == "ab":
                    base_side, cur = simulate(scales, mode, design.most, 1, {key: ratio}, rng)
                    found, pairs = sequential_ab(
                        base_side[0], cur, keys, tolerances, design, platform
                    )
                    used[str(pairs)] += 1
                else:
                    base, cur = simulate(scales, mode, passes, baseline_boots, {key: ratio}, rng)
                    groups = [[np.log(b.values(k)) for b in base] for k in keys]
                    allowance = drift.stored(drift.boot_drift(groups, platform), len(base))
                    found = compare.compare(base, cur, keys, tolerances, gated=keys, pair=True,
                                            drift=allowance)  # fmt: skip
                by = {v.metric: v.verdict for v in found}
                counts[str(by[key])] += 1
                alarms[str(Verdict.REGRESSED in by.values())] += 1
            out[key][ratio] = counts
            if used:
                out.setdefault(f"{key} pairs", {})[ratio] = used
            if ratio == 1.0:
                out["any regressed"][ratio] = alarms
    return out
