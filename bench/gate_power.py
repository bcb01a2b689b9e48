"""How trustworthy is the regression gate? False alarms (A/A) and detection (A/B), CPU engine.

A real gate compares a baseline saved in one session with a run in a later one,
on a freshly booted server, pass against pass (see compare.py). So does this
benchmark: it boots the server ``--boots`` times and runs ``--pool`` passes of
the workload in each boot.

- A/A: passes of one boot as the baseline, passes of another as the current run.
- A/B: the same, with every inter-token gap of the current passes stretched by
  each ``--factor`` (1.2 = a 20% ITL regression, exactly, on top of this machine's
  real noise). An earlier version made the regression with a streaming relay; on two
  cores the relay itself, even in its own process, inflated p99 ITL five- to
  twentyfold at factor 1.0, so it could not make a known 20%.

From every ordered pair of boots, ``--draws`` random choices of passes are compared
with the CPU engine's default tolerances. They
share passes, so the rates are estimates from ``--boots`` boots, not independent
trials. Writes bench/results/gate_power-WORKLOAD.{json,md}. Usage (set-up env):

    .venv/bin/python bench/gate_power.py --workload decode --boots 5 --pool 12
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import pickle
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_vllm_perf.config import workloads  # noqa: E402
from pytest_vllm_perf.config.profiles import load  # noqa: E402
from pytest_vllm_perf.core.records import PassRecord, RequestRecord, Verdict  # noqa: E402
from pytest_vllm_perf.core.registry import COMPARED, default_tolerances  # noqa: E402
from pytest_vllm_perf.core.workload import Workload  # noqa: E402
from pytest_vllm_perf.measure import measure  # noqa: E402
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool  # noqa: E402
from pytest_vllm_perf.verdict import compare, stats  # noqa: E402

WORKLOADS = {
    # Steady streaming decode: ITL p99 is the tail of ordinary decode steps.
    "decode": workloads.named("decode"),
    # The example suite's interference load on the CPU: a few long prefills per pass,
    # so ITL p99 is decided by how many of them land in a pass.
    "interference": workloads.named("interference").override(
        {"chat": {"users": 4, "output_tokens": 128}, "long": {"rate": 0.2}}
    ),
}


def one_boot(spec: Workload, args: argparse.Namespace, boot: int) -> list[PassRecord]:
    """Boot the server once and run ``--pool`` passes of the workload."""
    pool = ServerPool(PoolConfig(ROOT / ".vllm-perf-cache"), print)
    try:
        handle = pool.get(load("default", ROOT / "profiles"))
        result = measure(handle, spec, repeat=args.pool)
    finally:
        pool.stop()
    itl = [round(pct99_itl([rep]), 1) for rep in result.passes]
    print(f"boot {boot + 1}/{args.boots}: ITL p99 ms per pass {itl}", flush=True)
    return list(result.passes)


def stretched(rep: PassRecord, factor: float) -> PassRecord:
    """The pass as it would have been with every inter-token gap ``factor`` times longer."""

    def one(r: RequestRecord) -> RequestRecord:
        if r.ttft is None:
            return r
        e2el = r.ttft + (r.e2el - r.ttft) * factor
        return dataclasses.replace(r, itl=tuple(x * factor for x in r.itl), e2el=e2el)

    return dataclasses.replace(rep, records=tuple(one(r) for r in rep.records))


def pct99_itl(reps: Sequence[PassRecord]) -> float:
    records = [r for rep in reps for r in rep.records]
    return stats.summarize(records, 1.0)["itl_p99_ms"]


def passes_of(spec: Workload, reps: Sequence[PassRecord]) -> compare.Passes:
    return compare.Passes(
        metrics=tuple(stats.pass_metrics(spec, p) for p in reps),
        indices=tuple(p.index for p in reps),
        durations=tuple(p.duration_s for p in reps),
        records=tuple(reps),
    )


def draws(
    spec: Workload,
    base: list[PassRecord],
    cur: list[PassRecord],
    n: int,
    k: int,
    rng: np.random.Generator,
) -> list[dict[str, str]]:
    """``n`` comparisons of ``k`` passes drawn from each side's pool, metric -> verdict."""
    out = []
    for _ in range(n):
        b = [base[j] for j in rng.choice(len(base), k, replace=False)]
        c = [cur[j] for j in rng.choice(len(cur), k, replace=False)]
        verdicts = compare.compare(
            [passes_of(spec, b)],
            passes_of(spec, c),
            COMPARED,
            default_tolerances("cpu"),
            gated=spec.gate or COMPARED,
        )
        out.append({v.metric: v.verdict for v in verdicts})
    return out


