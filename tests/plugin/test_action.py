"""The GitHub Action (action.yml) as GitHub would run its gate step: the step's own
script under ``bash -eo pipefail``, its env built from the inputs as GitHub evaluates
them, ``vllm-perf`` on PATH (the ``install: false`` path), against the fake server.
The install and check-run steps need a runner and GitHub; actionlint checks their wiring
(``make lint``: the repository's GPU workflow calls the Action with ``uses: ./``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.scratch_git import commit_all, git

REPO = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((REPO / "action.yml").read_text())


def evaluate(text: str, inputs: dict[str, str]) -> str:
    """``${{ inputs.a || github.x }}`` as GitHub reads it: the first non-empty term; an
    input not given takes its default; nothing of ``github.`` exists off GitHub."""

    def term(name: str) -> str:
        name = name.strip()
        if name.startswith("inputs."):
            key = name.removeprefix("inputs.")
            assert key in ACTION["inputs"], f"action.yml has no input {key!r}"
            return inputs.get(key, str(ACTION["inputs"][key].get("default", "")))
        return ""

    def expr(match: re.Match[str]) -> str:
        return next((v for v in map(term, match[1].split("||")) if v.strip()), "")

    return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", expr, text)


def run_gate_step(project, tmp_path, **inputs: str) -> tuple[int, dict[str, str], str]:
    (step,) = [s for s in ACTION["runs"]["steps"] if s.get("id") == "gate"]
    env = {k: evaluate(str(v), inputs) for k, v in step["env"].items()}
    outputs, summary = tmp_path / "github-output", tmp_path / "step-summary"
    outputs.write_text("")
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=project.path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    return done.returncode, found, done.stdout + done.stderr


def test_the_actions_gate_step_passes_then_fails_and_says_so_in_its_outputs(
    project, fake_vllm, tmp_path
):
    """A stored step that saves passes: outcome pass, the job summary and a success check
    run body. A profile whose threshold nothing meets fails the step with the gate's
    status. Seen failing with the step's last line removed (no outputs written)."""
    commit_all(project.path)
    args = f"--vllm-url={fake_vllm.url} --vllm-repeat=2 -p no:cacheprovider"
    common = {"suite": ".", "base": "HEAD", "pytest-args": args, "out": "gate-out"}
    status, found, log = run_gate_step(
        project, tmp_path, stored="p", **{"stored-mode": "save"}, **common
    )
    assert status == 0, log
    assert found["outcome"] == "pass" and found["exit-status"] == "0", found
    assert found["gpu-minutes"] == "0" and Path(project.path, found["summary"]).is_file()
    assert "# vLLM perf gate against `HEAD`" in (tmp_path / "step-summary").read_text()
    assert "::notice title=vLLM perf::PASS: stored passed; ab skipped" in log
    assert '"conclusion": "success"' in (project.path / "gate-out/check-run.json").read_text()

    (project.path / "profiles" / "strict.yaml").write_text(
        "extends: default\nthresholds: {ttft_p99_ms: 0.001}\n"
    )
    git(project.path, "add", "-A")  # committed: no profile changed since HEAD, no A/B step
    git(project.path, "commit", "-qm", "a profile nothing meets")
    status, found, log = run_gate_step(
        project, tmp_path, stored="strict", **{"stored-mode": "save"}, **common
    )
    assert status == 1, log
    assert found["outcome"] == "fail" and found["exit-status"] == "1", found
    assert "::error title=vLLM perf::FAIL: stored a perf test failed" in log
    assert '"conclusion": "failure"' in (project.path / "gate-out/check-run.json").read_text()
