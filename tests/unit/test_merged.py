"""Reports joined by ``vllm-perf merge`` (and the ``pytest -n N`` controller): a result
given twice is refused, and a missed threshold in any of them fails the merged run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.report import Report
from pytest_vllm_perf.report import merged
from pytest_vllm_perf.tools import merge as merge_command

REPORT = Path(__file__).parents[2] / "bench/results/h200/ab-modes-aa/resident/ab.json"


def report() -> dict:
    doc = json.loads(REPORT.read_text(encoding="utf-8"))
    doc["run"] = {"ab_tests": 2, "stored_tests": 0, "ab_run_alpha": 0.05, "stored_run_alpha": 0.05}
    return doc


def test_the_same_report_twice_is_refused_without_shards(tmp_path):
    """Two reports of runs without --vllm-shard, or one report given twice, were merged
    with every result counted twice (seen failing with the duplicate check dropped)."""
    doc = report()
    with pytest.raises(BaselineError, match=r"is also in a\.json"):
        merged.merge([("a.json", Report.from_json(doc)), ("b.json", Report.from_json(doc))])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert merge_command.main([str(path), str(path)]) == 2


def test_a_missed_threshold_fails_the_merged_run(tmp_path, capsys):
    """A shard whose test missed its SLO: the merged line said PASS and the merge exited 0
    where only its verdicts were read (seen failing with SLOs left out)."""
    doc = report()
    missed = doc["results"][0]
    missed["thresholds"][1] = {**missed["thresholds"][1], "passed": False}
    both, missing = merged.merge([("a.json", Report.from_json(doc))])
    _, line = merged.summary(both, missing)
    assert line.failed and line.text.startswith("vLLM perf FAIL: 1 of 2 results: "), line
    assert "itl_p99_ms (SLO)" in line.text
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert merge_command.main([str(path)]) == 1
    assert "FAIL" in capsys.readouterr().out
