"""Whether the engine's decode step or the API server paces the CPU engine's stream.

One server of the default profile on an embedded preset, the decode workload (8 users,
64 tokens, 6 s passes), 6 passes: per pass, whether the stream came in bursts
(``compute.bursts``: median gap under 0.2 ms), the median gap, TPOT and throughput.

    .venv/bin/python bench/cpu_step_pace.py tiny small

writes bench/results/cpu/step_pace.json. The A/B figures in
bench/results/cpu/burst_presets.md come from the example suite itself (commands
there): bursts appear with two servers up, not with one.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.config.profiles import load
from pytest_vllm_perf.measure import measure
from pytest_vllm_perf.metrics import compute
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "cpu" / "step_pace.json"


def run(preset: str) -> list[dict[str, float | bool]]:
    pool = ServerPool(PoolConfig(Path(tempfile.mkdtemp()), preset=preset), print)
    try:
        handle = pool.get(load("default", REPO / "profiles"))
        decode = workloads.named("decode").override(
            {"duration_s": 6, "chat": {"users": 8, "prompt_tokens": 64, "output_tokens": 64}}
        )
        rows = []
        for p in measure(handle, decode, 6).passes:
            m = compute.pass_metrics(decode, p)
            gaps = [x for r in p.records for x in r.itl]
            rows.append({
                "bursty": bool(compute.bursts(decode, p)),
                "median_gap_ms": float(np.median(gaps)) * 1000,
                "tpot_mean_ms": m["tpot_mean_ms"],
                "output_throughput": m["output_throughput"],
            })  # fmt: skip
        return rows
    finally:
        pool.stop()


def main(presets: list[str]) -> None:
    found = json.loads(OUT.read_text()) if OUT.exists() else {}
    for preset in presets:
        found[preset] = run(preset)
        print(preset, json.dumps(found[preset]))
    OUT.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:] or ["tiny", "small"])