def rate(verdicts: list[dict[str, str]], metric: str | None) -> float:
    hits = [
        any(v is Verdict.REGRESSED for v in r.values())
        if metric is None
        else r[metric] is Verdict.REGRESSED
        for r in verdicts
    ]
    return sum(hits) / len(hits)


def power(boots: list[list[PassRecord]], size: int, args: argparse.Namespace) -> dict[str, Any]:
    """False-alarm and detection rates for verdicts over ``size`` passes per side."""
    rng = np.random.default_rng(size)
    spec = WORKLOADS[args.workload]
    pairs = list(itertools.permutations(range(len(boots)), 2))
    aa = [v for i, j in pairs for v in draws(spec, boots[i], boots[j], args.draws, size, rng)]
    detection = {}
    for factor in factors(args):
        slow = [[stretched(rep, factor) for rep in boot] for boot in boots]
        ab = [v for i, j in pairs for v in draws(spec, boots[i], slow[j], args.draws, size, rng)]
        detection[f"x{factor:g}"] = rate(ab, "itl_p99_ms")
    return {
        "passes_per_side": size,
        "load_per_side_s": size * args.duration,
        "comparisons_each": len(aa),
        "false_alarm_itl_p99": rate(aa, "itl_p99_ms"),
        "false_alarm_any_metric": rate(aa, None),
        "detection_itl_p99": detection,
    }


def factors(args: argparse.Namespace) -> list[float]:
    return [float(x) for x in args.factor.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="decode")
    parser.add_argument("--boots", type=int, default=5)
    parser.add_argument("--pool", type=int, default=12, help="passes per boot")
    parser.add_argument("--passes", default="4,5,6,8", help="passes per side (comma-separated)")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per pass")
    parser.add_argument("--factor", default="1.2,1.5,2", help="ITL stretch factors of A/B")
    parser.add_argument("--draws", type=int, default=20, help="comparisons per boot pair")
    parser.add_argument("--reanalyse", action="store_true", help="reuse the last raw passes")
    args = parser.parse_args()
    # SIGTERM skips atexit; exit cleanly so the server's process group is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    started = time.time()
    raw = ROOT / "bench" / "results" / "raw" / f"gate_power-{args.workload}.pickle"
    if args.reanalyse:
        boots = pickle.loads(raw.read_bytes())  # our own file, written below
    else:
        spec = WORKLOADS[args.workload].override({"duration_s": args.duration})
        boots = [one_boot(spec, args, i) for i in range(args.boots)]
        raw.parent.mkdir(parents=True, exist_ok=True)  # every pass's records; not committed
        raw.write_bytes(pickle.dumps(boots))
    summary = {
        "workload": args.workload,
        "boots": len(boots),
        "passes_per_boot": len(boots[0]),
        "pass_s": args.duration,
        "factors": factors(args),
        "by_passes_per_side": [power(boots, int(k), args) for k in args.passes.split(",")],
        "tolerances": default_tolerances("cpu"),
        "seconds": round(time.time() - started),  # collection and analysis, or analysis only
    }
    write(summary, boots, args.workload)
    print(json.dumps(summary, indent=1))


def write(summary: dict[str, object], boots: list[list[PassRecord]], name: str) -> None:
    out = ROOT / "bench" / "results"
    per_pass = [[round(pct99_itl([rep]), 3) for rep in boot] for boot in boots]
    body = {"summary": summary, "itl_p99_ms_per_pass": per_pass}
    (out / f"gate_power-{name}.json").write_text(json.dumps(body, indent=1) + "\n")
    rows = summary["by_passes_per_side"]
    labels = list(rows[0]["detection_itl_p99"])  # type: ignore[index]
    lines = [
        "| workload | passes per side | load per side | A/A false alarms, p99 ITL "
        "| A/A false alarms, any metric | "
        + " | ".join(f"A/B detection of {f} p99 ITL" for f in labels)
        + " |",
        "|---" * (5 + len(labels)) + "|",
    ]
    for row in rows:  # type: ignore[attr-defined]
        lines.append(
            f"| {name} | {row['passes_per_side']} | {row['load_per_side_s']:.0f} s "
            f"| {row['false_alarm_itl_p99']:.1%} | {row['false_alarm_any_metric']:.1%} | "
            + " | ".join(f"{row['detection_itl_p99'][f]:.1%}" for f in labels)
            + " |"
        )
    (out / f"gate_power-{name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
