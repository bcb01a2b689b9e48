"""``--vllm-ab-rev``: a revision's profiles as the base side, through the plugin (fake
server). Apart from tests/plugin/test_ab_gate.py, whose runners it shares, so that CI's
workers (which take whole files) spread that file's longest test to another."""

from __future__ import annotations

import json

import pytest

from tests.plugin.test_ab_gate import judged_once
from tests.plugin.test_gate import run_ab
from tests.scratch_git import git


def test_ab_rev_judges_each_profile_against_itself_at_a_revision(project, fake_vllm, monkeypatch):
    """--vllm-ab-rev reads the profiles as committed at REV with git (nothing checked
    out); a profile REV lacks is judged against default, and the note says so. Both
    sides measure the one fake server here: the mechanism; the engine tests run it."""
    git(project.path, "init", "-q")
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "base")
    (project.path / "profiles" / "p.yaml").write_text("extends: default\nengine: {seed: 7}\n")
    result = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab-rev=HEAD", "--vllm-json=ab.json")
    judged_once(result)
    [found] = json.loads((project.path / "ab.json").read_text())["results"]
    gate = found["baseline"]
    assert gate["status"] == "a/b"
    assert "'p' against 'p@HEAD'" in gate["note"]
    assert "profile engine.seed (unset) -> 7" in gate["changes"]
    # a profile the revision does not have: judged against default, and said so
    (project.path / "profiles" / "new.yaml").write_text("extends: default\n")
    fresh = run_ab(
        project, fake_vllm, monkeypatch, "--vllm-ab-rev=HEAD", "--vllm-json=new.json",
        profile="new", repeat=2,
    )  # fmt: skip
    fresh.assert_outcomes(passed=1)
    [found] = json.loads((project.path / "new.json").read_text())["results"]
    assert "'new' against 'default@HEAD'" in found["baseline"]["note"]
    assert (
        "profile 'new' does not exist at HEAD: judged against 'default'"
        in found["baseline"]["note"]
    )
    assert not (project.path / ".vllm-perf").exists()  # an A/B run stores nothing


def test_ab_rev_usage_errors(project, fake_vllm, monkeypatch):
    git(project.path, "init", "-q")
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "base")
    bad = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab-rev=no-such-rev")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--vllm-ab-rev 'no-such-rev': not a commit of*"])
    both = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab-rev=HEAD", "--vllm-ab=default")
    assert both.ret == pytest.ExitCode.USAGE_ERROR
    both.stderr.fnmatch_lines(["*--vllm-ab and --vllm-ab-rev exclude each other*"])
    saving = run_ab(project, fake_vllm, monkeypatch, "--vllm-ab-rev=HEAD", "--vllm-save-baseline")
    assert saving.ret == pytest.ExitCode.USAGE_ERROR
