"""A/B runs, revisions as a side, and promoted reports through the plugin (fake server).

Split from tests/plugin/test_gate.py, whose project and runners it shares, so that CI's
xdist workers (which take whole files) spread the plugin tier's longest file over two.
"""

from __future__ import annotations

import json
import re

import pytest

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core.records import Verdict
from tests.plugin.conftest import PERF_TEST
from tests.plugin.test_gate import run, run_ab, stored

VERDICTS = "|".join(str(v) for v in Verdict)


def test_ab_mode_compares_two_sides_without_a_stored_baseline(project, fake_vllm, monkeypatch):
    """Both sides measure the same fake server here (A/A through the plugin surface);
    tests/engine/test_pr_gate.py runs A/B between two real servers."""
    result = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab=default", "-s")
    judged_once(result)
    out = result.stdout.str()
    assert "A/B pass 1/6 base (default)" in out and "A/B pass 1/6 candidate (p)" in out
    # --vllm-settle-passes auto: no settle pass on the CPU (test_sequential_ab_runs... has 1)
    assert "settle pass" not in out
    result.stdout.fnmatch_lines(["*'p' against 'default', two servers up, one loaded at a time*"])
    assert stored(project) == []  # nothing is stored in A/B mode
    # each gated metric judged, the A/B-only ones too
    mixed = workloads.named("mixed")
    for metric in (*mixed.gate, *mixed.ab_gate):
        assert re.search(rf"::test_perf \[p\] {re.escape(metric)}: .*\) ({VERDICTS})\n", out), (
            metric
        )


def judged_once(result: pytest.RunResult) -> None:
    """The A/A ran to a verdict. Which verdict is timed on a busy machine (a fake-server
    A/A came out x3-x4 at load average 5-15), so it is not asserted here: the verdicts'
    error rates are tests/unit/test_compare.py's, test_ab.py's and test_noise.py's,
    which an always-inconclusive or an always-regressed gate fails."""
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, result.stdout.str()


def test_an_undecided_first_look_adds_pairs_up_to_the_budget(project, fake_vllm, monkeypatch):
    """The fake server never preempts: its preemption rate reads x1.000 on both sides,
    and its interval is the CPU's 4% server offset on either side of it, so at a
    tolerance of 0.1% it can be neither ruled out nor crossed, whatever the machine's
    pace: the first look is undecided and the run goes on to the budget, alternating
    ABBA on, and says so. (TTFT and ITL p99 at 0.1% were once used: on a loaded machine
    the client's lag made an A/A's p99s differ by x1.2-x1.5 and the first look decided
    them, run 3 of bench/results/cpu/tiers-loaded-88e7afa.txt.) Broken on purpose (one look of
    the first pairs only), there is no third pair and no second look."""
    project.makepyfile(
        PERF_TEST.replace('workload="mixed",', 'workload="mixed", gate=["preemptions_per_s"],')
    )
    project.makeini("[pytest]\nvllm_tolerances =\n    preemptions_per_s=0.001\n")
    result = run_ab(
        project, fake_vllm, monkeypatch, "--vllm-ab=default", "--vllm-ab-max-pairs=4", "-s",
        repeat=2,
    )  # fmt: skip
    judged_once(result)
    out = result.stdout.str()
    undecided = r"A/B: undecided after 2 pairs \(.*preemptions_per_s.*\): 2 more pairs"
    assert re.search(undecided, out), out
    order = re.findall(r"A/B pass (\d)/(\d) (base|candidate) \((?:default|p)\): starting", out)
    assert [(k, side) for k, _, side in order] == [
        ("1", "base"), ("1", "candidate"), ("2", "candidate"), ("2", "base"),
        ("3", "base"), ("3", "candidate"), ("4", "candidate"), ("4", "base"),
    ]  # fmt: skip
    result.stdout.fnmatch_lines(["*look 2 of 2 after 4 pairs*"])
    # the verdict lines count every pair measured
    assert re.search(r"tpot_mean_ms: .* over 4 pairs of passes", out), out


def test_a_budget_of_the_first_look_runs_no_more_pairs(project, fake_vllm, monkeypatch):
    result = run_ab(
        project, fake_vllm, monkeypatch, "--vllm-ab=default", "--vllm-ab-max-pairs=2", "-s",
        repeat=2,
    )  # fmt: skip
    judged_once(result)
    out = result.stdout.str()
    assert "undecided after" not in out and "A/B pass 3/" not in out
    assert re.search(r"A/B: 'p' against 'default', .*; 2 pairs: regressed when", out), out


