"""Per-pass noise of the client's and the engine's own figures in A/B ``--vllm-json`` reports.

For each test and metric: the sd over passes of log(value) on each side, and the sd of
the paired log differences (pass k of the candidate less pass k of the base), which is
what the A/B verdict's interval is built from; the ratio is exp(mean paired difference).
Where the client's mean ITL and the engine's (``server_itl_mean_ms``, its histograms'
sums over counts) are about as noisy, the noise is the engine's, not the client's.

    python bench/pass_noise.py bench/results/h200/plant-l33/l33/ab.json ... [> FILE]
    python bench/pass_noise.py --keys chat.p99_itl_ms,chat.p99_tpot_ms REPORT ...
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence

import numpy as np

# the report's per-pass keys (vLLM bench names), client's first, then the engine's
KEYS = (
    "median_itl_ms",
    "mean_itl_ms",
    "server_itl_mean_ms",
    "mean_tpot_ms",
    "server_tpot_mean_ms",
    "output_throughput",
    "mean_ttft_ms",
    "server_ttft_mean_ms",
)


def rows(report: dict, keys: Sequence[str] = KEYS) -> list[str]:
    out = []
    for result in report["results"]:
        base = [p["metrics"] for p in result.get("base_passes", ())]
        cur = [p["metrics"] for p in result["passes"]]
        if not base:
            continue  # a stored-baseline report: no pairs
        out.append(f"{result['test']}")
        for key in keys:
            if key not in base[0] or key not in cur[0]:
                continue
            a = np.log([m[key] for m in base])
            b = np.log([m[key] for m in cur])
            n = min(len(a), len(b))
            diff = b[:n] - a[:n]
            out.append(
                f"  {key:22s} n={n:2d}  sd base {a.std(ddof=1):.4f}  sd candidate "
                f"{b.std(ddof=1):.4f}  paired sd {diff.std(ddof=1):.4f}  "
                f"ratio x{math.exp(diff.mean()):.4f}"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", help="A/B --vllm-json reports")
    parser.add_argument(
        "--keys",
        default=",".join(KEYS),
        help="per-pass keys, comma separated (the report's vLLM bench names) [%(default)s]",
    )
    args = parser.parse_args(argv)
    keys = tuple(k for k in args.keys.split(",") if k)
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        print(f"== {path}")
        print("\n".join(rows(report, keys)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
