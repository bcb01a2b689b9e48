"""How trustworthy is the regression gate? False alarms (A/A) and detection (A/B), CPU engine.

A/A: two runs of the same workload against the same server, compared as baseline
and current. A/B: the current run goes through bench/slow_proxy.py, which stretches
every inter-chunk gap by --factor (1.2 = a 20% p99 ITL regression, made mechanically).
Writes bench/results/gate_power.json and .md. Usage, in the set-up environment:

    .venv/bin/python bench/gate_power.py --pairs 10 --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from slow_proxy import serve  # noqa: E402

from pytest_vllm_perf import compare, runner, workload  # noqa: E402
from pytest_vllm_perf.pool import PoolConfig, ServerPool  # noqa: E402
from pytest_vllm_perf.profiles import load  # noqa: E402
from pytest_vllm_perf.server import free_port  # noqa: E402


def verdicts(base: runner.RunResult, cur: runner.RunResult) -> dict[str, str]:
    found = compare.compare_samples(base.records, base.duration_s, cur.records, cur.duration_s, {})
    return {v.metric: v.verdict for v in found} | {
        "_itl_p99_ratio": f"{cur.metrics['itl_p99_ms'] / base.metrics['itl_p99_ms']:.3f}"
    }


async def measure(args: argparse.Namespace) -> dict[str, object]:
    pool = ServerPool(PoolConfig(ROOT / "profiles", ROOT / ".vllm-perf-cache"), print)
    handle = pool.get(load("default", ROOT / "profiles"))
    load_spec = workload.named("mixed").override({"duration_s": args.duration})
    port = free_port()
    proxy = await serve(handle.base_url, args.factor, port)
    aa, ab = [], []
    try:
        for i in range(args.pairs):
            base = await runner.run(load_spec, handle.base_url, handle.model)
            same = await runner.run(load_spec, handle.base_url, handle.model)
            slow = await runner.run(load_spec, f"http://127.0.0.1:{port}", handle.model)
            aa.append(verdicts(base, same))
            ab.append(verdicts(base, slow))
            print(f"pair {i + 1}/{args.pairs}: A/A {aa[-1]}\n  A/B {ab[-1]}", flush=True)
    finally:
        await proxy.cleanup()
        pool.stop()
    return {"aa": aa, "ab": ab}


def rates(results: list[dict[str, str]], metric: str) -> float:
    return sum(r[metric] == compare.REGRESSED for r in results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--factor", type=float, default=1.2)
    args = parser.parse_args()
    # SIGTERM skips atexit; exit cleanly so the server's process group is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    started = time.time()
    data = asyncio.run(measure(args))
    aa, ab = data["aa"], data["ab"]
    any_aa = sum(
        any(v == compare.REGRESSED for k, v in r.items() if not k.startswith("_")) for r in aa
    ) / len(aa)
    summary = {
        "pairs": args.pairs,
        "duration_s": args.duration,
        "factor": args.factor,
        "false_alarm_itl_p99": rates(aa, "itl_p99_ms"),
        "false_alarm_any_metric": any_aa,
        "detection_itl_p99": rates(ab, "itl_p99_ms"),
        "wall_s": round(time.time() - started),
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gate_power.json").write_text(json.dumps({"summary": summary, **data}, indent=1) + "\n")
    (out / "gate_power.md").write_text(
        "| pairs | load per run | A/A false alarms, p99 ITL | A/A false alarms, any metric "
        f"| A/B detection of x{args.factor} ITL, p99 ITL |\n|---|---|---|---|---|\n"
        f"| {args.pairs} | {args.duration:.0f} s | {summary['false_alarm_itl_p99']:.0%} "
        f"| {any_aa:.0%} | {summary['detection_itl_p99']:.0%} |\n"
    )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
