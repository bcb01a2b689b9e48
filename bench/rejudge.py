"""Recorded A/B runs judged again under today's gate: each workload's gated metrics
(``gate`` and ``ab_gate``), the A/B tolerances and the sequential decision of
``measure.run_ab`` (looks at 8, 12, 16 pairs), on the pairs as they were recorded.

What a rule change would have made of real runs: the H200's planted regressions
(``plant*/l34``: 34 layers for 32, about x1.055 a decode step; ``plant-l33/l33``: x1.03)
must come out ``regressed``, its A/A runs must not.

    python bench/rejudge.py bench/results/h200/plant-warm/l34/ab.json ... [> FILE]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import noise  # bench/noise.py, beside this script

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core.registry import default_tolerances, tolerance_for
from pytest_vllm_perf.core.report import ResultEntry
from pytest_vllm_perf.store import reports
from pytest_vllm_perf.verdict import compare, sequential


def judge(result: dict) -> list[str]:
    name = result["workload"]["name"]
    workload = workloads.named(name)
    keys = tuple(dict.fromkeys((*workload.gate, *workload.ab_gate)))
    tol = default_tolerances("cuda", ab=True)
    entry = ResultEntry.from_json(result, str(result.get("test")))
    b, c = reports.report_passes(entry.base_passes or ()), reports.report_passes(entry.passes)
    by_index = dict(zip(b.indices, b.metrics, strict=True))
    pairs = [(by_index[i], m) for i, m in zip(c.indices, c.metrics, strict=True) if i in by_index]

    def side(rows: Sequence[dict]) -> compare.Passes:
        return compare.Passes(tuple(rows), tuple(range(len(rows))), (8.0,) * len(rows))

    design = sequential.Design(most=max(8, len(pairs)))
    found, used = noise.sequential_ab(
        side([dict(p[0]) for p in pairs]), side([dict(p[1]) for p in pairs]), keys, tol, design
    )
    out = [f"{result['test']} ({name}): {used} of {len(pairs)} recorded pairs"]
    for v in found:
        if v.metric in keys:
            out.append(
                f"  {v.metric:20s} x{v.ratio:.3f} (x{v.low:.3f}..x{v.high:.3f}), tolerance "
                f"{tolerance_for(v.metric, tol):.0%}: {v.verdict}"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", help="A/B --vllm-json reports")
    args = parser.parse_args(argv)
    for path in args.reports:
        print(f"== {path}")
        for result in json.loads(Path(path).read_text())["results"]:
            if result.get("base_passes") and result["workload"]["name"] in workloads.NAMED:
                print("\n".join(judge(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
