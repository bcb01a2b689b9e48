"""The regression gate on the real engine: saved, then an unchanged rerun."""

from __future__ import annotations

import pytest

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


def test_saved_then_unchanged(real_server, perf_project):
    """A missing baseline's report is shown with the fake server (tests/plugin/
    test_gate.py::test_missing_baseline_is_reported_not_failed); here the real engine's
    passes are saved and a rerun on the same server is gated and not regressed."""
    perf_project.makepyfile(PERF_TEST)
    args = (f"--vllm-url={real_server.base_url}", "-p", "no:cacheprovider")
    perf_project.runpytest_subprocess(*args, "--vllm-save-baseline").assert_outcomes(passed=1)
    assert list((perf_project.path / ".vllm-perf").rglob("default.json"))
    again = perf_project.runpytest_subprocess(*args, "--vllm-require-baseline")
    again.assert_outcomes(passed=1)
    again.stdout.re_match_lines([r".*test_gate.*default.*pass\s+(unchanged|improved|inconclusive)"])


# A worse profile failing a run, naming the metric and the changed setting, and the
# A/B mechanism on two real servers (alternation, nothing stored): tests/engine/
# test_pr_gate.py, through the pull-request gate in a scratch git repository.
