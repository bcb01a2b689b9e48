"""The regression gate on the real engine: missing baseline, unchanged rerun, regression."""

from __future__ import annotations

import json

import pytest

from tests.real_engine import require_engine

pytestmark = pytest.mark.engine
PERF_TEST = """
import pytest

# 6 passes a side: the fewest with which a verdict over 4 gated metrics (Holm) can be
# significant. The rerun
# shares one server and its tolerances are loosened to 50%, because this test shows
# the mechanism (saved, compared pass by pass, not regressed), and a red CI from a
# 2-core VM's drift would teach nothing; bench/gate_power.py measures the gate's
# false-alarm rate at the default tolerances. max_num_seqs=1 below regresses TTFT
# p50 far beyond any of that.
@pytest.mark.vllm_perf(workload="mixed", duration_s=4, warmup_requests=2, repeat=6,
                       chat={"users": 4, "output_tokens": 32},
                       long={"rate": 0.5, "prompt_tokens": 512, "output_tokens": 4},
                       tolerances={"ttft_p50_ms": 0.5, "ttft_p99_ms": 0.5, "itl_p50_ms": 0.5,
                                   "itl_p99_ms": 0.5, "tpot_mean_ms": 0.5, "e2el_p99_ms": 0.5,
                                   "output_throughput": 0.5, "preemptions_per_s": 0.5})
def test_gate(vllm_perf):
    vllm_perf.run()
"""


def test_missing_then_saved_then_unchanged(real_server, perf_project):
    perf_project.makepyfile(PERF_TEST)
    args = (f"--vllm-url={real_server.base_url}", "-p", "no:cacheprovider")
    missing = perf_project.runpytest_subprocess(*args)
    missing.assert_outcomes(passed=1)
    missing.stdout.fnmatch_lines(["*test_gate*default*pass*no baseline*"])
    perf_project.runpytest_subprocess(*args, "--vllm-save-baseline").assert_outcomes(passed=1)
    assert list((perf_project.path / ".vllm-perf").rglob("default.json"))
    again = perf_project.runpytest_subprocess(*args, "--vllm-require-baseline")
    again.assert_outcomes(passed=1)
    again.stdout.re_match_lines([r".*test_gate.*default.*pass\s+(unchanged|improved|inconclusive)"])


# One sequence at a time makes each request wait for the others: TTFT p50 rose x13.7
# (20.9 -> 287 ms) where output throughput fell only x0.68, inside the 50% tolerance of
# the mechanism test above, so TTFT p50 is gated here on top of the workload's own.
# 8 passes a side, so that pass k is paired with pass k (8 pairs: x22.4, 95% CI
# x16.2..x29.2 in one run). A stalled pass of the 2 shared cores can still reverse a
# pair: over 6 vs 6 passes TTFT p50 once rose x17.6 and came out inconclusive (95% CI
# x0.949..x19.8, p=0.39), and in 1 of 4 runs with 8 pairs the test was not failed.
# So the regression message is checked whenever the verdict is regressed, and
# otherwise the estimate must still be far beyond tolerance and the verdict must not
# call it unchanged or better.
WORSE_TEST = PERF_TEST.replace(
    'tolerances={"ttft_p50_ms"',
    'gate=["ttft_p50_ms"],\n                       tolerances={"ttft_p50_ms"',
).replace("repeat=6", "repeat=8")


def test_worse_profile_is_a_regression_naming_metric_and_diff(perf_project):
    require_engine()
    assert 'gate=["ttft_p50_ms"]' in WORSE_TEST and "repeat=8" in WORSE_TEST
    perf_project.makepyfile(WORSE_TEST)
    profile = perf_project.path / "profiles" / "gate.yaml"
    profile.write_text("engine: {max_model_len: 2048}\n")
    args = ("--vllm-profile=gate", "-p", "no:cacheprovider")
    perf_project.runpytest_subprocess(*args, "--vllm-save-baseline").assert_outcomes(passed=1)
    profile.write_text("engine: {max_model_len: 2048, max_num_seqs: 1}\n")
    report = perf_project.path / "worse.json"
    result = perf_project.runpytest_subprocess(*args, f"--vllm-json={report}")
    gate = json.loads(report.read_text())["results"][0]["baseline"]
    assert "profile engine.max_num_seqs (unset) -> 1" in gate["changes"]
    [ttft] = [v for v in gate["verdicts"] if v["metric"] == "ttft_p50_ms"]
    assert ttft["gated"] and ttft["ratio"] > 3, ttft
    assert ttft["verdict"] in ("regressed", "inconclusive"), ttft
    if any(v["verdict"] == "regressed" and v["gated"] for v in gate["verdicts"]):
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(
            [
                "*vLLM perf regression against*gate.json*",
                "*>> *:*regressed*",
                "*profile engine.max_num_seqs (unset) -> 1*",
            ]
        )
    else:
        result.assert_outcomes(passed=1)


