"""The H200 checks of the corrected measurement, in one job on one GPU.

1. **Pass length.** One server (``half-gpu``), the decode load of 32 closed-loop
   users (128 tokens in, 256 out), passes of 8 s and 25 s alternated: output
   throughput over the steady window should not depend on the pass length
   (counting to the last response made 8 s passes read 13% low).
2. **Cross-check.** On the same server, ``vllm bench serve`` (vB) and the plugin's
   client in both load shapes, run by run (``pytest_vllm_perf.tools.crosscheck``): in the
   bench-serve shape TPOT and ITL p50/p90 should agree with vB's within 3%; the
   steady shape shows what staggered users do to TPOT and the ITL tail.
3. **A/B where one side queues.** ``half-gpu-seqs-16`` (16 running, the rest
   waiting) against ``half-gpu``: the plugin's A/B verdict (passes alternated,
   steady shape), and vB's output throughput on each server; the two ratios
   should agree within 5%. With ``--base-python`` (another release's interpreter)
   the base side runs that release: an upgrade's A/B, each side's vB from its own.

Writes ``crosscheck.json`` and ``crosscheck.md`` to ``--out`` after each step, so a
run stopped at the GPU time limit keeps what it finished. From the repository root,
with vLLM importable::

    python3 bench/gpu/gpu_crosscheck.py --out out/xc
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pytest_vllm_perf import measure
from pytest_vllm_perf.config import profiles
from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.report import document, text
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool
from pytest_vllm_perf.tools import crosscheck

ROOT = Path(__file__).resolve().parents[2]


def say(message: str) -> None:
    print(f"[crosscheck] {message}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--preset", default="llama-8b")
    parser.add_argument("--platform", default="cuda")
    parser.add_argument("--base", default="half-gpu")
    parser.add_argument("--candidate", default="half-gpu-seqs-16")
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--lengths", default="8,25", help="pass lengths to alternate, s")
    parser.add_argument("--length-passes", type=int, default=3, help="passes of each length")
    parser.add_argument("--xc-duration", type=float, default=15.0)
    parser.add_argument("--xc-repeat", type=int, default=3)
    parser.add_argument("--ab-duration", type=float, default=8.0)
    parser.add_argument("--ab-repeat", type=int, default=8)
    parser.add_argument("--ab-shape", default="steady", help="the A/B's load shape")
    parser.add_argument("--vb-repeat", type=int, default=3)
    parser.add_argument("--steps", default="length,crosscheck,ab")
    parser.add_argument(
        "--base-python",
        help="the base side's interpreter (another vLLM release): the A/B is then an upgrade's",
    )
    parser.add_argument("--cache-dir", default=".vllm-perf-cache")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    steps = args.steps.split(",")
    started = time.monotonic()
    data: dict[str, Any] = {"argv": sys.argv[1:]}
    lines: list[str] = []

    def emit() -> None:
        data["seconds"] = round(time.monotonic() - started, 1)
        atomic.write_text(args.out / "crosscheck.json", json.dumps(data, indent=1) + "\n")
        argv = " ".join(sys.argv[1:])
        head = f"`python3 bench/gpu/gpu_crosscheck.py {argv}` ({data['seconds']} s)"
        atomic.write_text(args.out / "crosscheck.md", "\n".join([head, "", *lines]) + "\n")

    where = profiles.search_path(ROOT / "bench" / "profiles")
    config = PoolConfig(Path(args.cache_dir), preset=args.preset, platform=args.platform,
                        boot_timeout_s=900)  # fmt: skip
    pool = ServerPool(config, say)
    load = crosscheck.Load(args.users, 128, 256, args.xc_duration)
    try:
        t = time.monotonic()
        base = pool.get(profiles.load(args.base, where), slot="base", python=args.base_python)
        data["boot_s"] = {args.base: round(time.monotonic() - t, 1)}
        if "length" in steps:
            lengths = [float(x) for x in args.lengths.split(",")]
            by_length: dict[str, list[float]] = {str(x): [] for x in lengths}
            for k in range(args.length_passes):
                for seconds in lengths if k % 2 == 0 else lengths[::-1]:
                    w = crosscheck.Load(args.users, 128, 256, seconds).workload("steady")
                    m = measure.measure(base, w, 1, say, first_index=k)
                    by_length[str(seconds)].append(m.pass_metrics[0]["output_throughput"])
                    say(f"{seconds:g} s pass: {by_length[str(seconds)][-1]:.1f} tok/s")
            med = {s: statistics.median(v) for s, v in by_length.items()}
            short, long_ = (med[str(x)] for x in (lengths[0], lengths[-1]))
            data["pass_length"] = {"throughput": by_length, "median": med,
                                   "ratio_short_long": short / long_}  # fmt: skip
            lines += ["## Output throughput by pass length (steady shape, one server)", "",
                      "| pass | passes (tok/s) | median |", "|---|---|---|"]  # fmt: skip
            lines += [f"| {s} s | {', '.join(f'{v:.0f}' for v in vals)} | {med[s]:.0f} |"
                      for s, vals in by_length.items()]  # fmt: skip
            lines += ["", f"{lengths[0]:g} s / {lengths[-1]:g} s: x{short / long_:.4f}", ""]
            emit()
        tokenizer = base.model
        if "crosscheck" in steps:
            found = crosscheck.run(base, load, tokenizer, args.xc_repeat, sys.executable)
            data["crosscheck"] = found
            lines += ["## The client against vllm bench serve, one server", "",
                      f"{args.users} users, 128 in / 256 out, {found['prompts']} prompts a vB "
                      f"run, {args.xc_repeat} runs of each, interleaved; medians over runs", "",
                      *crosscheck.table(found["runs"], "vB"), ""]  # fmt: skip
            emit()
        if "ab" in steps:
            t = time.monotonic()
            cand = pool.get(profiles.load(args.candidate, where), slot="main")
            data["boot_s"][args.candidate] = round(time.monotonic() - t, 1)
            ab_load = crosscheck.Load(args.users, 128, 256, args.ab_duration).workload(
                args.ab_shape
            )
            plan = measure.Plan.resolve("bench/gpu_crosscheck.py::ab", ab_load,
                                        args.ab_repeat, args.platform)  # fmt: skip
            outcome = measure.run_ab(plan, measure.Resident(base, cand), say)
            assert outcome.gate is not None
            verdicts = [text.describe_verdict(v) for v in outcome.gate.verdicts]
            vb: dict[str, list[float]] = {"base": [], "candidate": []}
            prompts = args.users * 8
            # each side's vB from its own release (``--base-python`` for the base side)
            pythons = {"base": args.base_python or sys.executable, "candidate": sys.executable}
            for k in range(args.vb_repeat):
                order = [("base", base), ("candidate", cand)]
                for side, handle in order if k % 2 == 0 else order[::-1]:
                    got = crosscheck.bench_serve(pythons[side], handle, tokenizer, load,
                                                 prompts, seed=k)  # fmt: skip
                    vb[side].append(got["output_throughput"])
                    say(f"vB {side}: {got['output_throughput']:.1f} tok/s")
            vb_ratio = statistics.median(vb["candidate"]) / statistics.median(vb["base"])
            ours = next(v for v in outcome.gate.verdicts if v.metric == "output_throughput")
            versions = [p.environment.vllm_version for p in (base.provenance, cand.provenance)]
            data["vllm_versions"] = {"base": versions[0], "candidate": versions[1]}
            data["ab"] = {"verdicts": verdicts, "vb_output_throughput": vb,
                          "vb_ratio": vb_ratio, "ab_ratio": ours.ratio,
                          "ab_over_vb": ours.ratio / vb_ratio,
                          "report": document.to_json([outcome])}  # fmt: skip
            lines += [f"## A/B: {args.candidate} against {args.base}, {args.ab_shape} shape", "",
                      "```",
                      outcome.gate.note, *verdicts, "```", "",
                      f"vB output throughput, {args.vb_repeat} runs a side of {prompts} "
                      f"prompts: base {', '.join(f'{x:.0f}' for x in vb['base'])}; candidate "
                      f"{', '.join(f'{x:.0f}' for x in vb['candidate'])}", "",
                      f"output throughput ratio: A/B x{ours.ratio:.3f}, vB x{vb_ratio:.3f}, "
                      f"A/B / vB x{ours.ratio / vb_ratio:.3f}", ""]  # fmt: skip
            emit()
    finally:
        pool.stop()
        emit()
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
