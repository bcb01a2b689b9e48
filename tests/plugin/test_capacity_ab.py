"""``capacity_rps`` judged A/B through the plugin, on the fake server with a capacity:
both sides searched pass by pass in turn (tests/plugin/test_capacity_gate.py has the
stored search, its project and its checks of every report; apart, so that CI's workers,
which take whole files, run the two long searches at once)."""

from __future__ import annotations

import pytest

from tests.plugin.test_capacity_gate import CAPACITY_TEST, reported_as_a_metric


@pytest.fixture
def project(perf_project):
    perf_project.makepyfile(CAPACITY_TEST)
    return perf_project


def test_ab_searches_both_sides_in_turn_and_judges_the_ratio(project, fake_vllm, monkeypatch):
    """Both sides are the same fake server: an A/A. Both are searched, pass by pass in
    turn, and the ratio is judged without a regression."""
    fake_vllm.per_stream_s = 0.01
    fake_vllm.nominal_timing = True
    monkeypatch.setenv("FAKE_VLLM_URL", fake_vllm.url)
    result = project.runpytest_inprocess(
        "-p", "tests.fake_sides", "--vllm-profile=default", "--vllm-ab=default",
        "-p", "no:cacheprovider", "-s", "--vllm-json=report.json", "--vllm-markdown=report.md",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, result.stdout.str()
    out = result.stdout.str()
    assert "capacity base:" in out and "capacity candidate:" in out
    result.stdout.fnmatch_lines(["*LINE*: base *; candidate *; capacity_rps x*"])
    reported_as_a_metric(project, result, "a/b")
