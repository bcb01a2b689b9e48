"""The typed report (``core.report``): what ``--vllm-json`` writes reads back into the
one document every view reads, and writes out again unchanged."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.records import (
    Check,
    GateResult,
    GateStatus,
    MetricVerdict,
    Verdict,
)
from pytest_vllm_perf.core.report import Headline, Report
from pytest_vllm_perf.report import document, formats
from pytest_vllm_perf.report.view import View
from tests.unit.test_report_text import _decode_outcome

ROOT = Path(__file__).resolve().parents[2]


def _outcomes():
    """A stored comparison with a regression and a rule's verdict, a missed threshold,
    and an A/B result with its base side's passes: every optional part of a result."""
    rule = MetricVerdict("itl_p50_ms", 5, 5, math.nan, math.nan, math.nan, 0.3,
                         Verdict.REGRESSED, "streamed in bursts")  # fmt: skip
    slower = MetricVerdict("output_throughput", 100, 36.1, 0.361, 0.3, 0.4, 0.15,
                           Verdict.REGRESSED, "8 pairs", 0.001, 0.002, True, 0.0375, 0.01,
                           (0.31, 0.39))  # fmt: skip
    stored = GateResult(GateStatus.COMPARED, Path("b.json"), (rule, slower), ("vllm 1 -> 2",), "n")
    base = _decode_outcome(0.1)
    missed = (Check("max_ttft_p99_ms", "ttft_p99_ms", 1, 5),)
    first = dataclasses.replace(base, gate=stored, checks=missed)
    side = GateResult(GateStatus.AB, Path("the A/B base side 'p'"), ())
    ab = dataclasses.replace(base, test_id="t.py::test_ab", base=base.result, gate=side)
    return [first, ab]


def test_a_written_report_reads_back_and_writes_out_unchanged(tmp_path):
    """``Report.from_json(doc).to_json() == doc`` for what the session writes, down to the
    file's text. Broken on purpose (a verdict's bounds or the base side's passes left
    out of ``to_json``), the equality fails."""
    outcomes = _outcomes()
    doc = document.to_json(outcomes, {"ab_tests": 1, "shard": None})
    typed = Report.from_json(doc)
    assert typed.to_json() == doc
    text = json.dumps(doc, indent=1, sort_keys=True, default=str)
    path = tmp_path / "r.json"
    formats.write(View(typed, Headline(False, "")), {"vllm_json": path}, None)
    assert path.read_text(encoding="utf-8").rstrip("\n") == text
    first, ab = typed.results
    assert first.failures() == [
        "output_throughput x0.361",
        "itl_p50_ms (by rule)",
        "max_ttft_p99_ms (SLO)",
    ]
    assert first.baseline is not None and first.baseline.verdicts[1].bounds == (0.31, 0.39)
    assert ab.base_passes is not None and len(ab.base_passes) == 8 and ab.failures() == []


def test_every_committed_report_reads_and_only_gains_the_keys_it_lacked():
    """Reports written by earlier versions (no verdict bounds, no cost, the first ones no
    passes) read into the same document; writing one back adds those keys and changes
    nothing it had."""
    found = 0
    for path in sorted((ROOT / "bench/results").rglob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(doc, dict) and isinstance(doc.get("results"), list)):
            continue
        found += 1
        again = Report.from_json(doc, str(path)).to_json()
        for old, new in zip(doc["results"], again["results"], strict=True):
            for key, value in old.items():
                if key == "baseline" and value:
                    for v_old, v_new in zip(value["verdicts"], new[key]["verdicts"], strict=True):
                        assert {k: v_new[k] for k in v_old} == v_old, path
                    assert {k: new[key][k] for k in value if k != "verdicts"} == {
                        k: v for k, v in value.items() if k != "verdicts"
                    }, path
                else:
                    assert new[key] == value, (path, key)
    assert found >= 40


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: r["baseline"]["verdicts"][0].update(verdict="regresed"),
         "result 0.baseline.verdicts[0]: verdict 'regresed'"),
        (lambda r: r.pop("test"), "result 0: no 'test'"),
        (lambda r: r["thresholds"][0].update(passed="no"), "result 0.thresholds: 'passed' is str"),
        (lambda r: r["metrics"].update(ttft_p50_ms=[1]), "result 0.metrics.ttft_p50_ms: [1]"),
    ],
)  # fmt: skip
def test_a_report_of_another_shape_is_refused_naming_the_key(change, named):
    """A view never meets a half-read document: the reader names the file and key."""
    doc = document.to_json(_outcomes())
    change(doc["results"][0])
    with pytest.raises(BaselineError) as found:
        Report.from_json(doc, "r.json")
    assert str(found.value).startswith(f"r.json: {named}"), found.value