def test_an_undecided_run_exits_with_its_own_status_when_asked(project, fake_vllm):
    """One pass a side gates nothing (a single pass's interval understates run-to-run
    noise): a rerun against its stored baseline is inconclusive whatever the machine's
    pace, and the test passes. (An A/B of two pairs was not enough: on a loaded machine a
    30% shift of ITL p99 between the sides came out regressed, run 4 of
    bench/results/cpu/tiers-loaded-7d4b0a9.txt.) By default the run exits 0; under
    ``--vllm-inconclusive=exit`` it exits ``INCONCLUSIVE_EXIT`` (6), so a CI system can
    tell "could not decide" from "decided unchanged". Broken on purpose (the option read
    but never applied), the last run exits 0 and this fails."""
    from pytest_vllm_perf.options import INCONCLUSIVE_EXIT

    def run(*args: str) -> pytest.RunResult:
        return project.runpytest_inprocess(
            f"--vllm-url={fake_vllm.url}", "--vllm-profile=p", "-p", "no:cacheprovider",
            "--vllm-repeat=1", "--vllm-json=report.json", *args,
        )  # fmt: skip

    run("--vllm-save-baseline").assert_outcomes(passed=1)
    quiet = run()
    quiet.assert_outcomes(passed=1)
    assert quiet.ret == pytest.ExitCode.OK
    (found,) = json.loads((project.path / "report.json").read_text())["results"]
    assert found["baseline"]["verdict"] == "inconclusive", found["baseline"]
    told = run("--vllm-inconclusive=exit")
    told.assert_outcomes(passed=1)
    assert told.ret == INCONCLUSIVE_EXIT == 6


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


def test_ab_mode_usage_errors(project, fake_vllm, monkeypatch):
    result = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab=nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--vllm-ab: unknown vLLM profile 'nosuch'*"])  # names the option
    result = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab=default", "--vllm-save-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--vllm-ab compares two live sides and stores nothing*"])
    # one server someone started cannot be both sides; found before any request
    result = run(project, fake_vllm, "--vllm-ab=default")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert fake_vllm.requests == []
    [line] = [ln for ln in result.stderr.lines if ln.startswith("ERROR:")]
    assert "--vllm-url measures one server you started" in line
    result = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab=default@no-such-venv")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--vllm-ab 'default@no-such-venv': expected PROFILE@VENV*no-such-venv is not an exec*"]
    )


def test_promoted_report_is_the_baseline_a_save_writes(project, fake_vllm, capsys):
    """A --vllm-json report promoted by the CLI holds the same passes as --vllm-save-baseline
    wrote in the same run; two reports make two boots, and the next run gates against them."""
    from pytest_vllm_perf.tools import main as vllm_perf

    run(project, fake_vllm, "--vllm-save-baseline", "--vllm-json=r1.json").assert_outcomes(passed=1)
    # the second report judged against nothing: an A/A of timed fake-server passes can
    # come out regressed on a busy machine (x3.2 and x4.2 at load average 5-15), and
    # what is checked here is the promotion, not that verdict
    nothing = project.path / "empty-store"
    run(
        project, fake_vllm, "--vllm-json=r2.json", f"--vllm-baseline-dir={nothing}"
    ).assert_outcomes(passed=1)
    saved = json.loads(stored(project)[0].read_text())
    store = project.path / "promoted"
    reports = [str(project.path / "r1.json"), str(project.path / "r2.json")]
    assert vllm_perf(["promote", *reports, "--store", str(store)]) == 0
    assert "2 boot(s)" in capsys.readouterr().out
    (path,) = sorted(store.rglob("*.json"))
    assert path.relative_to(store) == stored(project)[0].relative_to(project.path / ".vllm-perf")
    promoted = json.loads(path.read_text())
    assert [b["promoted_from"] for b in promoted["boots"]] == reports
    for key in ("test", "profile", "profile_hash", "workload", "workload_hash"):
        assert promoted[key] == saved[key], key
    first, mine = promoted["boots"][0], saved["boots"][0]
    assert first["environment"] == mine["environment"]
    assert [p["metrics"] for p in first["passes"]] == [p["metrics"] for p in mine["passes"]]
    newest = json.loads((project.path / "r2.json").read_text())["results"][0]
    assert promoted["distribution"] == newest["distribution"]  # the newest boot's, as saves do
    assert "hf_supersecretvalue1" not in path.read_text()

    result = run(project, fake_vllm, f"--vllm-baseline-dir={store}", "--vllm-json=r3.json")
    outcomes = result.parseoutcomes()  # the A/A's verdict is not this test's claim
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, result.stdout.str()
    gate = json.loads((project.path / "r3.json").read_text())["results"][0]["baseline"]
    assert gate["path"] == str(path) and gate["status"] == "compared", gate
    assert gate["verdicts"] and all("2 baseline boots" in v["basis"] for v in gate["verdicts"])


def test_promote_refuses_a_report_of_another_workload(project, fake_vllm, capsys):
    from pytest_vllm_perf.tools import main as vllm_perf

    run(project, fake_vllm, "--vllm-json=r1.json").assert_outcomes(passed=1)
    data = json.loads((project.path / "r1.json").read_text())
    data["results"][0]["workload"]["duration_s"] = 2
    (project.path / "r2.json").write_text(json.dumps(data))
    store = project.path / "promoted"
    args = ["promote", str(project.path / "r1.json"), str(project.path / "r2.json")]
    assert vllm_perf([*args, "--store", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot add a boot: the workload differs" in err and "\n" not in err
    assert not list(store.rglob("*.json"))  # nothing half-written
    (project.path / "bad.json").write_text("{}")
    assert vllm_perf(["promote", str(project.path / "bad.json"), "--store", str(store)]) == 2
    assert "bad.json: not a --vllm-json report" in capsys.readouterr().err
