"""NVML's energy per pass against nvidia-smi's power readings over the same span.

A ``--vllm-json`` report gives each measured pass its start (Unix time, ``started_unix``),
the seconds its counters cover (``elapsed_s``) and the GPUs' energy over them from NVML's
energy counter (``energy_j`` in its metrics). ``nvidia-smi --query-gpu=timestamp,
power.draw.instant,power.draw --format=csv,noheader,nounits -lms 100`` samples the
GPU's power beside the run; this integrates each power column over each pass's span
(trapezoids between the samples inside it) and prints both and their ratio, per pass
and over all passes. One GPU: the samples of every GPU of a multi-GPU query are summed
per timestamp.

    python bench/energy_check.py REPORT.json POWER.csv [--fields timestamp,power.draw]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
from collections.abc import Sequence
from pathlib import Path


def samples(path: Path, fields: Sequence[str]) -> dict[str, list[tuple[float, float]]]:
    """Each power column as (Unix time, watts), summed over GPUs at one timestamp."""
    by_time: dict[float, list[float]] = {}
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            continue
        try:
            # nvidia-smi prints local time, as datetime.timestamp() reads it
            at = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            watts = [float(x) for x in parts[1:]]
        except ValueError:
            continue  # "[N/A]" or a header
        found = by_time.setdefault(at, [0.0] * len(watts))
        by_time[at] = [a + b for a, b in zip(found, watts, strict=True)]
    ordered = sorted(by_time.items())
    return {f: [(t, w[i]) for t, w in ordered] for i, f in enumerate(fields[1:])}


def integral(series: list[tuple[float, float]], begin: float, end: float) -> float:
    """Joules over [begin, end]: trapezoids, the series held flat past its ends."""
    inside = [(t, w) for t, w in series if begin < t < end]
    before = [(t, w) for t, w in series if t <= begin]
    after = [(t, w) for t, w in series if t >= end]
    if not inside and not (before and after):
        return math.nan
    points = [(begin, (before or inside)[-1 if before else 0][1]), *inside]
    points.append((end, (after or inside)[0 if after else -1][1]))
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(points))


def main(argv: Sequence[str] | None = None) -> int:
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("power")
    parser.add_argument("--fields", default="timestamp,power.draw.instant,power.draw")
    args = parser.parse_args(argv)
    fields = args.fields.split(",")
    series = samples(Path(args.power), fields)
    print(f"{sum(len(s) for s in series.values()) // max(1, len(series))} samples a column")
    report = json.loads(Path(args.report).read_text())
    totals: dict[str, list[float]] = {"nvml": [], **{f: [] for f in series}}
    header = f"{'test':42s} {'pass':>4s} {'s':>6s} {'NVML J':>9s}" + "".join(
        f" {f + ' J':>20s} {'NVML/' + f:>22s}" for f in series
    )
    print(header)
    for result in report["results"]:
        for side, passes in (("", result["passes"]), ("base ", result.get("base_passes", []))):
            for p in passes:
                nvml, begin = p["metrics"].get("energy_j"), p.get("started_unix")
                if not isinstance(nvml, float) or not isinstance(begin, float):
                    continue
                end = begin + p["elapsed_s"]
                row = f"{side + result['test'][-42 + len(side) :]:42s} {p['index'] + 1:4d} "
                row += f"{p['elapsed_s']:6.1f} {nvml:9.0f}"
                totals["nvml"].append(nvml)
                for f, s in series.items():
                    joules = integral(s, begin, end)
                    totals[f].append(joules)
                    row += f" {joules:20.0f} {nvml / joules:22.4f}"
                print(row)
    if totals["nvml"]:
        nvml = math.fsum(totals["nvml"])
        line = f"{'all passes':42s} {len(totals['nvml']):4d} {'':6s} {nvml:9.0f}"
        for f in series:
            joules = math.fsum(totals[f])
            line += f" {joules:20.0f} {nvml / joules:22.4f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
