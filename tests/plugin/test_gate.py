"""Baselines and regression verdicts through the plugin (fake server: fast and controllable).
tests/engine/test_engine.py saves and gates a baseline on the real engine; A/B runs are
tests/plugin/test_ab_gate.py's, and baselines that cannot gate as they stand (other
hardware, release or model, an old schema) tests/plugin/test_gate_provenance.py's."""

from __future__ import annotations

import json

import pytest

from pytest_vllm_perf.core import registry

PASSES = 6  # under the default 8, for speed: 6 vs 6 can be significant over 4 gated (Holm)


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


def test_save_then_unchanged_rerun_passes(project, fake_vllm):
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=1)
    [path] = stored(project)
    data = json.loads(path.read_text())
    assert data["test"] == "test_save_then_unchanged_rerun_passes.py::test_perf"
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
    # This checks the mechanism, not the noise (bench/gate_power.py measures that): a
    # 1 s fake-server pass on a busy 2-core machine can move by 50%, a 4x slowdown cannot.
    tolerances = [f"{m}=1.0" for m in registry.default_tolerances("cpu")]
    project.makeini("[pytest]\nvllm_tolerances =\n    " + "\n    ".join(tolerances) + "\n")
    result = run(project, fake_vllm, "--vllm-require-baseline")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "regressed" not in out
    result.stdout.re_match_lines([r".*::test_perf\s+p\s.*pass\s+(unchanged|improved|inconclusive)"])


def test_regression_fails_with_metric_and_profile_diff(project, fake_vllm):
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=1)
    fake_vllm.delay_s *= 4  # every token now takes four times as long
    (project.path / "profiles" / "p.yaml").write_text(
        "extends: default\nengine: {max_num_seqs: 1}\n"
    )
    result = run(project, fake_vllm)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*vLLM perf regression against*p.json*",
            f"*>> tpot_mean_ms:*over {PASSES} vs {PASSES} passes*regressed*",
            "*differs from the baseline:*",
            "*profile engine.max_num_seqs (unset) -> 1*",
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
            "*test_perf: ratios to p (~ = within noise)*",
            "profile*TTFT p50*ITL p99*worst stall*",
            "q *(x*",
        ]
    )
    pngs = sorted(p.name for p in (project.path / "plots").glob("*.png"))
    assert [n.rsplit("-", 1)[1] for n in pngs] == ["cdf.png", "server.png", "timeline.png"]
    assert all((project.path / "plots" / n).stat().st_size > 10_000 for n in pngs)
    assert "![" in (project.path / "out" / "r.md").read_text()

    from pytest_vllm_perf import cli

    assert cli.main(["table", str(project.path / ".vllm-perf"), "--profiles", "q,p"]) == 0
    table = capsys.readouterr().out
    assert "ratios to q" in table and "\np        " in table


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
        f"--vllm-url={fake_vllm.url}", "--vllm-profile=p", "-p", "no:cacheprovider"
    )
    result.stdout.fnmatch_lines(["*over 4 vs 2 passes, 2 baseline boots, drift allowance x*"])
    both = project.runpytest_inprocess(
        f"--vllm-url={fake_vllm.url}", "--vllm-save-baseline", "--vllm-add-boot"
    )
    assert both.ret == pytest.ExitCode.USAGE_ERROR
