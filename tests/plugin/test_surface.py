"""The pytest surface, through pytester. Measurements go to a fake server here (fast);
tests/test_engine.py repeats the claims that matter against the real vLLM engine."""

from __future__ import annotations

import re

import pytest

PERF_TEST = """
import pytest

@pytest.mark.vllm_perf(workload="mixed", duration_s=1, warmup_requests=1,
                       chat={"users": 2, "output_tokens": 8},
                       long={"rate": 2.0, "prompt_tokens": 64, "output_tokens": 4},
                       thresholds=%s)
def test_perf(vllm_perf):
    outcome = vllm_perf.run()
    assert outcome.result.metrics["completed"] >= 2
"""


def run(pytester: pytest.Pytester, url: str, *args: str) -> pytest.RunResult:
    """One pass per workload keeps these fast; passes matter to verdicts (test_baseline.py)."""
    return pytester.runpytest_inprocess(
        f"--vllm-url={url}", "-p", "no:cacheprovider", "--vllm-repeat=1", *args
    )


def test_help_lists_options_and_ini_twins(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*--vllm-profile=*",
            "*--vllm-profiles-dir=*",
            "*--vllm-url=*",
            "*--vllm-boot-timeout=*",
            "*vllm_profile (string)*",
        ]
    )


def test_marker_is_registered(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.vllm_perf(*"])


def test_unknown_profile_is_a_usage_error(perf_project):
    perf_project.makepyfile(PERF_TEST % "{}")
    result = perf_project.runpytest_subprocess("--vllm-profile=nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "booting vLLM" not in result.stdout.str() + result.stderr.str()  # nothing booted
    mine = ", ".join(sorted(p.stem for p in (perf_project.path / "profiles").glob("*.yaml")))
    assert "chunked-128" in mine  # the project's own folder, listed first
    result.stderr.fnmatch_lines(
        [
            f"*unknown vLLM profile 'nosuch'; available: */profiles: {mine}; "
            "shipped: api-servers-2, chunked, default, no-prefix-cache, roomy-kv, small-kv, tuned"
        ]
    )


def test_shipped_profiles_resolve_without_a_profiles_folder(pytester, fake_vllm):
    """A user's repository with no profiles/ at all: chunked and default still resolve."""
    pytester.makepyfile(PERF_TEST % "{}")
    assert not (pytester.path / "profiles").exists()
    result = run(pytester, fake_vllm.url, "--vllm-profile=chunked,default", "-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_perf*chunked*", "*test_perf*default*"])


def test_unknown_profile_without_a_folder_lists_the_shipped_ones(pytester):
    pytester.makepyfile(PERF_TEST % "{}")
    result = pytester.runpytest_inprocess("--vllm-profile=nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown vLLM profile 'nosuch'*shipped: api-servers-2, chunked*"])


def test_bad_profile_file_names_file_and_key(perf_project):
    (perf_project.path / "profiles" / "typo.yaml").write_text(
        "engine: {max_num_seqs: 2}\nthreshold: {}\n"
    )
    result = perf_project.runpytest_inprocess("--vllm-profile=typo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*typo.yaml: unknown key 'threshold'*"])