AB_TEST = """
import pytest

# Tolerances at 50%, as above: this shows the A/B mechanism on two real servers, not
# the noise of a 2-core VM. max_num_seqs=1 with 8 users decodes one sequence at a
# time: output throughput fell x0.49 with 4 users in a first run, and more with 8.
# decode gates only ITL p50 (the decode step, steady across H200 machines); throughput
# is gated here on top, as a test opts in.
@pytest.mark.vllm_perf(workload="decode", duration_s=4, warmup_requests=1, repeat=6,
                       chat={"users": 8, "output_tokens": 32}, gate=["output_throughput"],
                       tolerances={"itl_p50_ms": 0.5, "output_throughput": 0.5})
def test_ab(vllm_perf):
    vllm_perf.run()
"""


def test_ab_between_two_real_servers(perf_project):
    """Two real servers up, passes alternated, nothing stored, all stopped at the end.

    What is asserted is what a 2-core VM cannot flip: the A/A side raises no
    regression, and one sequence at a time is never called unchanged or better, its
    fastest pass far below default's fastest (pooled estimates x0.26-x0.64 in three runs
    here, x0.93 in a fourth whose base passes half stalled; whether the interval
    excludes the 50% tolerance depends on how much the shared cores stall).
    """
    require_engine()
    perf_project.makepyfile(AB_TEST)
    (perf_project.path / "profiles" / "one-seq.yaml").write_text("engine: {max_num_seqs: 1}\n")
    report = perf_project.path / "ab.json"
    result = perf_project.runpytest_subprocess(
        "--vllm-profile=default,one-seq",
        "--vllm-ab=default",
        f"--vllm-json={report}",
        "-p",
        "no:cacheprovider",
        "-rA",
    )
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*A/B pass 1/6 base (default): starting*",
            "*A/B pass 1/6 candidate (default): starting*",
            "*A/B pass 2/6 candidate (default): starting*",
            "*A/B pass 2/6 base (default): starting*",
        ]
    )
    assert "PASSED test_ab_between_two_real_servers.py::test_ab[default]" in out
    assert out.count("booting vLLM") == 3  # candidate default, base default, candidate one-seq
    assert not (perf_project.path / ".vllm-perf").exists()  # an A/B run stores nothing
    results = {r["profile"]: r for r in json.loads(report.read_text())["results"]}
    same, worse = results["default"]["baseline"], results["one-seq"]["baseline"]
    assert same["status"] == worse["status"] == "a/b"
    assert "'default' against 'default'" in same["note"]
    assert "profile engine.max_num_seqs (unset) -> 1" in worse["changes"]
    assert not any(v["verdict"] == "regressed" and v["gated"] for v in same["verdicts"])
    [throughput] = [v for v in worse["verdicts"] if v["metric"] == "output_throughput"]
    # The pooled estimate is not what a 2-core VM keeps: in one run the base side's
    # passes were ~1100-1600 tok/s when healthy and ~360 when the cores stalled, half of
    # them stalled, and the estimate came out x0.93. Stalls only slow a pass, so each
    # side's fastest pass is what it can do: one-seq's stayed at or below 384, default's
    # reached 1277 (x0.30).
    best = {
        side: max(p["metrics"]["output_throughput"] for p in results["one-seq"][key])
        for side, key in (("base", "base_passes"), ("one-seq", "passes"))
    }
    assert best["one-seq"] < 0.8 * best["base"], (best, throughput)
    assert throughput["verdict"] in ("regressed", "inconclusive"), throughput
    if throughput["verdict"] == "regressed":
        result.stdout.fnmatch_lines(
            [
                "*vLLM perf regression against the A/B base side 'default':*",
                "*>> output_throughput:*regressed*",
                "*differs from the base side:*",
                "*profile engine.max_num_seqs (unset) -> 1*",
            ]
        )
