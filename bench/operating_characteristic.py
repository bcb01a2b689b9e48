"""The gate's operating characteristic: how often each verdict comes out, by true change.

For each workload's gated metrics, a noise model (``bench/noise.py``:
boot, schedule and pass-to-pass scales on the log scale) is fitted to the committed
per-pass metrics of real boots, and the real verdict is run on passes drawn from
it, with the metric made ``r`` times worse on the current side (latency x r,
throughput / r; r < 1 is an improvement), at the default 8 passes and the
platform's default tolerances of each mode:

- ``stored``: a baseline of 2 boots against a new boot (the gate across machines),
  the workload's ``gate`` at the stored tolerances;
- ``ab``: both sides on one machine, alternated (``--vllm-ab``), ``gate`` plus
  ``ab_gate`` at the A/B tolerances (``core.tolerances.AB_TOLERANCES``).

The model is checked against the real passes it was fitted to: every boot in turn
as the current run against two other boots as the baseline (all common passes),
as is (A/A) and with the metric made x1.2 worse (injected).

The A/B decision is also run on the real pairs of the H200's resident A/A runs
(``AB_REAL``): pairs drawn with replacement from the recorded ones, judged as
``measure.run_ab`` judges them (8 pairs, then 4 more a look up to 20), as recorded (A/A: the
false-alarm rate, with the servers' real offset kept) and with each gated metric
made x1.05 worse on the candidate side (the power at the size of a release
regression). Rerun with::

    .venv/bin/python bench/operating_characteristic.py

Writes ``bench/results/operating_characteristic.{json,md,png}``; its ``scenarios`` are
bench/scenarios.py's named regressions and A/As, ``--scenario-trials`` (1000) each.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import noise  # bench/noise.py, beside this script (its only caller)
import numpy as np
import scenarios  # bench/scenarios.py: the named scenarios of the gate's error rates

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core.records import Verdict
from pytest_vllm_perf.core.registry import (
    METRICS,
    default_tolerances,
    from_bench_serve_key,
    tolerance_for,
)
from pytest_vllm_perf.core.report import ResultEntry
from pytest_vllm_perf.store import reports
from pytest_vllm_perf.verdict import compare, drift, sequential

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# (label, platform, passes file, workloads taken from it)
SOURCES = (
    ("H200", "cuda", "gate_power-h200-decode-all-passes.json", ("decode",)),
    ("H200", "cuda", "gate_power-h200-suite-s34-passes.json",
     ("interference", "tokenizer_pressure")),
    ("CPU", "cpu", "gate_power-cpu-decode-passes.json", ("decode",)),
    ("CPU", "cpu", "gate_power-cpu-interference-passes.json", ("interference",)),
)  # fmt: skip
# the H200's resident A/A runs (two servers of one config on one GPU, passes ABBA):
# (label, workload, [(file, test id)]) whose pairs are pooled
AB_REAL = (
    ("H200", "decode", [("h200/ab-modes-aa/resident/ab.json",
                         "examples/test_decode.py::test_decode"),
                        ("h200/plant/aa/ab.json", "examples/test_decode.py::test_decode"),
                        ("h200/plant-settle/aa/ab.json", "examples/test_decode.py::test_decode"),
                        ("h200/plant-warm/aa/ab.json", "examples/test_decode.py::test_decode")]),
    ("H200", "interference",
     [("h200/ab-modes-aa/resident/ab.json", "examples/test_interference.py::test_interference"),
      ("h200/plant-l33/aa-interference/ab.json",
       "examples/test_interference.py::test_interference")]),
)  # fmt: skip
AB_PLANT = 1.05
RATIOS = (0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 2.0)
INJECTED = 1.2


Boot = list[dict[str, Any]]


def _boots(path: Path, workload: str) -> list[Boot]:
    data = json.loads(path.read_text())
    return [
        [{**p, "metrics": {from_bench_serve_key(k): _num(v) for k, v in p["metrics"].items()}}
         for p in boot]
        for boot in data["tests"][workload]
    ]  # fmt: skip


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _side(boot: Boot, gate: Sequence[str], factor: Mapping[str, float]) -> compare.Passes:
    metrics = []
    for p in boot:
        m = {k: p["metrics"].get(k, math.nan) for k in gate}
        for key, r in factor.items():
            m[key] = m[key] / r if METRICS[key.rpartition(".")[2]].higher_is_better else m[key] * r
        metrics.append(m)
    return compare.Passes(
        tuple(metrics), tuple(p["index"] for p in boot), tuple(p["duration_s"] for p in boot)
    )


def real_checks(
    boots: list[Boot], gate: Sequence[str], tol: Mapping[str, float], platform: str
) -> dict[str, Any]:
    """A/A and x1.2-injected rates on the real boots: each boot against two others, with
    the boot drift the gate allows a baseline of those two alone on its hardware."""
    aa, hits = [], {k: [] for k in gate}
    for cur in range(len(boots)):
        others = [b for b in range(len(boots)) if b != cur]
        for chosen in itertools.combinations(others, 2):
            base = [_side(boots[b], gate, {}) for b in chosen]
            with np.errstate(divide="ignore", invalid="ignore"):
                groups = [[np.log(b.values(k)) for b in base] for k in gate]
            allowance = drift.stored(drift.boot_drift(groups, platform), len(base))
            found = compare.compare(base, _side(boots[cur], gate, {}), gate, tol, gated=gate,
                                    pair=True, drift=allowance)  # fmt: skip
            aa.append(any(v.verdict is Verdict.REGRESSED and v.gated for v in found))
            for key in gate:
                injected = _side(boots[cur], gate, {key: INJECTED})
                got = compare.compare(base, injected, gate, tol, gated=gate, pair=True,
                                      drift=allowance)  # fmt: skip
                found_key = next(v for v in got if v.metric == key)
                hits[key].append(found_key.verdict is Verdict.REGRESSED)
    return {
        "comparisons": len(aa),
        "aa_false_alarm": float(np.mean(aa)),
        "detect_injected": {k: float(np.mean(v)) for k, v in hits.items()},
    }


def model_checks(scales: Mapping[str, noise.Scales], tol: Mapping[str, float], passes: int,
                 trials: int, seed: int) -> dict[str, Any]:  # fmt: skip
    """The same two figures from the fitted model, at the real data's pass count."""
    oc = noise.operating_characteristic(scales, tol, (1.0, INJECTED), "stored", passes, 2,
                                        trials, seed)  # fmt: skip
    return {
        "aa_false_alarm": oc["any regressed"][1.0]["True"] / trials,
        "detect_injected": {k: oc[k][INJECTED]["regressed"] / trials for k in scales},
    }


