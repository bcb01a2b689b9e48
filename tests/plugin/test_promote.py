"""``vllm-perf promote``: --vllm-json reports made a stored baseline, through the plugin
(fake server).

Apart from tests/plugin/test_ab_gate.py, where it was, so that CI's xdist workers (which
take whole files) spread the files that time the fake server more evenly
(tests/conftest.py, ``TIMED``)."""

from __future__ import annotations

import json

from tests.plugin.test_gate import run, stored


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
