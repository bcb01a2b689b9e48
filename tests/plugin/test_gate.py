"""Baselines and regression verdicts through the plugin (fake server: fast and controllable).
tests/engine/test_engine.py saves and gates a baseline on the real engine; A/B runs are
tests/plugin/test_ab_gate.py's (a revision as a side, test_ab_rev.py's), baselines
that cannot gate as they stand (other hardware, release or model, an old schema)
tests/plugin/test_gate_provenance.py's, and the passes and boots a baseline holds and
the run's false-alarm budget test_gate_runs.py's."""

from __future__ import annotations

import json
import re

import pytest

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core.records import Verdict

PASSES = 6  # under the default 8, for speed
# A regression these tests plant in the fake server: every streamed token 8 times
# slower (5 ms -> 40 ms, so that a 0.5 s pass still completes its 8-token chat
# requests; at 100 ms most passes completed none and measured nothing). x4 was not
# enough on a machine at load average 5-15, where the baseline's 5 ms sleeps
# stretched so much that a 4x slowdown came out inconclusive (p=0.065 after Holm).
SLOWDOWN = 8


def run(project, fake, *args):
    return project.runpytest_inprocess(
        f"--vllm-url={fake.url}",
        "--vllm-profile=p",
        "-p",
        "no:cacheprovider",
        f"--vllm-repeat={PASSES}",
        *args,
    )


def run_ab(project, fake, monkeypatch, *args, profile="p", repeat=PASSES):
    """An A/B run whose sides (profiles resolved as for a user) both measure the fake
    server: ``--vllm-url`` cannot serve as both sides, so tests.fake_sides swaps the pool."""
    monkeypatch.setenv("FAKE_VLLM_URL", fake.url)
    return project.runpytest_inprocess(
        "-p", "tests.fake_sides", f"--vllm-profile={profile}", "-p", "no:cacheprovider",
        f"--vllm-repeat={repeat}", *args,
    )  # fmt: skip


def stored(project) -> list:
    return sorted((project.path / ".vllm-perf").rglob("*.json"))


def test_missing_baseline_is_reported_not_failed(project, fake_vllm):
    result = run(project, fake_vllm)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_perf*p*pass*no baseline*", "*no baseline at *p.json*"])


def test_require_baseline_fails_when_missing_before_any_load(project, fake_vllm):
    result = run(project, fake_vllm, "--vllm-require-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*test_perf*--vllm-require-baseline (no baseline): no baseline at*"]
    )
    assert not fake_vllm.requests  # found at collection: nothing was sent


def test_save_then_rerun_prints_a_verdict_for_every_gated_metric(project, fake_vllm):
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=1)
    [path] = stored(project)
    data = json.loads(path.read_text())
    assert (
        data["test"] == "test_save_then_rerun_prints_a_verdict_for_every_gated_metric.py::test_perf"
    )
    assert data["profile"]["name"] == "p"
    assert data["schema"] == 3
    [boot] = data["boots"]
    passes = boot["passes"]
    assert [p["index"] for p in passes] == list(range(PASSES))
    assert sum(p["metrics"]["completed"] for p in passes) == data["metrics"]["completed"]
    assert all("records" not in p for p in passes)  # compact: per-pass metrics, no raw samples
    assert path.stat().st_size < 200_000
    assert data["distribution"]["all"]["itl_ms"][5] > 0  # the median of the quantile summary
    assert boot["environment"]["hardware_class"].startswith("cpu: ")
    assert boot["environment"]["parallelism"] == {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 1,
    }
    assert boot["commit_info"] is not None and "workload_hash" in data
    assert "hf_supersecretvalue1" not in path.read_text()
    assert data["profile"]["env"]["HF_TOKEN"] == "***"
    # The rerun is judged, each gated metric printed with its verdict, whatever the
    # verdict (an unchanged one was left out). Which verdict an A/A of timed
    # fake-server passes gets is the machine's business (a busy one made x3-x4 of it);
    # the verdicts' error rates are checked on passes that time nothing
    # (tests/unit/test_compare.py, test_ab.py) and measured by bench/gate_power.py.
    # Broken on purpose (only verdicts other than unchanged printed), a quiet run's
    # unchanged metrics have no line and the check fails.
    result = run(project, fake_vllm)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, result.stdout.str()
    out = result.stdout.str()
    verdicts = "|".join(str(v) for v in Verdict)
    for metric in workloads.named("mixed").gate:
        assert re.search(rf"::test_perf \[p\] {metric}: .*\) ({verdicts})\n", out), metric


