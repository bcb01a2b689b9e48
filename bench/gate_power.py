"""How trustworthy is the regression gate? False alarms (A/A) and detection (A/B), across boots.

A gate compares a baseline saved in earlier sessions with a run on a freshly
booted server. So does this benchmark: it needs the per-pass metrics of several
boots of one profile, and compares, exactly as the gate does (``verdict.compare``
with the workload's gated metrics, Holm's correction and the platform's default
tolerances):

- A/A: a baseline of ``--baseline-boots`` boots against a different boot as the
  current run. Any gated metric called ``regressed`` is a false alarm of that
  test; a suite false alarm is any test of the suite raising one on the same
  boots.
- A/B: the same, with one gated metric of the current passes made worse by a
  known factor (x1.1 on TPOT and output throughput, x1.2 on each workload's
  primary latency metric): every per-pass value multiplied (or, for throughput,
  divided) by it, on top of the machine's real noise. Detection is that metric
  called ``regressed``.

Each comparison draws the same ``--passes`` pass indices from every boot (pass k
replays the same seeded schedule in every run, so the gate may pair them).

Per-pass metrics come from live boots on this machine (``collect``) or from the
``--vllm-json`` reports of suite runs, one report per boot (``reports``); both
write ``bench/results/gate_power-LABEL-passes.json``, which ``analyse`` reads::

    .venv/bin/python bench/gate_power.py collect --workload decode --boots 5 --pool 12
    .venv/bin/python bench/gate_power.py reports h200 bench/results/h200/boots/*.json
    .venv/bin/python bench/gate_power.py analyse cpu-decode h200

Results go to ``bench/results/gate_power-LABEL.{json,md}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.config.profiles import load
from pytest_vllm_perf.core.records import Verdict
from pytest_vllm_perf.core.registry import (
    COMPARED,
    METRICS,
    default_tolerances,
    from_bench_serve_key,
)
from pytest_vllm_perf.measure import measure
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool
from pytest_vllm_perf.verdict import compare, drift

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results"
# The changes each test must catch: x1.1 on steady decode figures, x1.2 on tails.
INJECTIONS: Mapping[str, tuple[tuple[str, float], ...]] = {
    "decode": (
        ("itl_p50_ms", 1.1), ("tpot_mean_ms", 1.1), ("output_throughput", 1.1), ("itl_p99_ms", 1.2),
    ),
    "interference": (
        ("chat.itl_p99_ms", 1.2), ("chat.tpot_mean_ms", 1.1), ("long.ttft_p50_ms", 1.2),
    ),
    "tokenizer_pressure": (("ttft_p50_ms", 1.2), ("ttft_p99_ms", 1.2), ("request_throughput", 1.1)),
    "kv_pressure": (("ttft_p99_ms", 1.2), ("output_throughput", 1.1)),
    "mixed": (("ttft_p99_ms", 1.2), ("tpot_mean_ms", 1.1), ("output_throughput", 1.1)),
}  # fmt: skip
CPU_LOADS: Mapping[str, Mapping[str, Any]] = {
    "decode": {"duration_s": 8},
    "interference": {"duration_s": 8, "chat": {"users": 4}, "long": {"rate": 0.2}},
}

GATES: dict[str, tuple[str, ...]] = {}  # ``analyse --gate``: a workload's gate, replaced
TOLERANCES: dict[str, float] = {}  # ``analyse --tolerance``: over the platform's defaults
Boot = list[dict[str, Any]]  # passes: {"index", "duration_s", "metrics"}


def collect(args: argparse.Namespace) -> None:
    """Boot the default profile ``--boots`` times and record ``--pool`` passes in each."""
    spec = workloads.named(args.workload).override(CPU_LOADS.get(args.workload, {}))
    boots: list[Boot] = []
    for b in range(args.boots):
        pool = ServerPool(PoolConfig(ROOT / ".vllm-perf-cache"), print)
        try:
            result = measure(pool.get(load("default", ROOT / "profiles")), spec, args.pool)
        finally:
            pool.stop()
        boots.append(_boot(result))
        print(f"boot {b + 1}/{args.boots} done", flush=True)
    label = f"{args.platform}-{args.workload}"
    _write_passes(label, args.platform, {args.workload: boots})


def _boot(result: Any) -> Boot:
    return [
        {"index": p.index, "duration_s": p.duration_s, "metrics": dict(m)}
        for p, m in zip(result.passes, result.pass_metrics, strict=True)
    ]


def checks(args: argparse.Namespace) -> None:
    """In one boot: does reading the gauges move the latencies, and what does a real
    slowdown (a busy process on one of the machine's two cores) look like to the gate?

    Gauges on and off alternate in blocks of two passes, ABBA, each block replaying
    the same two seeded schedules in both modes, so drift within the boot cancels
    and the gate can pair them. Then ``--passes`` more passes run with the busy
    process beside them, against the gauges-on passes of the same schedules.
    """
    base = workloads.named(args.workload).override(CPU_LOADS.get(args.workload, {}))
    pool = ServerPool(PoolConfig(ROOT / ".vllm-perf-cache"), print)
    normal: Boot = []
    quiet: Boot = []
    loaded: Boot = []

    def block(handle: Any, b: int, gauges: float | None, into: Boot) -> None:
        spec = base.override({"seed": 2 * b})
        for p in _boot(measure(handle, spec, 2, gauges_every_s=gauges)):
            into.append({**p, "index": 2 * b + p["index"]})

    try:
        handle = pool.get(load("default", ROOT / "profiles"))
        for b in range(args.passes // 2):
            order = ((args.gauge_interval, normal), (None, quiet))
            for gauges, into in order if b % 2 == 0 else order[::-1]:
                block(handle, b, gauges, into)
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for b in range(args.passes // 2):
                block(handle, b, args.gauge_interval, loaded)
        finally:
            hog.kill()
            hog.wait()
    finally:
        pool.stop()
    spec = base
    indices = list(range(args.passes))
    rows = []
    for label, base, cur in (
        (f"no gauges vs gauges read every {args.gauge_interval:g} s", quiet, normal),
        ("a busy process on one core vs none", normal, loaded),
    ):
        found = compare.compare(
            [_passes(base, indices, {})],
            _passes(cur, indices, {}),
            tuple(dict.fromkeys((*spec.gate, *COMPARED))),
            default_tolerances(args.platform),
            gated=spec.gate,
            pair=True,
        )
        for v in found:
            rows.append({"comparison": label, "metric": v.metric, "ratio": v.ratio,
                         "low": v.low, "high": v.high, "verdict": str(v.verdict),
                         "gated": v.gated, "basis": v.basis})  # fmt: skip
    out = RESULTS / f"gate_checks-{args.platform}-{args.workload}-{args.gauge_interval:g}s"
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "| comparison | metric | ratio | 95% CI | verdict | basis |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['comparison']} | {r['metric']}{'' if r['gated'] else ' (not gated)'} "
        f"| x{r['ratio']:.3f} | x{r['low']:.3f}..x{r['high']:.3f} | {r['verdict']} | {r['basis']} |"
        for r in rows
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def reports(args: argparse.Namespace) -> None:
    """Per-pass metrics from ``--vllm-json`` reports, one report per boot."""
    tests: dict[str, list[Boot]] = {}
    for path in args.files:
        for result in json.loads(Path(path).read_text())["results"]:
            name = result["workload"]["name"]
            if args.workload and name not in args.workload:
                continue
            passes = []
            for p in result["passes"]:
                metrics = {from_bench_serve_key(k): _number(v) for k, v in p["metrics"].items()}
                passes.append(
                    {"index": p["index"], "duration_s": p["duration_s"], "metrics": metrics}
                )
            tests.setdefault(name, []).append(passes)
    _write_passes(args.label, args.platform, tests)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _write_passes(label: str, platform: str, tests: Mapping[str, list[Boot]]) -> None:
    path = RESULTS / f"gate_power-{label}-passes.json"
    path.write_text(json.dumps({"platform": platform, "tests": tests}, indent=1) + "\n")
    print(f"wrote {path}")


def _passes(boot: Boot, indices: Sequence[int], scale: Mapping[str, float]) -> compare.Passes:
    chosen = [p for p in boot if p["index"] in set(indices)]
    metrics = []
    for p in chosen:
        m = dict(p["metrics"])
        for key, factor in scale.items():
            m[key] = (
                m[key] / factor
                if METRICS[key.rpartition(".")[2]].higher_is_better
                else m[key] * factor
            )
        metrics.append(m)
    return compare.Passes(
        tuple(metrics), tuple(p["index"] for p in chosen), tuple(p["duration_s"] for p in chosen)
    )


def _verdicts(
    name: str, base: Sequence[Boot], cur: Boot, indices: Sequence[int], platform: str,
    scale: Mapping[str, float],
) -> dict[str, tuple[Verdict, bool]]:  # fmt: skip
    gate = GATES.get(name) or workloads.named(name).gate
    stored = [_passes(b, indices, {}) for b in base]
    # the boot drift the gate allows a baseline of these boots alone on its hardware
    with np.errstate(divide="ignore", invalid="ignore"):
        groups = [[np.log(b.values(k)) for b in stored] for k in gate]
    allowance = drift.stored(drift.boot_drift(groups, platform), len(stored))
    found = compare.compare(
        stored,
        _passes(cur, indices, scale),
        tuple(dict.fromkeys((*gate, *COMPARED, *workloads.named(name).report))),
        {**default_tolerances(platform), **TOLERANCES},
        gated=gate,
        pair=True,
        drift=allowance,
    )
    # every compared metric: detection is also shown for reported, not gated ones
    return {v.metric: (v.verdict, v.gated) for v in found}


def analyse_one(data: Mapping[str, Any], baseline_boots: int, k: int, draws: int) -> dict[str, Any]:
    """A/A and A/B rates over every choice of baseline boots and a different current boot."""
    platform, tests = data["platform"], data["tests"]
    n_boots = min(len(b) for b in tests.values())
    rng = np.random.default_rng(k * 10 + baseline_boots)
    pool_size = min(len(boot) for boots in tests.values() for boot in boots)
    draws = 1 if k >= pool_size else draws  # every pass each time: one draw says it all
    aa: dict[str, list[bool]] = {name: [] for name in tests}
    quiet: dict[str, list[bool]] = {name: [] for name in tests}
    ab: dict[str, list[bool]] = {}
    suite = []
    for current in range(n_boots):
        others = [b for b in range(n_boots) if b != current]
        for chosen in itertools.combinations(others, baseline_boots):
            for _ in range(draws):
                any_test = False
                for name, boots in tests.items():
                    pool = sorted({p["index"] for p in boots[current]})
                    indices = sorted(rng.choice(pool, min(k, len(pool)), replace=False).tolist())
                    base = [boots[b] for b in chosen]
                    found = _verdicts(name, base, boots[current], indices, platform, {})
                    gated = [v for v, g in found.values() if g]
                    alarm = Verdict.REGRESSED in gated
                    aa[name].append(alarm)
                    quiet[name].append(all(v is Verdict.UNCHANGED for v in gated))
                    any_test |= alarm
                    for key, factor in INJECTIONS.get(name, ()):
                        hit = _verdicts(
                            name, base, boots[current], indices, platform, {key: factor}
                        )
                        ab.setdefault(f"{name}: {key} x{factor:g}", []).append(
                            hit[key][0] is Verdict.REGRESSED
                        )
                suite.append(any_test)
    return {
        "baseline_boots": baseline_boots,
        "passes_per_boot": k,
        "comparisons": len(suite),
        "false_alarm_per_test": {n: float(np.mean(v)) for n, v in aa.items()},
        "false_alarm_suite": float(np.mean(suite)),
        "all_gated_unchanged": {n: float(np.mean(v)) for n, v in quiet.items()},
        "detection": {n: float(np.mean(v)) for n, v in ab.items()},
    }


def analyse(args: argparse.Namespace) -> None:
    for option in args.gate:
        name, _, keys = option.partition("=")
        GATES[name] = tuple(k for k in keys.split(",") if k)
    for option in args.tolerance:
        key, _, value = option.partition("=")
        TOLERANCES[key] = float(value)
    suffix = "".join(f"-gate-{name}" for name in sorted(GATES))
    suffix += "".join(f"-tol-{k}-{v:g}" for k, v in sorted(TOLERANCES.items()))
    for source in args.labels:
        data = json.loads((RESULTS / f"gate_power-{source}-passes.json").read_text())
        label = source + suffix
        started = time.time()
        rows = [
            analyse_one(data, b, k, args.draws)
            for b in (1, 2)
            for k in sorted({min(6, _pool(data)), _pool(data)})
            if b < min(len(v) for v in data["tests"].values())
        ]
        summary = {
            "label": label,
            "platform": data["platform"],
            "tests": sorted(data["tests"]),
            "boots": min(len(v) for v in data["tests"].values()),
            "rows": rows,
            "tolerances": {**default_tolerances(data["platform"]), **TOLERANCES},
            "seconds": round(time.time() - started),
        }
        (RESULTS / f"gate_power-{label}.json").write_text(json.dumps(summary, indent=1) + "\n")
        (RESULTS / f"gate_power-{label}.md").write_text("\n".join(markdown(summary)) + "\n")
        print("\n".join(markdown(summary)))


def _pool(data: Mapping[str, Any]) -> int:
    return min(len(boot) for boots in data["tests"].values() for boot in boots)


def markdown(summary: Mapping[str, Any]) -> list[str]:
    rows = summary["rows"]
    changes = list(rows[0]["detection"])
    tests = summary["tests"]
    head = ["baseline boots", "passes per boot", "comparisons", "A/A suite",
            *(f"A/A {t}" for t in tests), *(f"all gated unchanged: {t}" for t in tests),
            *(f"A/B {c}" for c in changes)]  # fmt: skip
    out = [
        f"{summary['label']} ({summary['platform']}, {summary['boots']} boots):",
        "",
        "| " + " | ".join(head) + " |",
        "|---" * len(head) + "|",
    ]
    for r in rows:
        cells = [str(r["baseline_boots"]), str(r["passes_per_boot"]), str(r["comparisons"]),
                 f"{r['false_alarm_suite']:.1%}",
                 *(f"{r['false_alarm_per_test'][t]:.1%}" for t in tests),
                 *(f"{r['all_gated_unchanged'][t]:.1%}" for t in tests),
                 *(f"{r['detection'][c]:.1%}" for c in changes)]  # fmt: skip
        out.append("| " + " | ".join(cells) + " |")
    return out


def ab_power(args: argparse.Namespace) -> None:
    """Detection and false alarms of A/B mode, from the passes of one A/A run (both sides).

    An A/A run (``--vllm-ab`` naming the candidate's profile) records pass k of
    both sides on one machine. Its pairs are resampled with replacement, ``n`` at
    a time, and judged as ``measure.run_ab`` judges them (paired, the workload's
    gate, the platform's tolerances, Holm): as they are (a false alarm is any
    gated ``regressed``) and with ``--metric`` on the candidate side made worse by
    ``--factor`` (detection is that metric ``regressed``). A bootstrap of the
    run's own pairs: it assumes the next run's pass-to-pass noise is like this one's.
    """
    rng = np.random.default_rng(0)
    rows = []
    for path in args.files:
        data = json.loads(Path(path).read_text())
        for result in data.get("report", data)["results"]:  # gpu_advice.py nests it
            if "base_passes" not in result:
                continue
            name, platform = result["workload"]["name"], result["environment"]["platform"]
            sides = [{p["index"]: p for p in result[key]} for key in ("base_passes", "passes")]
            pairs = sorted(set(sides[0]) & set(sides[1]))
            metrics = [m for m in args.metric if m.rpartition(".")[0] in ("", *(
                c["name"] for c in result["workload"]["classes"]))]  # fmt: skip
            seconds = np.mean([p["duration_s"] for p in result["passes"]])
            for n in sorted({*args.pairs, len(pairs)}):
                alarms, hits = [], {m: [] for m in metrics}
                for _ in range(args.draws):
                    drawn = rng.choice(pairs, n, replace=True).tolist()
                    boots = [
                        [{"index": i, "duration_s": side[k]["duration_s"], "metrics": {
                            from_bench_serve_key(key): _number(v)
                            for key, v in side[k]["metrics"].items()}}
                         for i, k in enumerate(drawn)]
                        for side in sides
                    ]  # fmt: skip
                    found = _verdicts(name, [boots[0]], boots[1], range(n), platform, {})
                    alarms.append(any(v is Verdict.REGRESSED and g for v, g in found.values()))
                    for m in [m for m in metrics if m in found]:  # compared for this one
                        hit = _verdicts(name, [boots[0]], boots[1], range(n), platform,
                                        {m: args.factor})  # fmt: skip
                        hits[m].append(hit[m][0] is Verdict.REGRESSED)
                rows.append({
                    "report": Path(path).name, "test": result["test"], "workload": name,
                    "pairs": n, "load_per_side_s": round(n * seconds),
                    "false_alarm": float(np.mean(alarms)),
                    **{f"detect {m} x{args.factor:g}": float(np.mean(v))
                       for m, v in hits.items() if v},
                })  # fmt: skip
    out = RESULTS / f"gate_power-{args.label}.json"
    out.write_text(json.dumps({"draws": args.draws, "rows": rows}, indent=1) + "\n")
    head = sorted({k for r in rows for k in r})
    head = ["workload", "pairs", "load_per_side_s", "false_alarm"] + [
        k for k in head if k.startswith("detect")
    ]
    lines = [
        f"A/B mode from A/A runs ({', '.join(Path(f).name for f in args.files)}): "
        f"{args.draws} bootstrap draws of the pairs each row",
        "",
        "| " + " | ".join(head) + " |",
        "|---" * len(head) + "|",
    ]
    for r in rows:
        cells = [f"{r[k]:.1%}" if isinstance(r.get(k), float) else str(r.get(k, "-"))
                 for k in head]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="boot the CPU engine repeatedly and record passes")
    c.add_argument("--workload", choices=sorted(CPU_LOADS), default="decode")
    c.add_argument("--boots", type=int, default=5)
    c.add_argument("--pool", type=int, default=12, help="passes per boot")
    c.add_argument("--platform", default="cpu")
    r = sub.add_parser("reports", help="per-pass metrics from --vllm-json reports, one per boot")
    r.add_argument("label")
    r.add_argument("files", nargs="+")
    r.add_argument("--platform", default="cuda")
    r.add_argument("--workload", action="append", help="keep only this workload (repeatable)")
    k = sub.add_parser("checks", help="gauge reading and a real slowdown, in one CPU boot")
    k.add_argument("--workload", choices=sorted(CPU_LOADS), default="decode")
    k.add_argument("--passes", type=int, default=8)
    k.add_argument("--platform", default="cpu")
    k.add_argument("--gauge-interval", type=float, default=2.0, help="seconds between reads")
    a = sub.add_parser("analyse", help="A/A and A/B rates from recorded passes")
    a.add_argument("labels", nargs="+")
    a.add_argument("--draws", type=int, default=20, help="pass draws per choice of boots")
    a.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="WORKLOAD=KEY,KEY",
        help="analyse with another gate for a workload; results go to LABEL-gate-WORKLOAD",
    )
    a.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="KEY=FRACTION",
        help="override a default tolerance; results go to LABEL-tol-KEY-FRACTION",
    )
    b = sub.add_parser("ab", help="A/B mode's detection and false alarms from A/A reports")
    b.add_argument("label")
    b.add_argument("files", nargs="+", help="--vllm-json reports of A/A runs")
    b.add_argument("--metric", action="append", default=[], help="metric made worse (repeatable)")
    b.add_argument("--factor", type=float, default=1.2)
    b.add_argument("--pairs", type=lambda s: [int(x) for x in s.split(",")], default=[4, 6, 8])
    b.add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    # SIGTERM skips atexit; exit cleanly so the server's process group is stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    commands = {
        "collect": collect, "reports": reports, "analyse": analyse, "checks": checks, "ab": ab_power
    }  # fmt: skip
    commands[args.command](args)


if __name__ == "__main__":
    main()
