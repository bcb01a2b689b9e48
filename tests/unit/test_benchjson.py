"""The pytest-benchmark export: two committed H200 reports written in its format are
read by ``pytest-benchmark compare`` without error, and the figures it shows are the
passes' own (latencies in seconds, a throughput as its inverse, so ``ops`` is the
throughput)."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_vllm_perf import __main__ as command

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ("bench/results/h200/plant-warm/aa/ab.json", "bench/results/h200/plant-warm/l34/ab.json")


def export(tmp_path: Path, report: str, name: str) -> Path:
    out = tmp_path / name
    assert command.main(["benchmark-json", str(ROOT / report), "--out", str(out)]) == 0
    return out


def test_pytest_benchmark_compare_reads_two_exported_runs(tmp_path):
    first, second = (
        export(tmp_path, REPORTS[0], "0001_aa.json"),
        export(tmp_path, REPORTS[1], "0002_l34.json"),
    )
    # beside the venv (make setup), so that its options stay out of every --help
    beside = Path(sys.prefix) / "pytest-benchmark"
    assert (beside / "pytest_benchmark").is_dir(), "make setup installs pytest-benchmark there"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(first), str(second),
         "--columns=min,median,max,ops,rounds"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(beside)},
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-2000:]
    assert "Failed to load" not in out, out[-2000:]
    for name in ("itl_p50_ms[plant]", "output_throughput[plant]", "chat.itl_p50_ms[plant]"):
        assert name in out, name
    assert "examples/test_interference.py::test_interference [plant]" in out


def test_the_exported_stats_are_the_passes_own(tmp_path):
    doc = json.loads(export(tmp_path, REPORTS[1], "l34.json").read_text())
    report = json.loads((ROOT / REPORTS[1]).read_text())
    decode = next(r for r in report["results"] if r["test"].endswith("test_decode"))
    by_name = {b["fullname"]: b for b in doc["benchmarks"]}
    itl = by_name["examples/test_decode.py::test_decode::itl_p50_ms[plant]"]
    passes = [p["metrics"]["median_itl_ms"] for p in decode["passes"]]
    assert itl["stats"]["rounds"] == len(passes) == 8
    assert itl["stats"]["median"] == pytest.approx(statistics.median(passes) / 1000)
    assert itl["extra_info"]["unit"] == "s" and itl["extra_info"]["metric_unit"] == "ms"
    tput = by_name["examples/test_decode.py::test_decode::output_throughput[plant]"]
    values = [p["metrics"]["output_throughput"] for p in decode["passes"]]
    assert tput["stats"]["ops"] == pytest.approx(1 / statistics.mean(1 / v for v in values))
    assert tput["extra_info"]["unit"] == "s/tok" and tput["extra_info"]["inverted"] is True
    assert doc["benchmarks"] and doc["version"] and "commit_info" in doc


def test_the_stats_are_pytest_benchmarks_own(monkeypatch):
    """Every figure of a stats block as pytest-benchmark's own ``Stats`` computes it, for
    1 to 9 rounds: its quartiles are Wikipedia's method 3 for an odd count, where the
    export had taken the medians of the halves (3 passes: a q1 of the smallest pass)."""
    beside = Path(sys.prefix) / "pytest-benchmark"
    monkeypatch.syspath_prepend(str(beside))
    from pytest_benchmark.stats import Stats

    from pytest_vllm_perf.report import benchjson

    rng = random.Random(5)
    for rounds in range(1, 10):
        data = [rng.uniform(0.004, 0.006) for _ in range(rounds)]
        theirs = Stats()
        for x in data:
            theirs.update(x)
        ours = benchjson._stats(data)
        for field in Stats.fields:
            expected = getattr(theirs, field)
            if isinstance(expected, str):  # "outliers": "stddev;iqr" counts
                assert ours[field] == expected, (rounds, field)
            else:
                assert ours[field] == pytest.approx(expected, rel=1e-12), (rounds, field)
