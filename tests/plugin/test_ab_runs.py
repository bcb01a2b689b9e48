"""A/B runs as a whole through the plugin (fake server): the run's false-alarm budget
over its A/B tests, and the sides booted in turn (``--vllm-ab-mode=sequential``).

Apart from tests/plugin/test_ab_gate.py, whose runners it shares, so that CI's xdist
workers (which take whole files) spread the files that time the fake server more evenly
(tests/conftest.py, ``TIMED``)."""

from __future__ import annotations

import re

from tests.plugin.conftest import PERF_TEST
from tests.plugin.test_ab_gate import judged_once
from tests.plugin.test_gate import run_ab


def test_the_runs_false_alarm_budget_is_split_over_its_ab_tests(project, fake_vllm, monkeypatch):
    """Each A/B test may spend min(1%, the run's budget / the A/B tests selected), its one
    vllm_perf call 0.9 of that (sequential.CALL_SHARE): one look of 2 pairs spends it
    all, and the note prints it. A second perf test halves it. Broken on purpose (every
    test at 1%), the notes say level 0.009."""
    args = ("--vllm-ab=default", "--vllm-ab-max-pairs=2", "--vllm-ab-run-alpha=0.004", "-s")
    one = run_ab(project, fake_vllm, monkeypatch, *args, repeat=2)
    assert "2 pairs: regressed when worse than 25% of the tolerance at level 0.0036" in (
        one.stdout.str()
    )
    project.makepyfile(test_second=PERF_TEST)
    two = run_ab(project, fake_vllm, monkeypatch, *args, repeat=2)
    out = two.stdout.str()
    assert out.count("at level 0.0018;") == 2, out
    assert "at level 0.0036" not in out


def test_sequential_ab_runs_the_sides_in_blocks_and_says_so(project, fake_vllm, monkeypatch):
    """--vllm-ab-mode=sequential: one side at a time on one slot, blocks CBBC, pass k
    paired with pass k, and the note says how the sides ran. Broken on purpose (the
    plugin ignoring the mode), the passes alternate ABBA and the order check fails."""
    result = run_ab(
        project, fake_vllm, monkeypatch, "--vllm-ab=default", "--vllm-ab-mode=sequential",
        "--vllm-settle-passes=1", "-s",
    )  # fmt: skip
    judged_once(result)
    order = re.findall(
        r"A/B pass (\d)/6 (base|candidate) \((?:default|p)\): starting", result.stdout.str()
    )
    expected = [(str(k), "candidate") for k in (1, 2, 3)]
    expected += [(str(k), "base") for k in range(1, 7)]
    expected += [(str(k), "candidate") for k in (4, 5, 6)]
    assert order == expected
    result.stdout.fnmatch_lines(
        ["*'p' against 'default', booted in turn, passes in blocks (CBBC)*"]
    )
    # each block settles on the server it booted, before its first measured pass
    settled = re.findall(
        r"A/B pass (\d)/6 (base|candidate) .*: settle pass 1/1 thrown away", result.stdout.str()
    )
    assert settled == [("1", "candidate"), ("1", "base"), ("4", "candidate")], settled