def _real_pairs(sources: Sequence[tuple[str, str]]) -> tuple[list[dict], list[dict]]:
    """The base and candidate pass metrics of recorded A/B runs, pair k to pair k."""
    base: list[dict] = []
    cur: list[dict] = []
    for file, test in sources:
        results = json.loads((RESULTS / file).read_text())["results"]
        [r] = [r for r in results if r["test"] == test]
        entry = ResultEntry.from_json(r, file)
        b, c = reports.report_passes(entry.base_passes or ()), reports.report_passes(entry.passes)
        by_index = dict(zip(b.indices, b.metrics, strict=True))
        for index, m in zip(c.indices, c.metrics, strict=True):
            if index in by_index:
                base.append(dict(by_index[index]))
                cur.append(dict(m))
    return base, cur


def resident_scales(
    sources: Sequence[tuple[str, str]], keys: Sequence[str]
) -> dict[str, noise.Scales]:
    """The A/B noise of the resident A/A pairs: a pair's log ratio has twice a pass's
    residual variance, and the schedule and the machine's level cancel in it."""
    base, cur = _real_pairs(sources)
    out = {}
    for key in keys:
        logs = [math.log(c[key] / b[key]) for b, c in zip(base, cur, strict=True)
                if key in b and key in c and b[key] > 0 and c[key] > 0
                and math.isfinite(b[key]) and math.isfinite(c[key])]  # fmt: skip
        if len(logs) >= 4:
            level = float(np.exp(np.mean([math.log(b[key]) for b in base if b.get(key, 0) > 0])))
            out[key] = noise.Scales(0.0, 0.0, float(np.std(logs, ddof=1)) / math.sqrt(2), level)
    return out


