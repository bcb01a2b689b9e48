"""The GPU workflow installs the vLLM release its committed baselines were measured with."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pinned() -> str:
    lines = (REPO / ".github" / "gpu-constraints.txt").read_text().splitlines()
    [pin] = [m.group(1) for line in lines if (m := re.fullmatch(r"vllm==(\S+)", line.strip()))]
    return pin


def test_gpu_workflow_installs_through_the_constraints_file():
    workflow = (REPO / ".github" / "workflows" / "gpu-perf.yml").read_text()
    assert "pip install -c .github/gpu-constraints.txt -e '.[gpu,plots]'" in workflow


def test_every_committed_gpu_baseline_was_measured_with_the_pinned_release():
    files = sorted((REPO / ".vllm-perf").glob("*nvidia*/*/*.json"))
    assert files, "no committed GPU baselines"
    for path in files:
        versions = {b["environment"]["vllm_version"] for b in json.loads(path.read_text())["boots"]}
        assert versions == {pinned()}, (path, versions)


def test_every_committed_example_baseline_was_measured_on_the_current_preset():
    """Re-saved on the H200 (bench/gpu/gpu_gate.sh, two boots); before, the baselines were
    of the word-level preset and the GPU workflow failed every pull request at
    collection (an xfail, strict, marked that until now)."""
    from pytest_vllm_perf.serving import models

    files = sorted((REPO / ".vllm-perf").glob("*nvidia*/examples-*/*.json"))
    assert files, "no committed GPU baselines of the examples"
    current = models.folder_name(models.LLAMA_8B)
    for path in files:
        found = {b["environment"]["model"] for b in json.loads(path.read_text())["boots"]}
        assert found == {current}, (path, found)
