"""The Action's last step (``vllm-perf action-outputs``): what prgate decided, told to
GitHub as outputs, an annotation and a check run body. tests/plugin/test_action.py runs
the Action's gate step itself."""

from __future__ import annotations

import json

import pytest

from pytest_vllm_perf.tools import action, prgate


def gate_folder(tmp_path, *statuses: int):
    tmp_path.mkdir()
    steps = [prgate.Step(f"s{i}", ("python",), s, 90.0, "") for i, s in enumerate(statuses)]
    (tmp_path / "gate.json").write_text(json.dumps(prgate.figures(steps, 1)))
    (tmp_path / "summary.md").write_text(prgate.summary(steps, 1, "HEAD~1"))
    return tmp_path


def read_outputs(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.mark.parametrize(("mode", "status"), [("neutral", 0), ("fail", 6), ("pass", 0)])
def test_an_undecided_gate_ends_the_step_as_the_user_chose(
    tmp_path, monkeypatch, capsys, mode, status
):
    """An undecided gate is a neutral check run and a warning by default, exit 6 when
    asked to fail. Seen failing with every outcome but pass mapped to the gate's status."""
    out = gate_folder(tmp_path / "out", 0, 6)
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "outputs"))
    assert action.main([str(out), "--status", "6", "--inconclusive", mode]) == status
    found = read_outputs(tmp_path / "outputs")
    assert found["outcome"] == "inconclusive" and found["exit-status"] == "6"
    assert found["gpu-minutes"] == "3" and found["summary"] == str(out / "summary.md")
    check = json.loads((out / "check-run.json").read_text())
    assert check["conclusion"] == "neutral" and check["output"]["title"].startswith("INCONCLUSIVE")
    assert "::warning title=vLLM perf::INCONCLUSIVE: s0 passed" in capsys.readouterr().out


def test_a_failed_gate_fails_the_step_with_its_status(tmp_path, monkeypatch, capsys):
    out = gate_folder(tmp_path / "out", 1, 0)
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "outputs"))
    assert action.main([str(out), "--status", "1"]) == 1
    assert read_outputs(tmp_path / "outputs")["outcome"] == "fail"
    assert json.loads((out / "check-run.json").read_text())["conclusion"] == "failure"
    assert "::error title=vLLM perf::FAIL: s0 a perf test failed" in capsys.readouterr().out


def test_the_headline_is_read_from_gate_json_not_the_markdown(tmp_path, monkeypatch, capsys):
    """The annotation took the summary's bold line: printed text read back. Broken on
    purpose (the Markdown read), the line is the Markdown's, not gate.json's."""
    out = gate_folder(tmp_path / "out", 1, 0)
    (out / "summary.md").write_text("**something else entirely**\n")
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "outputs"))
    assert action.main([str(out), "--status", "1"]) == 1
    said = capsys.readouterr().out
    assert "::error title=vLLM perf::FAIL: s0 a perf test failed" in said, said
    assert "something else" not in said


def test_a_gate_that_wrote_nothing_is_an_error_not_a_pass(tmp_path, monkeypatch):
    """prgate refused its arguments (exit 2) before any step: no gate.json. Seen failing
    with a missing gate.json read as an empty, passing gate."""
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "outputs"))
    assert action.main([str(tmp_path / "out"), "--status", "2"]) == 2
    assert read_outputs(tmp_path / "outputs")["outcome"] == "error"
    assert action.main([str(tmp_path / "out2"), "--status", "0"]) == 1  # never a pass