def ab_real(workload_name: str, sources: Sequence[tuple[str, str]], trials: int,
            seed: int) -> dict[str, Any]:  # fmt: skip
    """The sequential A/B decision on real A/A pairs drawn with replacement: false alarms
    as recorded, and detection with each gated metric made ``AB_PLANT`` times worse."""
    workload = workloads.named(workload_name)
    keys = tuple(k for k in (*workload.gate, *workload.ab_gate))
    tol = default_tolerances("cuda", ab=True)
    base, cur = _real_pairs(sources)
    design = sequential.Design()
    rng = np.random.default_rng(seed)

    def side(rows: Sequence[Mapping[str, float]]) -> compare.Passes:
        return compare.Passes(tuple(rows), tuple(range(len(rows))), (8.0,) * len(rows))

    def judge(factor: Mapping[str, float]) -> tuple[float, dict[str, float], dict[str, int]]:
        alarms, hits, used = 0, dict.fromkeys(keys, 0), dict[str, int]()
        for _ in range(trials):
            pick = rng.integers(0, len(base), design.most)
            b = [{k: base[i].get(k, math.nan) for k in keys} for i in pick]
            c = []
            for i in pick:
                row = {k: cur[i].get(k, math.nan) for k in keys}
                for key, r in factor.items():
                    higher = METRICS[key.rpartition(".")[2]].higher_is_better
                    row[key] = row[key] / r if higher else row[key] * r
                c.append(row)
            found, pairs = noise.sequential_ab(side(b), side(c), keys, tol, design)
            used[str(pairs)] = used.get(str(pairs), 0) + 1
            regressed = {v.metric for v in found if v.gated and v.verdict is Verdict.REGRESSED}
            alarms += bool(regressed)
            for key in regressed:
                hits[key] += 1
        return alarms / trials, {k: v / trials for k, v in hits.items()}, used

    aa, _, aa_pairs = judge({})
    planted = {}
    for key in keys:
        _, hits, used = judge({key: AB_PLANT})
        planted[key] = {"regressed": hits[key], "pairs": used}
    return {
        "workload": workload_name,
        "sources": [f for f, _ in sources],
        "pairs_recorded": len(base),
        "trials": trials,
        "tolerances": {k: tolerance_for(k, tol) for k in keys},
        "aa_false_alarm": aa,
        "aa_pairs": aa_pairs,
        "planted": planted,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for label, platform, file, names in SOURCES:
        for name in names:
            workload = workloads.named(name)
            gate = workload.gate
            # each mode gates its own set at its own tolerances (A/B adds ab_gate, at
            # core.tolerances.AB_TOLERANCES); metrics the boots never recorded are left out
            gated = {"stored": gate, "ab": (*gate, *workload.ab_gate)}
            tols = {m: default_tolerances(platform, ab=m == "ab") for m in noise.MODES}
            tol = tols["stored"]
            boots = _boots(RESULTS / file, name)
            fitted = {
                key: noise.fit([{p["index"]: p["metrics"].get(key, math.nan) for p in b}
                                for b in boots])
                for key in gated["ab"]
                if any(key in p["metrics"] for b in boots for p in b)
            }  # fmt: skip
            scales = {k: fitted[k] for k in gate if k in fitted}
            print(f"{label} {name}: fitted {len(boots)} boots", flush=True)
            # A/B: refitted to the resident A/A pairs where there are some (today's
            # definitions, both servers of one machine), else the boots' fit
            real = next((src for lab, n, src in AB_REAL if (lab, n) == (label, name)), None)
            resident = resident_scales(real, gated["ab"]) if real else {}
            by_mode = {
                "stored": {k: fitted[k] for k in gated["stored"] if k in fitted},
                "ab": {k: resident.get(k, fitted.get(k)) for k in gated["ab"]
                       if k in resident or k in fitted},
            }  # fmt: skip
            oc = {
                mode: noise.operating_characteristic(
                    by_mode[mode], tols[mode], RATIOS, mode, args.passes, 2, args.trials,
                    args.seed,
                )
                for mode in noise.MODES
            }  # fmt: skip
            n_passes = min(len(b) for b in boots)
            rows.append({
                "platform": label, "workload": name, "file": file, "boots": len(boots),
                "passes_per_boot": n_passes,
                "scales": {k: s.__dict__ for k, s in scales.items()},
                "ab_scales": {k: {**s.__dict__, "from": "resident A/A pairs" if k in resident
                                  else "boots"} for k, s in by_mode["ab"].items()},
                "tolerances": {
                    m: {k: tolerance_for(k, tols[m]) for k in gated[m] if k in fitted}
                    for m in noise.MODES
                },
                "oc": {mode: {k: {str(r): dict(c) for r, c in by.items()}
                              for k, by in found.items()}
                       for mode, found in oc.items()},
                "check": {
                    "real": real_checks(boots, tuple(scales), tol, platform),
                    "model": model_checks(scales, tol, n_passes, args.trials, args.seed),
                },
            })  # fmt: skip
    real_ab = [
        {"platform": label, **ab_real(name, sources, args.trials, args.seed)}
        for label, name, sources in AB_REAL
    ]
    named = scenarios.run(args.scenario_trials, args.seed)
    return {"trials": args.trials, "passes": args.passes, "ratios": RATIOS, "rows": rows,
            "ab_real": real_ab, "scenarios": named}  # fmt: skip


def _p(counts: Mapping[str, int], verdict: str, trials: int) -> float:
    return counts.get(verdict, 0) / trials


def markdown(data: Mapping[str, Any]) -> list[str]:
    trials, ratios = data["trials"], data["ratios"]
    out = [
        f"Detection by true ratio: P(regressed) over {trials} simulated comparisons a cell, "
        f"{data['passes']} passes a side, the platform's default tolerances, Holm over the "
        "workload's gated metrics; r is how many times worse the metric truly got (latency "
        "x r, throughput / r). `stored`: a 2-boot baseline against a new boot; `ab`: A/B on "
        "one machine. Last column: P(unchanged) at r = 1.",
        "",
        "| platform | mode | metric | tolerance | "
        + " | ".join(f"x{r:g}" for r in ratios)
        + " | unchanged at x1 |",
        "|---" * (len(ratios) + 5) + "|",
    ]
    for row in data["rows"]:
        for mode, found in row["oc"].items():
            for key, by in found.items():
                if key == "any regressed" or key.endswith(" pairs"):
                    continue
                cells = [f"{_p(by[str(r)], 'regressed', trials):.0%}" for r in ratios]
                tol = row["tolerances"][mode][key]
                out.append(
                    f"| {row['platform']} | {mode} | {row['workload']}: {key} | {tol:.0%} | "
                    + " | ".join(cells)
                    + f" | {_p(by['1.0'], 'unchanged', trials):.0%} |"
                )
    out += [
        "",
        "False alarms (any gated metric regressed at r = 1, per test):",
        "",
        "| platform | workload | stored | ab |",
        "|---|---|---|---|",
    ]
    for row in data["rows"]:
        fa = [_p(row["oc"][m]["any regressed"]["1.0"], "True", trials) for m in ("stored", "ab")]
        out.append(f"| {row['platform']} | {row['workload']} | {fa[0]:.1%} | {fa[1]:.1%} |")
    for label in sorted({r["platform"] for r in data["rows"]}):
        clean = [1 - _p(r["oc"]["ab"]["any regressed"]["1.0"], "True", trials)
                 for r in data["rows"] if r["platform"] == label]  # fmt: skip
        out.append(
            f"\n{label}, A/B, a run of these {len(clean)} workloads' tests: P(any false "
            f"regressed) = {1 - math.prod(clean):.1%} (independent tests)."
        )
    out += [
        "",
        f"The model against the real boots it was fitted to (each boot against two others, "
        f"all their common passes; injected: the metric made x{INJECTED:g} worse):",
        "",
        "| platform | workload | boots x passes | comparisons | A/A false alarm: real / model "
        "| detection at the injected x1.2: real / model |",
        "|---|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        real, model = row["check"]["real"], row["check"]["model"]
        det = "; ".join(
            f"{k} {real['detect_injected'][k]:.0%} / {model['detect_injected'][k]:.0%}"
            for k in real["detect_injected"]
        )
        out.append(
            f"| {row['platform']} | {row['workload']} | {row['boots']} x {row['passes_per_boot']} "
            f"| {real['comparisons']} | {real['aa_false_alarm']:.1%} / "
            f"{model['aa_false_alarm']:.1%} | {det} |"
        )
    out += [
        "",
        f"The A/B decision on the H200's real resident A/A pairs (drawn with replacement, "
        f"{sequential.Design().first} pairs then up to {sequential.Design().most}, alpha "
        f"{sequential.Design().alpha:.0%} per test): false alarms as recorded, and how often a "
        f"metric made x{AB_PLANT:g} worse on the candidate side was called regressed "
        "(pairs used: how many decisions stopped at "
        + " / ".join(str(n) for n in sequential.Design().pair_counts())
        + "):",
        "",
        "| platform | workload | recorded pairs | trials | A/A: any gated metric regressed "
        f"| A/A pairs used | metric | tolerance | x{AB_PLANT:g}: regressed, real / model "
        "| pairs used |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for real in data.get("ab_real", []):
        for i, (key, got) in enumerate(real["planted"].items()):
            head = (
                f"| {real['platform']} | {real['workload']} | {real['pairs_recorded']} | "
                f"{real['trials']} | {real['aa_false_alarm']:.1%} | {_used(real['aa_pairs'])} |"
                if i == 0 else "| | | | | | |"
            )  # fmt: skip
            row = next((r for r in data["rows"] if (r["platform"], r["workload"])
                        == (real["platform"], real["workload"])), None)  # fmt: skip
            model = row["oc"]["ab"].get(key, {}).get(str(AB_PLANT)) if row else None
            predicted = f"{_p(model, 'regressed', trials):.0%}" if model else "-"
            out.append(
                f"{head} {key} | {real['tolerances'][key]:.0%} | {got['regressed']:.0%} / "
                f"{predicted} | {_used(got['pairs'])} |"
            )
    out += ["", "A/B noise (pass-to-pass sd on the log scale, and where it was fitted):", ""]
    for row in data["rows"]:
        ab = "; ".join(
            f"{k} {s['residual']:.4f} ({s['from']})" for k, s in row["ab_scales"].items()
        )
        out.append(f"- {row['platform']} {row['workload']}: {ab}")
    out += ["", "Fitted scales (log-scale sd: boot / schedule / pass-to-pass):", ""]
    for row in data["rows"]:
        scales = "; ".join(
            f"{k} {s['boot']:.3f} / {s['schedule']:.3f} / {s['residual']:.3f}"
            for k, s in row["scales"].items()
        )
        out.append(f"- {row['platform']} {row['workload']} ({row['file']}): {scales}")
    return out


def wilson(hits: float, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a rate of ``hits`` in ``trials``."""
    p = hits / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials**2)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def scenario_lines(data: Mapping[str, Any]) -> list[str]:
    """The named scenarios (bench/scenarios.py): each rate with its trials, its 95%
    interval, the bound it must keep, and the pairs its decisions used."""
    out = [
        "",
        "Named scenarios (`bench/scenarios.py`): `power` is P(the test fails) with the "
        "regression named, `false_alarm` P(an A/A test fails), or of a run of the suite "
        "for `suite-*`; each through the real verdict with the allowance the gate gives it "
        "and the A/B looks as `measure.run_ab` takes them, at a single-call test's share of "
        "the 1% test budget (0.9%).",
        "",
        "| scenario | kind | rate | trials | 95% interval | bound | holds | pairs used |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in data.get("scenarios", []):
        low, high = wilson(row["rate"] * row["trials"], row["trials"])
        sign = ">=" if row["kind"] == "power" else "<="
        used = ", ".join(f"{k}: {v}" for k, v in row.get("pairs_used", {}).items()) or "-"
        out.append(
            f"| {row['name']} | {row['kind']} | {row['rate']:.1%} | {row['trials']} | "
            f"{low:.1%}..{high:.1%} | {sign} {row['bound']:.1%} | "
            f"{'yes' if row['holds'] else '**no**'} | {used} |"
        )
    return out


def _used(counts: Mapping[str, int]) -> str:
    return " / ".join(str(counts.get(str(n), 0)) for n in sequential.Design().pair_counts())


def plot(data: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    platforms = sorted({r["platform"] for r in data["rows"]}, reverse=True)
    fig, axes = plt.subplots(len(platforms), 2, figsize=(12, 4.2 * len(platforms)), squeeze=False)
    ratios = data["ratios"]
    for i, platform in enumerate(platforms):
        for j, mode in enumerate(noise.MODES):
            ax = axes[i][j]
            for row in (r for r in data["rows"] if r["platform"] == platform):
                for key, by in row["oc"][mode].items():
                    if key == "any regressed" or key.endswith(" pairs"):
                        continue
                    ys = [_p(by[str(r)], "regressed", data["trials"]) for r in ratios]
                    ax.plot(ratios, ys, marker="o", label=f"{row['workload']}: {key}")
            ax.axhline(0.05, color="grey", linestyle=":", linewidth=1)
            where = "stored baseline (2 boots)" if mode == "stored" else "A/B"
            ax.set_title(f"{platform}, {where}")
            ax.set_xlabel("true ratio (x worse)")
            ax.set_ylabel("P(regressed)")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"Detection by true ratio ({data['passes']} passes a side, default tolerances)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario-trials", type=int, default=1000)
    args = parser.parse_args()
    started = time.time()
    data = run(args)
    data["seconds"] = round(time.time() - started)
    out = RESULTS / "operating_characteristic"
    out.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    lines = markdown(data) + scenario_lines(data)
    head = f"`.venv/bin/python bench/operating_characteristic.py` ({data['seconds']} s)"
    out.with_suffix(".md").write_text("\n".join([head, "", *lines]) + "\n")
    plot(data, out.with_suffix(".png"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
