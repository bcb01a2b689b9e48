"""A run split over CI jobs: ``--vllm-shard=K/N`` runs a stable share of the perf tests,
and ``vllm-perf merge`` joins the shards' ``--vllm-json`` reports into one report, one
summary and one exit status, on the fake server (the mechanism; what a shard measures
is any run's)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_vllm_perf.core.report import Report
from pytest_vllm_perf.store import reports as reports_io
from pytest_vllm_perf.tools import merge
from tests.plugin.conftest import PERF_TEST
from tests.plugin.test_gate import SLOWDOWN, run
from tests.shards import shard_names

TEST = PERF_TEST.replace("def test_perf(", "def NAME(")


def test_two_shards_merge_into_one_report_and_a_regression_in_either_fails(
    perf_project, fake_vllm, capsys
):
    """Baselines saved in one whole run; then each shard runs its one test, both shards'
    reports count the run's two perf tests (the budget is split over every shard), and
    the merge holds both results and passes. The second shard rerun on a server 8x
    slower regresses, and the merge of the first shard with it fails naming that test;
    a shard left out fails the merge; a shard given twice is an error. Broken on
    purpose (every test in every shard), the shards each hold two results and the
    merge refuses them as one result twice."""
    first, second = shard_names("test_shards.py")
    perf_project.makepyfile(test_shards=TEST.replace("NAME", first) + TEST.replace("NAME", second))
    (perf_project.path / "profiles" / "p.yaml").write_text("extends: default\n")
    run(perf_project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=2)
    reports = []
    for k, name in ((1, first), (2, second)):
        out = perf_project.path / f"shard{k}.json"
        shard = run(perf_project, fake_vllm, f"--vllm-shard={k}/2", f"--vllm-json={out}")
        outcomes = shard.parseoutcomes()
        assert outcomes.get("deselected") == 1, shard.stdout.str()
        doc = json.loads(out.read_text())
        assert [r["test"] for r in doc["results"]] == [f"test_shards.py::{name}"]
        assert doc["run"]["shard"] == f"{k}/2" and doc["run"]["stored_tests"] == 2
        reports.append(out)
    capsys.readouterr()
    merged = perf_project.path / "merged.json"
    args = [str(r) for r in reports]
    status = merge.main([*args, "--json", str(merged), "--markdown", "merged.md"])
    printed = capsys.readouterr().out
    doc = json.loads(merged.read_text())
    assert len(doc["results"]) == 2 and doc["run"]["merged"] == args
    regressed = any(r.failures() for r in Report.from_json(doc).results)  # an A/A may say so
    assert status == (1 if regressed else 0), printed
    assert "vLLM perf PASS: 2 results" in printed or regressed, printed
    fake_vllm.delay_s *= SLOWDOWN
    slower = perf_project.path / "shard2-slower.json"
    run(perf_project, fake_vllm, "--vllm-shard=2/2", f"--vllm-json={slower}").assert_outcomes(
        failed=1, deselected=1
    )
    capsys.readouterr()
    assert merge.main([args[0], str(slower)]) == 1
    printed = capsys.readouterr().out
    # shard 1 is the A/A above: on a loaded machine it may fail too (1 of 6 loaded runs
    # of the tiers, bench/results/cpu/tiers-loaded-before-fix.txt), and is then named first
    first_failed = any(r.failures() for r in reports_io.read_report(Path(args[0])).results)
    headline = printed.rstrip("\n").splitlines()[-1]
    assert headline.startswith(f"vLLM perf FAIL: {1 + first_failed} of 2 results: "), headline
    assert f"test_shards.py::{second} [p] " in headline, headline
    assert merge.main([args[0]]) == 1
    assert "shard 2/2 missing" in capsys.readouterr().out
    assert merge.main([args[0], args[0]]) == 2
    assert "shard 1/2 is also" in capsys.readouterr().err


def test_a_shard_is_k_of_n(perf_project, fake_vllm):
    perf_project.makepyfile(TEST.replace("NAME", "test_perf"))
    for bad in ("3/2", "0/2", "1-2"):
        result = run(perf_project, fake_vllm, f"--vllm-shard={bad}")
        assert result.ret == 4, bad
        result.stderr.fnmatch_lines([f"*--vllm-shard: expected K/N with 1 <= K <= N*{bad}*"])


def test_two_xdist_workers_give_one_summary_and_one_report(perf_project, fake_vllm):
    """``pytest -n 2``: each worker measures its own test (xdist's load scheduling) and
    sends its results to the controller, which prints one summary holding both, one
    PASS/FAIL line, and writes one JSON report and one Markdown summary with both
    results. Before, the controller had no outcomes (they lived in the workers) and
    printed no summary, and the workers would have written the same report file.
    Broken on purpose (the workers' reports not sent), there is no summary; (each
    worker's progress written to its own terminal), no progress line names a worker."""
    first, second = shard_names("test_shards.py")
    perf_project.makepyfile(test_shards=TEST.replace("NAME", first) + TEST.replace("NAME", second))
    (perf_project.path / "profiles" / "p.yaml").write_text("extends: default\n")
    result = perf_project.runpytest_subprocess(
        f"--vllm-url={fake_vllm.url}", "--vllm-profile=p", "-p", "no:cacheprovider",
        "--vllm-repeat=2", "-n", "2", "--vllm-json=all.json", "--vllm-markdown=all.md",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert out.count("vLLM perf summary") == 1, out
    # each worker's progress, on the controller's terminal with the worker's id (xdist
    # keeps a worker's own output: before, a run printed nothing until its summary)
    for worker in ("gw0", "gw1"):
        assert f"[vllm-perf {worker}] --vllm-url: measuring {fake_vllm.url}" in out, out
    assert f"test_shards.py::{first}" in out and f"test_shards.py::{second}" in out
    assert "vLLM perf PASS: 2 results" in out, out
    doc = json.loads((perf_project.path / "all.json").read_text())
    assert sorted(r["test"] for r in doc["results"]) == sorted(
        f"test_shards.py::{n}" for n in (first, second)
    )
    assert sorted(doc["run"]["merged"]) == ["gw0", "gw1"] and doc["run"]["stored_tests"] == 2
    assert "vLLM perf PASS: 2 results" in (perf_project.path / "all.md").read_text()
    # the session's own columns, each worker's figures in its row (the merged table once
    # had only test, profile and verdict)
    header = next(line for line in out.splitlines() if line.startswith("test "))
    assert header.split()[:6] == ["test", "profile", "n", "failed", "TTFT", "p50"], header
    by_test = {r["test"]: r["metrics"] for r in doc["results"]}
    for name in (first, second):
        # its first row is the summary's, the cost table's comes after
        row = next(line for line in out.splitlines() if line.startswith(f"test_shards.py::{name} "))
        assert row.split()[2] == str(int(by_test[f"test_shards.py::{name}"]["completed"])), row
    assert (
        "| test | profile | n | failed | TTFT p50 |" in (perf_project.path / "all.md").read_text()
    )
    # what each test cost, merged like the rest: its load seconds, and why no energy
    assert "what each test cost:" in out and "energy not measured: an external server" in out
    for r in doc["results"]:
        assert r["cost"]["boot_s"] == 0 and r["cost"]["load_s"] > 0, r["cost"]
    assert "### What each test cost" in (perf_project.path / "all.md").read_text()


def test_a_run_without_workers_relays_nothing(pytester, monkeypatch):
    """The relay of workers' progress starts only where workers are to come: with
    pytest-xdist installed and no -n, or -n 0, the session is left alone (broken on
    purpose, the relay started whenever xdist was installed: its folder named here)."""
    pytester.makepyfile(
        """
        import os

        def test_env():
            assert "VLLM_PERF_PROGRESS_DIR" not in os.environ
        """
    )
    # CI's own run is a pytest-xdist controller whose relay this process inherits
    monkeypatch.delenv("VLLM_PERF_PROGRESS_DIR", raising=False)
    for args in ((), ("-n", "0")):
        pytester.runpytest_subprocess("-p", "no:cacheprovider", *args).assert_outcomes(passed=1)
