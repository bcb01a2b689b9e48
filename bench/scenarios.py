"""Named scenarios of the gate's error rates: regressions that must fail and A/As that
must pass, each run through the real verdict (``compare.compare`` with the allowance
``gate`` gives it, the A/B looks as ``measure.run_ab`` takes them) on passes drawn
from a stated noise model, ``trials`` times.

The noise is the H200's: the pair log-ratio sds of the resident A/A runs
(``PAIR_SD``), normal, independent between metrics, the two sides' passes
alternated. A scenario adds what it names on top: a regression in some passes only,
a stalled base pass, a noisier candidate, a steady offset of the two servers, boots
in turn (CBBC), sporadic failed requests, a stored baseline of two boots.

Each result is ``{"name", "kind": "power"|"false_alarm", "rate", "trials", ...}``:
``power`` is P(the test fails), ``false_alarm`` P(an A/A test fails), or per run of a
suite of tests. Run by bench/operating_characteristic.py (its ``scenarios``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core.records import Environment, Provenance, Verdict
from pytest_vllm_perf.core.registry import METRICS, default_tolerances, split_key
from pytest_vllm_perf.store import baselines
from pytest_vllm_perf.verdict import compare, drift, gate, sequential
from pytest_vllm_perf.verdict.drift import Component
from pytest_vllm_perf.verdict.sequential import CALL_SHARE

ROOT = Path(__file__).resolve().parent.parent
Kind = Literal["power", "false_alarm"]
DECODE: Final = ("itl_p50_ms", "tpot_mean_ms", "output_throughput")
INTERFERENCE: Final = (
    "chat.tpot_p99_ms", "chat.tpot_mean_ms", "long.ttft_p50_ms", "output_throughput",
    "chat.itl_p50_ms",
)  # fmt: skip
# The sd of a pair's log ratio in the H200's resident A/A runs, every pair counted (the
# first included): bench/results/h200/ab-modes-aa/resident, plant*/aa, plant-l33/aa-*.
PAIR_SD: Final[Mapping[str, float]] = {
    "itl_p50_ms": 0.014, "tpot_mean_ms": 0.017, "output_throughput": 0.020,
    "chat.tpot_p99_ms": 0.026, "chat.tpot_mean_ms": 0.018, "long.ttft_p50_ms": 0.0265,
    "chat.itl_p50_ms": 0.0139,
}  # fmt: skip
PAIR_SD_INTERFERENCE_THROUGHPUT: Final = 0.0216


def _provenance() -> Provenance:
    env = Environment("cuda", "1x NVIDIA H200", None, None, "3.12")
    return Provenance("default", {}, "", (), (), env)


TOL: Final = default_tolerances("cuda", ab=True)
PAIRS: Final = sequential.DEFAULT_MOST  # drawn ahead: a run uses as many as its looks need
OFFSET: Final = gate.ab_drift(None, _provenance(), sequential=False)  # as the gate allows
Rows = list[dict[str, float]]
USED: Counter[int] = Counter()  # the pairs each A/B decision of a scenario used


def higher(key: str) -> bool:
    return METRICS[split_key(key)[1]].higher_is_better


def pair_sd(workload: str, key: str) -> float:
    if workload == "interference" and key == "output_throughput":
        return PAIR_SD_INTERFERENCE_THROUGHPUT
    return PAIR_SD[key]


def side(rows: Sequence[Mapping[str, float]]) -> compare.Passes:
    return compare.Passes(tuple(rows), tuple(range(len(rows))), (8.0,) * len(rows))


# The first pass of a side read slower in every recorded resident A/A (pair 0 left
# out, the rest's pair sd falls to the ``BODY_SD``): decode's base side 2-3.5% on its
# gated metrics, interference's candidate 4.3% on long TTFT p50 (audit of the A/As).
BODY_SD: Final[Mapping[str, float]] = {
    "itl_p50_ms": 0.005, "tpot_mean_ms": 0.011, "output_throughput": 0.013,
    "chat.tpot_p99_ms": 0.020, "chat.tpot_mean_ms": 0.015, "long.ttft_p50_ms": 0.021,
    "chat.itl_p50_ms": 0.003,
}  # fmt: skip
FIRST_PASS: Final[Mapping[str, tuple[str, float]]] = {
    "itl_p50_ms": ("base", 0.035), "tpot_mean_ms": ("base", 0.022),
    "output_throughput": ("base", 0.02), "chat.tpot_p99_ms": ("base", 0.01),
    "chat.tpot_mean_ms": ("base", 0.015), "long.ttft_p50_ms": ("candidate", 0.043),
    "chat.itl_p50_ms": ("base", 0.018),
}  # fmt: skip


@dataclass(frozen=True)
class Noise:
    """What is drawn besides normal pass noise at the pair sd: a per-server offset sd
    (``tau``) and a candidate-worse offset (``delta``); ``shape``: "t3" (Student's t, 3
    degrees of freedom, scaled to the same sd), "stall" (5% of passes slowed by an
    exponential of 4 sds), "first" (the body sd and the first pass's slowness); a
    ``drift`` over the run; all on the log scale."""

    tau: float = 0.0
    delta: float = 0.0
    shape: str = "normal"
    drift: float = 0.0


def _noise(rng: np.random.Generator, shape: str, sd: float, size: int) -> Any:
    if shape == "t3":
        return rng.standard_t(3, size) * sd / math.sqrt(3)
    base = rng.normal(0, sd, size)
    if shape == "stall":
        return base + (rng.random(size) < 0.05) * rng.exponential(4 * sd, size)
    return base


def draw(
    workload: str, keys: Sequence[str], rng: np.random.Generator, pairs: int = PAIRS,
    change: Mapping[str, float] | None = None, noise: Noise = Noise(),
) -> tuple[Rows, Rows]:  # fmt: skip
    """Base and candidate rows of ``pairs`` pairs; ``change[key]`` makes it that many times
    worse on the candidate side."""
    base: Rows = [{} for _ in range(pairs)]
    cur: Rows = [{} for _ in range(pairs)]
    for key in keys:
        first = noise.shape == "first"
        sd = (BODY_SD[key] if first and key in BODY_SD else pair_sd(workload, key)) / math.sqrt(2)
        offset = noise.delta + rng.normal(0, noise.tau) - rng.normal(0, noise.tau)
        worse = math.log((change or {}).get(key, 1.0))
        eps = _noise(rng, noise.shape, sd, (pairs, 2))
        for k in range(pairs):
            order = (0, 1) if k % 2 == 0 else (1, 0)  # ABBA: the slot each side ran in
            for i, (rows, shift, who) in enumerate(
                ((base, 0.0, "base"), (cur, offset + worse, "candidate"))
            ):
                slot = 2 * k + order[i]
                w = eps[k, i] + shift + noise.drift * slot / (2 * pairs - 1)
                if first and k == 0 and FIRST_PASS.get(key, ("", 0.0))[0] == who:
                    w += FIRST_PASS[key][1]
                rows[k][key] = 5.0 * math.exp(-w if higher(key) else w)
    return base, cur


def scale(rows: Rows, key: str, factor: float, passes: Sequence[int]) -> None:
    """Make ``key`` ``factor`` times worse in ``passes`` of ``rows``."""
    for k in passes:
        rows[k][key] = rows[k][key] / factor if higher(key) else rows[k][key] * factor


def run_ab(
    base: Rows, cur: Rows, keys: Sequence[str], design: sequential.Design,
    allowance: Component | Mapping[str, Component] = OFFSET,
    tolerances: Mapping[str, float] = TOL,
) -> tuple[dict[str, Verdict], int]:  # fmt: skip
    """``measure.run_ab``'s loop: looks, regressions carried, stop when none is undecided."""
    kept: set[str] = set()
    final: dict[str, Verdict] = {}
    n = 0
    for look in design.looks():
        n = look.pairs
        found = compare.compare(
            [side(base[:n])], side(cur[:n]), keys, tolerances, gated=keys, pair=True,
            look=look, drift=allowance,
        )  # fmt: skip
        by = {v.metric: v.verdict for v in found if v.gated}
        kept |= {m for m, v in by.items() if v is Verdict.REGRESSED}
        final = {m: (Verdict.REGRESSED if m in kept else v) for m, v in by.items()}
        if Verdict.INCONCLUSIVE not in final.values() or look.last:
            break
    USED[n] += 1
    return final, n


def failed(final: Mapping[str, Verdict]) -> bool:
    return Verdict.REGRESSED in final.values()


Trial = Callable[[np.random.Generator], bool]


def design(alpha: float = sequential.DEFAULT_ALPHA, **kw: int) -> sequential.Design:
    """The design a test's one ``vllm_perf.run`` call gets: its share (``CALL_SHARE``) of
    the test's ``alpha``, itself at most 1%."""
    return sequential.Design(alpha=min(alpha, sequential.DEFAULT_ALPHA) * CALL_SHARE, **kw)


def _intermittent(rng: np.random.Generator) -> bool:
    b, c = draw("decode", DECODE, rng)
    for key in DECODE:  # x1.5 in every 4th candidate pass: pass k replays schedule k
        scale(c, key, 1.5, range(3, PAIRS, 4))
    return failed(run_ab(b, c, DECODE, design())[0])


def _stalled_base(rng: np.random.Generator) -> bool:
    b, c = draw("decode", DECODE, rng)
    for key in ("tpot_mean_ms", "output_throughput"):
        scale(c, key, 1.3, range(PAIRS))
        scale(b, key, 3.0, [2])  # one base pass hit by a host stall
    return failed(run_ab(b, c, DECODE, design())[0])


def _noisy_candidate(rng: np.random.Generator) -> bool:
    b, c = draw("decode", DECODE, rng)
    for key in ("tpot_mean_ms", "output_throughput"):
        for k in range(PAIRS):
            scale(c, key, 1.3 * math.exp(rng.normal(0, 0.30)), [k])
    return failed(run_ab(b, c, DECODE, design())[0])


def _offset_aa(workload: str, alpha: float = sequential.DEFAULT_ALPHA) -> Trial:
    keys = DECODE if workload == "decode" else INTERFERENCE

    def trial(rng: np.random.Generator) -> bool:
        b, c = draw(workload, keys, rng, noise=Noise(tau=0.005, delta=0.01))
        return failed(run_ab(b, c, keys, design(alpha))[0])

    return trial


def _suite_offset(rng: np.random.Generator) -> bool:
    """A run of 9 A/B tests (4 decode, 5 interference) at 5%/9 each, the servers' offsets
    (1% worse + 0.5% per server) shared by every test of the run."""
    shared = {k: 0.01 + rng.normal(0, 0.005) - rng.normal(0, 0.005)
              for k in {*DECODE, *INTERFERENCE}}  # fmt: skip
    suite = design(0.05 / 9)
    for workload in ["decode"] * 4 + ["interference"] * 5:
        keys = DECODE if workload == "decode" else INTERFERENCE
        b, c = draw(workload, keys, rng)
        for key in keys:
            scale(c, key, math.exp(shared[key]), range(PAIRS))
        if failed(run_ab(b, c, keys, suite)[0]):
            return True
    return False


def _cbbc_aa(workload: str, boot_sd: float) -> Trial:
    """Boots in turn: the base's 8 passes from one boot, the candidate's first 4 from one
    and last 4 from another, each boot at its own level."""
    keys = DECODE if workload == "decode" else INTERFERENCE
    allowance = gate.ab_drift(None, _provenance(), sequential=True)

    def trial(rng: np.random.Generator) -> bool:
        b, c = draw(workload, keys, rng, pairs=8)
        for key in keys:
            lb, l1, l2 = rng.normal(0, boot_sd, 3)
            scale(b, key, math.exp(lb), range(8))
            scale(c, key, math.exp(l1), range(4))
            scale(c, key, math.exp(l2), range(4, 8))
        return failed(run_ab(b, c, keys, design(first=8, most=8), allowance)[0])

    return trial


def _sporadic_failures(rng: np.random.Generator) -> bool:
    """tokenizer_pressure's gated metrics, an A/A with Poisson(0.1) failed requests a pass
    on both sides and ``failed`` relaxed: a pass with one makes its TTFT p99 infinite."""
    keys = ("ttft_p50_ms", "ttft_p99_ms", "request_throughput")
    sds = {"ttft_p50_ms": 0.0277, "ttft_p99_ms": 0.0393, "request_throughput": 0.0003}
    tol = default_tolerances("cuda", ab=True)
    base: Rows = [{} for _ in range(PAIRS)]
    cur: Rows = [{} for _ in range(PAIRS)]
    for rows in (base, cur):
        for row in rows:
            for key in keys:
                w = rng.normal(0, sds[key] / math.sqrt(2))
                row[key] = 5.0 * math.exp(-w if higher(key) else w)
            row["failed"] = float(rng.poisson(0.1))
            if row["failed"]:
                row["ttft_p99_ms"] = math.inf
    return failed(run_ab(base, cur, keys, design(), tolerances=tol)[0])


def _x105(workload: str, key: str) -> Trial:
    keys = DECODE if workload == "decode" else INTERFERENCE

    def trial(rng: np.random.Generator) -> bool:
        b, c = draw(workload, keys, rng, change={key: 1.05})
        return run_ab(b, c, keys, design())[0][key] is Verdict.REGRESSED

    return trial


def _aa(workload: str, noise: Noise = Noise()) -> Trial:
    keys = DECODE if workload == "decode" else INTERFERENCE

    def trial(rng: np.random.Generator) -> bool:
        b, c = draw(workload, keys, rng, noise=noise)
        return failed(run_ab(b, c, keys, design())[0])

    return trial


STORED_FILES: Final = {
    "decode": ".vllm-perf/1x-nvidia-h200/examples-test_decode.py-test_decode/default.json",
    "interference": (
        ".vllm-perf/1x-nvidia-h200/examples-test_interference.py-test_interference/default.json"
    ),
}


def _stored(workload: str, factor: float) -> Trial:
    """The committed H200 baseline of two boots, against a new boot: its passes those of
    one of the stored boots drawn at random, moved by a boot level drawn at the
    platform's measured drift, with every gated metric ``factor`` times worse."""
    stored = baselines.load(ROOT / STORED_FILES[workload])
    assert stored is not None
    keys = workloads.named(workload).gate
    tol = default_tolerances("cuda")
    others = [baselines.load(ROOT / f) for w, f in STORED_FILES.items() if w != workload]
    allowance = gate.stored_drift(stored, [o for o in others if o], keys, _provenance())

    def trial(rng: np.random.Generator) -> bool:
        boot = stored.boots[rng.integers(len(stored.boots))]
        rows = []
        for m in boot.metrics:
            row = dict(m)
            for key in keys:
                level = math.exp(rng.normal(0, drift.BOOT_DRIFT["cuda"])) * factor
                row[key] = row[key] / level if higher(key) else row[key] * level
            rows.append(row)
        cur = compare.Passes(tuple(rows), boot.indices, boot.durations)
        level = 2 * compare.STORED_ALPHA * CALL_SHARE  # a stored test's, two-sided
        found = compare.compare(stored.boots, cur, keys, tol, gated=keys, pair=True,
                                alpha=level, drift=allowance)  # fmt: skip
        return failed({v.metric: v.verdict for v in found if v.gated})

    return trial


# (name, kind, the bound it must keep, the trial)
SCENARIOS: Final[Sequence[tuple[str, Kind, float, Callable[[], Trial]]]] = (
    ("intermittent-1in4", "power", 0.90, lambda: _intermittent),
    ("stalled-base", "power", 0.90, lambda: _stalled_base),
    ("noisy-candidate-x1.3", "power", 0.90, lambda: _noisy_candidate),
    ("stored-2boot-x1.3-decode", "power", 0.90, lambda: _stored("decode", 1.3)),
    ("stored-2boot-x1.3-interference", "power", 0.90, lambda: _stored("interference", 1.3)),
    ("stored-2boot-aa-decode", "false_alarm", 0.025, lambda: _stored("decode", 1.0)),
    ("stored-2boot-aa-interference", "false_alarm", 0.025, lambda: _stored("interference", 1.0)),
    ("cbbc-aa-2pct-decode", "false_alarm", 0.01, lambda: _cbbc_aa("decode", 0.02)),
    ("cbbc-aa-2pct-interference", "false_alarm", 0.01, lambda: _cbbc_aa("interference", 0.02)),
    ("offset-1pct-decode", "false_alarm", 0.01, lambda: _offset_aa("decode")),
    ("offset-1pct-interference", "false_alarm", 0.01, lambda: _offset_aa("interference")),
    ("suite-9-offset-1pct", "false_alarm", 0.05, lambda: _suite_offset),
    ("sporadic-failures-aa", "false_alarm", 0.01, lambda: _sporadic_failures),
    *(
        (f"aa-{shape}-{w}", "false_alarm", 0.01, (lambda w=w, n=noise: _aa(w, n)))
        for shape, noise in (
            ("normal", Noise()), ("t3", Noise(shape="t3")), ("stall", Noise(shape="stall")),
            ("first-pass", Noise(shape="first")), ("drift-3pct", Noise(drift=0.03)),
            ("offset-measured", Noise(tau=0.004, delta=0.005)),
        )
        for w in ("decode", "interference")
    ),
    *(
        (f"x1.05-{w}-{k}", "power", 0.90, (lambda w=w, k=k: _x105(w, k)))
        for w, keys in (("decode", DECODE), ("interference", INTERFERENCE))
        for k in keys
    ),
)  # fmt: skip


def run(trials: int, seed: int = 0, only: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every scenario (or those named in ``only``), ``trials`` times each."""
    out = []
    for name, kind, bound, make in SCENARIOS:
        if only and name not in only:
            continue
        rng = np.random.default_rng(seed)
        trial = make()
        USED.clear()
        hits = sum(trial(rng) for _ in range(trials))
        rate = hits / trials
        holds = rate >= bound if kind == "power" else rate <= bound
        out.append({"name": name, "kind": kind, "rate": rate, "trials": trials,
                    "bound": bound, "holds": holds,
                    "pairs_used": {str(k): v for k, v in sorted(USED.items())}})  # fmt: skip
        print(json.dumps(out[-1]), flush=True)
    return out


if __name__ == "__main__":
    import sys

    run(int(sys.argv[1]) if len(sys.argv) > 1 else 200, only=sys.argv[2:])
