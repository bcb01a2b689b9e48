"""The plugin tier's shared project: a perf test on the mixed workload and a profile
``p`` that carries a secret (tests/plugin/test_gate.py and test_ab_gate.py)."""

from __future__ import annotations

import pytest

PERF_TEST = """
import pytest

@pytest.mark.vllm_perf(workload="mixed", duration_s=0.5, warmup_requests=1,
                       chat={"users": 4, "output_tokens": 8},
                       long={"rate": 4.0, "prompt_tokens": 64, "output_tokens": 4})
def test_perf(vllm_perf):
    vllm_perf.run()
"""


@pytest.fixture
def project(perf_project, fake_vllm):
    perf_project.makepyfile(PERF_TEST)
    (perf_project.path / "profiles" / "p.yaml").write_text(
        "extends: default\nenv: {HF_TOKEN: hf_supersecretvalue1}\n"
    )
    return perf_project
