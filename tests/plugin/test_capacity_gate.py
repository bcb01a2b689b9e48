"""``capacity_rps`` judged like any metric, through the plugin, on the fake
server with a capacity (each token waits 5 ms plus 10 ms per stream in flight): saved
as a baseline, judged against it, and judged A/B. The fake server proves the plumbing
and the verdict's wording; the statistics are tests/unit/test_capacity.py's, and the
real engine's capacity is examples/test_capacity.py's. The SLO is on the server's own
ITL mean (100 ms), which the fake server reports as the waits it gave
(``nominal_timing``): the streams in flight set it, not the machine's pace. On the
client's ITL p50 the search's margins were not monotone in the rate on a loaded
machine (0.76 at 20 req/s, 1.56 at 19.6, 0.96 at 21.8), both searches stayed
unresolved and a capacity loss of x3 passed as inconclusive in 4 of 15 full runs. The
rule is tests/unit/test_capacity.py's (an A/A unchanged, a loss regressed). The A/B
search is tests/plugin/test_capacity_ab.py's: CI's workers take whole files, and the
two tests, 50-75 s each, made the longest file of the tier's last minutes."""

from __future__ import annotations

import json

import pytest

CAPACITY_TEST = """
def test_capacity(vllm_perf):
    found = vllm_perf.capacity(
        "capacity", slo={"server_itl_mean_ms": 100}, tolerance=0.5, max_passes=10, duration_s=1,
        warmup_requests=1, requests={"rate": 20.0, "prompt_tokens": 16, "output_tokens": 8},
    )
    print("LINE", found.line())
"""


@pytest.fixture
def project(perf_project):
    perf_project.makepyfile(CAPACITY_TEST)
    return perf_project


def run(project, fake, *args):
    return project.runpytest_inprocess(
        f"--vllm-url={fake.url}", "-p", "no:cacheprovider", "-s", *args
    )


def test_a_saved_capacity_gates_a_slower_server_and_passes_the_same_one(project, fake_vllm):
    """No capacity baseline: under --vllm-require-baseline a usage error before any load.
    Saved, then the same server under --vllm-require-baseline (the capacity baseline
    counts at collection; before, only a workload baseline did): judged. A server
    whose per-stream cost is three times higher has about a third of the capacity:
    'capacity regressed', and the test fails (x0.318 with a CPU burner beside it). (At
    four times, on the earlier 2 ms a stream and 20 ms SLO, one stream alone came near
    the SLO's ITL limit, the search halved the rate down to passes with no request
    and stopped with an error in 2 of 4 runs; at three times, 5 of 5 passed.) Broken on
    purpose (the stored verdict forced to inconclusive), the last run passes and this
    fails."""
    fake_vllm.per_stream_s = 0.01
    fake_vllm.nominal_timing = True
    refused = run(project, fake_vllm, "--vllm-require-baseline")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert not fake_vllm.requests
    saved = run(project, fake_vllm, "--vllm-save-baseline")
    saved.assert_outcomes(passed=1)
    (path,) = (project.path / ".vllm-perf").rglob("*.json")
    doc = json.loads(path.read_text())
    assert "capacity" in path.parent.name and doc["kind"] == "capacity"
    assert len(doc["search"]["rates"]) >= 3
    same = run(project, fake_vllm, "--vllm-require-baseline")
    outcomes = same.parseoutcomes()  # judged, not refused; an A/A's verdict is timed
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, same.stdout.str()
    same.stdout.fnmatch_lines(["*against the baseline*capacity_rps x*"])
    fake_vllm.per_stream_s = 0.03
    # the test's share of a run budget of 1%, 0.9 of it for its one call, decides it (it
    # was judged at 2.5% whatever the budget)
    slower = run(
        project, fake_vllm, "--vllm-stored-run-alpha=0.01",
        "--vllm-json=report.json", "--vllm-markdown=report.md",
    )  # fmt: skip
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(
        ["*capacity_rps x0.*regressed at 50%, one-sided level 0.009*capacity regressed*"]
    )
    reported_as_a_metric(project, slower, "compared")


def reported_as_a_metric(project, result, status):
    """A capacity test's result reaches every report as the metric capacity_rps, judged
    by the rule of every metric (a p of a change beyond the tolerance beside its
    interval): the terminal summary's verdict and final line, --vllm-json (with the
    search itself), --vllm-markdown, and the prgate summary, which reads the JSON.
    Before, a capacity test left no result in any of them."""
    from pytest_vllm_perf.tools import prgate

    (found,) = json.loads((project.path / "report.json").read_text())["results"]
    gate = found["baseline"]
    assert found["test"].endswith("::test_capacity") and gate["status"] == status
    assert found["metrics"]["capacity_rps"] > 0 and found["passes"] == []
    assert len(found["capacity"]["candidate"]["rates"]) >= 3
    (verdict,) = gate["verdicts"]
    assert verdict["metric"] == "capacity_rps" and verdict["gated"]
    assert 0 <= verdict["p_value"] <= 1 and verdict["verdict"] == gate["verdict"]
    markdown = (project.path / "report.md").read_text()
    assert f"| {gate['verdict']} |" in markdown and "capacity_rps: " in markdown
    result.stdout.fnmatch_lines(
        [f"*vLLM perf {'FAIL' if gate['verdict'] == 'regressed' else 'PASS'}*"]
    )
    # not promoted into a workload baseline (it has no passes of one rate); exported
    from pytest_vllm_perf.tools import main as vllm_perf
    from pytest_vllm_perf.tools.store import promote

    promoted = project.path / "promoted"
    (line,) = promote([project.path / "report.json"], promoted)
    assert line.endswith("is a capacity search: not promoted") and not promoted.exists()
    assert vllm_perf(["benchmark-json", "report.json", "--out", "bench.json"]) == 0
    (bench,) = json.loads((project.path / "bench.json").read_text())["benchmarks"]
    assert bench["name"].startswith("capacity_rps[") and bench["stats"]["rounds"] == 1, bench
    if gate["verdict"] == "regressed":
        report = (project.path / "report.json").read_text()
        step = prgate.Step("stored", ("pytest",), 1, 60.0, markdown, "", report)
        assert "regressed: test_capacity[default] capacity_rps x0." in prgate.verdict([step])