def test_a_stored_baseline_of_eight_passes_is_judged_pass_by_pass(project, fake_vllm):
    """Both runs replay the same seeded schedule, so pass k is paired with pass k (3 pairs
    or more, verdict.compare.MIN_PAIRS). Broken on purpose (stored verdicts never
    paired), the basis reads "8 vs 8 passes, Welch's t" and this fails."""
    run(project, fake_vllm, "--vllm-save-baseline", "--vllm-repeat=8").assert_outcomes(passed=1)
    result = run(project, fake_vllm, "--vllm-repeat=8", "--vllm-json=r.json")
    outcomes = result.parseoutcomes()  # the verdict is not this test's claim
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, result.stdout.str()
    [found] = json.loads((project.path / "r.json").read_text())["results"]
    gated = [v for v in found["baseline"]["verdicts"] if v["gated"]]
    assert {v["metric"] for v in gated} == set(workloads.named("mixed").gate)
    assert all(v["basis"].startswith("8 pairs of passes, paired") for v in gated), gated
    # the server's histograms, kept in the baseline's counters, are compared, not gated:
    # the fake sleeps delay_s before every chunk, so its own mean gap is at least that
    [server] = [v for v in found["baseline"]["verdicts"] if v["metric"] == "server_itl_mean_ms"]
    assert not server["gated"]
    assert all(p["metrics"]["server_itl_mean_ms"] >= 1000 * fake_vllm.delay_s
               for p in found["passes"])  # fmt: skip


def test_regression_fails_with_metric_and_profile_diff(project, fake_vllm):
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=1)
    fake_vllm.delay_s *= SLOWDOWN
    (project.path / "profiles" / "p.yaml").write_text(
        "extends: default\nengine: {max_num_seqs: 1}\n"
    )
    result = run(project, fake_vllm, "--vllm-verbose")  # the lines' basis
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*vLLM perf regression against*p.json*",
            "*>> tpot_mean_ms:*over * passes*regressed*",
            "*differs from the baseline:*",
            "*profile engine.max_num_seqs (unset) -> 1*",
        ]
    )
    # a server the user started is measured as it runs: the profile's engine settings
    # are said not to apply to it, and where its results are filed
    result.stdout.fnmatch_lines(
        [
            "*--vllm-url: profile 'p'*engine settings and env are not applied*",
            "*--vllm-url: measuring http://127.0.0.1:*filed under this machine's hardware class*",
        ]
    )


def test_corrupt_baseline_is_an_error_and_left_untouched(project, fake_vllm):
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=1)
    [path] = stored(project)
    path.write_text('{"schema": 1, "samples": ')
    requests = len(fake_vllm.requests)
    result = run(project, fake_vllm)
    # found at collection, before any load: a usage error naming the file
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*corrupt vLLM perf baseline {path}*"])
    assert len(fake_vllm.requests) == requests
    assert path.read_text() == '{"schema": 1, "samples": '
    # saving over it is how a user replaces it: not blocked
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=1)


def test_json_and_markdown_reports(project, fake_vllm, monkeypatch):
    summary = project.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(project, fake_vllm, "--vllm-json=out/r.json", "--vllm-markdown=out/r.md")
    result.assert_outcomes(passed=1)
    data = json.loads((project.path / "out" / "r.json").read_text())
    [entry] = data["results"]
    for key in ("completed", "median_ttft_ms", "p99_itl_ms", "mean_tpot_ms", "output_throughput"):
        assert key in entry["metrics"], key
    assert entry["baseline"]["status"] == "no baseline"
    # each pass says how late the client's loop woke while it drove the load
    assert all(p["client_lag_p99_ms"] >= 0 for p in entry["passes"]), entry["passes"]
    assert "hf_supersecretvalue1" not in (project.path / "out" / "r.json").read_text()
    md = (project.path / "out" / "r.md").read_text()
    assert "| test | profile |" in md and "no baseline" in md
    assert summary.read_text() == md


def test_tolerance_keys_are_validated(project, fake_vllm):
    project.makeini("[pytest]\nvllm_tolerances =\n    itl_p98_ms=0.2\n")
    result = run(project, fake_vllm)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: ini vllm_tolerances: unknown metric 'itl_p98_ms'; did you mean 'itl_p99_ms'?*"]
    )


def test_plots_and_side_by_side_table(project, fake_vllm, capsys):
    pytest.importorskip("matplotlib")
    (project.path / "profiles" / "q.yaml").write_text("extends: default\n")
    result = project.runpytest_inprocess(
        f"--vllm-url={fake_vllm.url}",
        "--vllm-profile=p,q",
        "-p",
        "no:cacheprovider",
        "--vllm-plots=plots",
        "--vllm-markdown=out/r.md",
        "--vllm-save-baseline",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_perf: ratios to p (~ = within noise, ? = no interval)*",
            "profile*TTFT p50*ITL p99*worst stall*",
            "q *(x*",
        ]
    )
    pngs = sorted(p.name for p in (project.path / "plots").glob("*.png"))
    assert [n.rsplit("-", 1)[1] for n in pngs] == ["cdf.png", "server.png", "timeline.png"]
    assert all((project.path / "plots" / n).stat().st_size > 10_000 for n in pngs)
    # the server gauges: a row a profile (drawn over one another they could not be told
    # apart): two profiles, two rows of 2.4 inches at 90 dpi at least
    (server,) = [n for n in pngs if n.endswith("-server.png")]
    header = (project.path / "plots" / server).read_bytes()[16:24]
    assert int.from_bytes(header[4:], "big") >= 2 * 2.4 * 90, header
    assert "![" in (project.path / "out" / "r.md").read_text()

    from pytest_vllm_perf.tools import main as vllm_perf

    assert vllm_perf(["table", str(project.path / ".vllm-perf"), "--profiles", "q,p"]) == 0
    table = capsys.readouterr().out
    assert "ratios to q" in table and "\np        " in table
