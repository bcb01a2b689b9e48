"""Coverage of the capacity interval (``verdict/capacity.py``) in a seeded simulation.

Passes at rates around the capacity (x0.8, x1, x1.25 by default, ``per_rate`` passes
each) get SLO margins from the model the interval assumes, ``log m = b log(r / r*) + e``,
and from two departures from it: heavier-tailed noise (Student's t with 3 degrees of
freedom, scaled to the same spread) and a margin that bends (a quadratic term in
log r). For each case: the share of 95% intervals that hold the true capacity
(unbounded ones count as holding it, and their share is shown), and the median width.
The target is within 3 points of the nominal 95%.

    python bench/capacity_coverage.py            # writes bench/results/capacity_coverage.md
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.verdict import capacity, capacity_search

OUT = Path(__file__).resolve().parent / "results" / "capacity_coverage.md"
TRUE_RPS = 10.0
SLOPE = 3.0  # p99 latency against rate near saturation: steep, as a queue's is


def simulate(
    rng: np.random.Generator, sigma: float, per_rate: int, noise: str, bend: float, reps: int
) -> dict[str, float]:
    rates = np.repeat(TRUE_RPS * np.array([0.8, 1.0, 1.25]), per_rate)
    x = np.log(rates / TRUE_RPS)
    held = unbounded = 0
    widths = []
    for _ in range(reps):
        if noise == "normal":
            e = rng.normal(0.0, sigma, len(x))
        else:  # t with 3 df, scaled to standard deviation sigma
            e = rng.standard_t(3, len(x)) * sigma / math.sqrt(3)
        margins = np.exp(SLOPE * x + bend * x * x + e)
        found = capacity.fit(rates.tolist(), margins.tolist())
        if not found.bounded:
            unbounded += 1
            held += 1
            continue
        held += found.low <= TRUE_RPS <= found.high
        widths.append(found.high / found.low)
    return {
        "coverage": held / reps,
        "unbounded": unbounded / reps,
        "width": float(np.median(widths)) if widths else math.inf,
    }


def simulate_search(
    rng: np.random.Generator, sigma: float, bend: float, reps: int, tolerance: float = 0.15
) -> dict[str, float]:
    """The whole search (``capacity_search.search``), which picks its rates from the data,
    from a start 2.5 times below the capacity, at most 30 passes."""
    held = runs = 0
    passes, widths = [], []
    for _ in range(reps):

        def trial(rate: float) -> float:
            x = math.log(rate / TRUE_RPS)
            return math.exp(SLOPE * x + bend * x * x + rng.normal(0.0, sigma))

        found = capacity_search.search(trial, TRUE_RPS / 2.5, tolerance, 30)
        if found.capacity is None:
            continue
        runs += 1
        held += found.capacity.low <= TRUE_RPS <= found.capacity.high
        passes.append(found.passes)
        if found.capacity.bounded:
            widths.append(found.capacity.high / found.capacity.low)
    return {
        "coverage": held / runs,
        "found": runs / reps,
        "passes": float(np.median(passes)),
        "width": float(np.median(widths)),
    }


def simulate_ratio(
    rng: np.random.Generator, sigma: float, ratio: float, reps: int, design: str
) -> dict[str, float]:
    """The ratio of two capacities (``capacity.judge``): a base at TRUE_RPS and a
    current side at ``ratio`` times it, each from its own fit, fixed design (9 passes at
    x0.8/x1/x1.25 of its capacity) or the whole search (tolerance 10%, at most 24
    passes). Coverage among the pairs where both fits are bounded."""
    held = runs = regressed = 0
    widths = []
    for _ in range(reps):
        sides = []
        for true in (TRUE_RPS, TRUE_RPS * ratio):
            if design == "search":

                def trial(rate: float, true: float = true) -> float:
                    return math.exp(SLOPE * math.log(rate / true) + rng.normal(0.0, sigma))

                sides.append(capacity_search.search(trial, TRUE_RPS / 2.5, 0.1, 24))
            else:
                rates = np.repeat(true * np.array([0.8, 1.0, 1.25]), 3)
                margins = np.exp(SLOPE * np.log(rates / true) + rng.normal(0, sigma, 9))
                found = (
                    None if design == "joint" else capacity.fit(rates.tolist(), margins.tolist())
                )
                sides.append(
                    capacity.Search(found, tuple(rates.tolist()), tuple(margins.tolist()), True)
                )
        verdict = capacity.judge(sides[0], sides[1], 0.1)
        if math.isnan(verdict.low):
            continue
        runs += 1
        held += verdict.low <= ratio <= verdict.high
        regressed += verdict.verdict == "regressed"
        widths.append(verdict.high / verdict.low)
    return {
        "coverage": held / runs,
        "resolved": runs / reps,
        "regressed": regressed / runs,
        "width": float(np.median(widths)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = [
        "| noise | sd of log margin | passes | coverage | unbounded | median width (high/low) |",
        "|---|---|---|---|---|---|",
    ]
    cases = [("normal", sigma, per, 0.0) for sigma in (0.05, 0.15, 0.30) for per in (2, 3, 4)] + [
        ("t3", 0.15, 3, 0.0),
        ("t3", 0.30, 3, 0.0),
        ("normal, bent", 0.15, 3, 2.0),
    ]
    for noise, sigma, per, bend in cases:
        kind = "t3" if noise == "t3" else "normal"
        found = simulate(rng, sigma, per, kind, bend, args.reps)
        rows.append(
            f"| {noise} | {sigma} | {3 * per} | {found['coverage']:.3f} | "
            f"{found['unbounded']:.3f} | x{found['width']:.3f} |"
        )
    rows += [
        "",
        "The whole search (bracket, bisect, rounds at x0.9/x1/x1.1 of the estimate, fit "
        "within x1.3; tolerance 15%, at most 30 passes):",
        "",
        "| noise | sd of log margin | coverage | searches with a fit | median passes | "
        "median width |",
        "|---|---|---|---|---|---|",
    ]
    for noise, sigma, bend in (
        ("normal", 0.05, 0.0),
        ("normal", 0.15, 0.0),
        ("normal, bent", 0.15, 2.0),
    ):
        found = simulate_search(rng, sigma, bend, args.reps // 2)
        rows.append(
            f"| {noise} | {sigma} | {found['coverage']:.3f} | {found['found']:.3f} | "
            f"{found['passes']:.0f} | x{found['width']:.3f} |"
        )
    rows += [
        "",
        "The ratio of two capacities (`capacity.judge`: delta-method standard errors of "
        "log capacity in quadrature, Student's t on Welch's degrees of freedom), current "
        "at x1.0 or x0.8 of the base; among the pairs with a bounded interval ('joint': "
        "the common-slope fit used when a side's own fit is unbounded). "
        "'regressed' is the verdict's rate at a 10% tolerance:",
        "",
        "| design | sd of log margin | true ratio | coverage | bounded | regressed | "
        "median width |",
        "|---|---|---|---|---|---|---|",
    ]
    for design, sigma, ratio in (
        ("fixed, 9 passes", 0.05, 1.0),
        ("fixed, 9 passes", 0.15, 1.0),
        ("fixed, 9 passes", 0.15, 0.8),
        ("fixed, 9 passes", 0.30, 1.0),
        ("search", 0.05, 1.0),
        ("search", 0.15, 1.0),
        ("search", 0.15, 0.8),
        ("joint", 0.15, 1.0),
        ("joint", 0.3, 1.0),
        ("joint", 0.3, 0.8),
    ):
        found = simulate_ratio(rng, sigma, ratio, args.reps // 2, design.split(",")[0])
        rows.append(
            f"| {design} | {sigma} | x{ratio} | {found['coverage']:.3f} | "
            f"{found['resolved']:.3f} | {found['regressed']:.3f} | x{found['width']:.3f} |"
        )
    text = "\n".join(
        [
            "# Capacity interval coverage (seeded simulation)",
            "",
            f"`python bench/capacity_coverage.py --reps {args.reps} --seed {args.seed}`: true "
            f"capacity {TRUE_RPS} req/s, log-margin slope {SLOPE}, passes at x0.8, x1 and "
            "x1.25 of it; nominal 95%.",
            "",
            *rows,
            "",
        ]
    )
    atomic.write_text(OUT, text)
    print(text)


if __name__ == "__main__":
    main()
