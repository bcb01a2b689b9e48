"""How many passes and boots a stored baseline holds, and the run's false-alarm budget
over its stored tests, through the plugin (fake server).

Apart from tests/plugin/test_gate.py, whose project and runners it shares, so that CI's
xdist workers (which take whole files) spread the files that time the fake server more
evenly (tests/conftest.py, ``TIMED``)."""

from __future__ import annotations

import json

import pytest

from tests.plugin.conftest import PERF_TEST
from tests.plugin.test_gate import run, stored


def test_bad_repeat_is_a_usage_error(project, fake_vllm):
    result = run(project, fake_vllm, "--vllm-repeat=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--vllm-repeat: expected a whole number of passes >= 1*"])


def passes_saved(project, fake, *args) -> int:
    result = project.runpytest_inprocess(
        f"--vllm-url={fake.url}", "--vllm-profile=p", "-p", "no:cacheprovider", *args
    )
    result.assert_outcomes(passed=1)
    [path] = stored(project)
    return [len(b["passes"]) for b in json.loads(path.read_text())["boots"]]


def test_eight_passes_by_default_and_the_ini_twin(project, fake_vllm):
    assert passes_saved(project, fake_vllm, "--vllm-save-baseline") == [8]
    project.makeini("[pytest]\nvllm_repeat = 2\n")
    assert passes_saved(project, fake_vllm, "--vllm-save-baseline") == [2]


def test_add_boot_keeps_earlier_boots_and_the_verdict_says_so(project, fake_vllm):
    project.makeini("[pytest]\nvllm_repeat = 2\n")
    assert passes_saved(project, fake_vllm, "--vllm-add-boot") == [2]  # none yet: boot 1
    assert passes_saved(project, fake_vllm, "--vllm-add-boot") == [2, 2]
    result = project.runpytest_inprocess(
        f"--vllm-url={fake_vllm.url}", "--vllm-profile=p", "-p", "no:cacheprovider",
        "--vllm-verbose",
    )  # fmt: skip
    result.stdout.fnmatch_lines(
        ["*over 4 vs 2 passes, Welch*2 baseline boots, allowing boot drift*"]
    )
    both = project.runpytest_inprocess(
        f"--vllm-url={fake_vllm.url}", "--vllm-save-baseline", "--vllm-add-boot"
    )
    assert both.ret == pytest.ExitCode.USAGE_ERROR


def test_stored_tests_share_the_runs_false_alarm_budget(project, fake_vllm):
    """Each stored-baseline test was judged at 5% (two-sided) however many ran, so a run of
    N tests could fail an unchanged server with probability up to 1 - 0.975**N. Each now
    gets min(2.5%, --vllm-stored-run-alpha / the tests) one-sided, 0.9 of it for its one
    vllm_perf call (sequential.CALL_SHARE), and the note says so.
    Broken on purpose (no test count at collection), the level stays 0.05 and no note."""
    project.makepyfile(test_second=PERF_TEST)
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=2)
    out = run(project, fake_vllm, "-s").stdout.str()
    # 5% over 2 tests: 2.5% each, one-sided, so 0.045 two-sided: no tighter than alone
    assert "this test's share of --vllm-stored-run-alpha" not in out
    out = run(project, fake_vllm, "--vllm-stored-run-alpha=0.01", "-s").stdout.str()
    assert out.count("at level 0.009 (two-sided), this test's share of") == 2, out