def test_broken_default_profile_is_one_line_before_any_request(perf_project, fake_vllm):
    """The default profile is read when a perf test is selected (not at start-up: a
    project's other test runs need none), and a broken one is a usage error of one line,
    FILE:LINE:COLUMN. Broken on purpose (the collection check removed), the test errors
    at its fixture with PyYAML's multi-line message after the session started."""
    (perf_project.path / "profiles" / "default.yaml").write_text("engine: [1, 2\n")
    perf_project.makepyfile(PERF_TEST % "{}")
    result = run(perf_project, fake_vllm.url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [ln for ln in result.stderr.lines if ln.startswith("ERROR:")]
    assert errors == [
        f"ERROR: {perf_project.path / 'profiles' / 'default.yaml'}:2:1: malformed YAML: "
        "expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)"
    ]
    assert fake_vllm.requests == []


def test_run_takes_the_workload_as_the_marker_does(perf_project, fake_vllm):
    """``vllm_perf.run(workload="decode")``, the marker's keyword, is the workload (it
    was taken for an override field, and failed after the boot)."""
    perf_project.makepyfile(
        """
        def test_kw(vllm_perf):
            outcome = vllm_perf.run(workload="decode", duration_s=1, warmup_requests=1,
                                    chat={"users": 2, "output_tokens": 8})
            assert outcome.result.workload.name == "decode"
        """
    )
    run(perf_project, fake_vllm.url).assert_outcomes(passed=1)


def test_a_malformed_trace_line_is_a_usage_error_naming_it(perf_project, fake_vllm):
    """A trace beside the test, named in the marker: a bad line exits 4 with FILE:LINE,
    before any request; the same trace fixed runs."""
    path = perf_project.path / "my.jsonl"
    good = '{"timestamp": 0, "input_length": 16, "output_length": 2}\n'
    path.write_text(good + '{"timestamp": 10, "input_length": 16}\n')
    perf_project.makepyfile(
        """
        import pytest

        @pytest.mark.vllm_perf(workload="trace", duration_s=1, warmup_requests=1,
                               requests={"trace": "my.jsonl", "time_scale": 0.1})
        def test_replay(vllm_perf):
            outcome = vllm_perf.run()
            assert outcome.result.metrics["completed"] == 2
        """
    )
    result = run(perf_project, fake_vllm.url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert fake_vllm.requests == []
    result.stderr.fnmatch_lines(
        [f"*test_replay: vllm_perf marker workload: {path}:2: missing output_length"]
    )
    path.write_text(good * 2)
    run(perf_project, fake_vllm.url).assert_outcomes(passed=1)


def test_capacity_reports_its_search_and_fails_below_the_minimum(perf_project, fake_vllm):
    """vllm_perf.capacity on the fake server, which never saturates: every rate keeps the
    SLO, so the search doubles the rate until its passes run out and finds no bracket;
    the SLO held up to 64 req/s, below min_rps=100, which fails the test in one line that
    says what was spent. A workload
    with no open-loop class is refused in one line."""
    perf_project.makepyfile(
        """
        def test_search(vllm_perf):
            vllm_perf.capacity("capacity", slo={"ttft_p99_ms": 10_000}, max_passes=4,
                               min_rps=100, duration_s=1, warmup_requests=0,
                               requests={"rate": 8.0, "output_tokens": 4})

        def test_closed_loop(vllm_perf):
            vllm_perf.capacity("decode", slo={"ttft_p99_ms": 100})
        """
    )
    result = run(perf_project, fake_vllm.url, "-s")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    # the margin held (below 1) at every rate: its size is the machine's business (0.13
    # at 8 req/s with the machine loaded, 0.0x quiet)
    margins = [float(m) for m in re.findall(r"capacity: \d+ req/s -> SLO margin ([\d.]+)", out)]
    assert len(margins) == 4 and all(m < 1 for m in margins), out
    assert "capacity: 8 req/s -> SLO margin" in out and "capacity: 64 req/s" in out
    result.stdout.fnmatch_lines(
        [
            "*capacity of 'requests' under ttft_p99_ms <= 10000: no bracket found "
            "(4 passes) (* s); baseline no baseline: *: below the minimum of 100 req/s*",
            "*capacity: name one open-loop class of workload 'decode' (open-loop classes: none)*",
        ]
    )


def test_profiles_dir_ini_twin(perf_project, fake_vllm):
    (perf_project.path / "profiles").rename(perf_project.path / "tuning")
    perf_project.makeini("[pytest]\nvllm_profiles_dir = tuning\n")
    perf_project.makepyfile(PERF_TEST % "{}")
    result = run(perf_project, fake_vllm.url, "--vllm-profile=chunked")
    result.assert_outcomes(passed=1)


def test_passing_run_prints_the_summary(perf_project, fake_vllm):
    perf_project.makepyfile(PERF_TEST % "{'ttft_p99_ms': 10000}")
    result = run(perf_project, fake_vllm.url)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*vLLM perf summary*", "*TTFT p50*ITL p99*preempt*", "*test_perf*default*pass*"]
    )
    body = fake_vllm.requests[-1]
    assert body["ignore_eos"] is True and body["stream"] is True


def test_failing_threshold_lists_every_metric(perf_project, fake_vllm):
    perf_project.makepyfile(PERF_TEST % "{'ttft_p99_ms': 0.001, 'itl_p99_ms': 10000}")
    result = run(perf_project, fake_vllm.url)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*1 of 3 vLLM perf thresholds failed:*",
            "*ok   failed: 0 (limit <= 0)*",
            "*ok   itl_p99_ms:*(limit <= 10000)*",
            "*FAIL ttft_p99_ms:*(limit <= 0.001)*",
        ]
    )


def test_short_responses_fail_the_default_slo(perf_project, fake_vllm):
    fake_vllm.short_by = 1
    perf_project.makepyfile(PERF_TEST % "{}")
    result = run(perf_project, fake_vllm.url)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL failed: *", "*short response: 7 of 8 tokens*"])


def test_profile_matrix_parametrizes_ids(perf_project, fake_vllm):
    perf_project.makepyfile(PERF_TEST % "{}")
    result = run(perf_project, fake_vllm.url, "--vllm-profile=default,chunked", "-v")
    result.stdout.fnmatch_lines(
        ["*test_perf[[]default[]] PASSED*", "*test_perf[[]chunked[]] PASSED*"]
    )


def test_profile_thresholds_apply(perf_project, fake_vllm):
    (perf_project.path / "profiles" / "strict.yaml").write_text(
        "extends: default\nthresholds: {itl_max_ms: 0.0001}\n"
    )
    perf_project.makepyfile(PERF_TEST % "{}")
    result = run(perf_project, fake_vllm.url, "--vllm-profile=strict")
    result.stdout.fnmatch_lines(["*FAIL itl_max_ms*"])


def test_unknown_threshold_in_marker_is_a_usage_error(perf_project, fake_vllm):
    perf_project.makepyfile(PERF_TEST % "{'ttft_p98_ms': 1}")
    result = run(perf_project, fake_vllm.url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*marker thresholds: unknown threshold 'ttft_p98_ms'*"])
    assert fake_vllm.requests == []


def test_code_api_and_workload_overrides(perf_project, fake_vllm):
    perf_project.makepyfile("""
        def test_code(vllm_perf):
            load = vllm_perf.workload("kv_pressure", duration_s=1, warmup_requests=0,
                                      seq={"users": 3, "output_tokens": 4})
            outcome = vllm_perf.run(load, thresholds={"min_completed": 3})
            assert outcome.result.workload.classes[0].users == 3
            assert outcome.result.metrics["preemptions"] == 0
    """)
    run(perf_project, fake_vllm.url).assert_outcomes(passed=1)


def test_non_perf_tests_are_untouched(pytester):
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "vLLM perf summary" not in result.stdout.str()


def test_a_class_the_workload_lacks_fails_before_any_request(perf_project, fake_vllm):
    """Keys set in code are checked against the workload the code chose, so a
    threshold that could never be measured fails in one line before the load starts."""
    perf_project.makepyfile(
        """
        def test_perf(vllm_perf):
            vllm_perf.run("decode", thresholds={"long.ttft_p99_ms": 500})
        """
    )
    result = run(perf_project, fake_vllm.url)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*threshold 'long.ttft_p99_ms': workload 'decode' has no class 'long' (classes: chat)*"]
    )
    assert fake_vllm.requests == []
