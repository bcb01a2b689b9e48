"""The plugin as a user gets it: a built wheel, installed into a fresh virtual environment,
run from a folder outside this repository that has no profiles/ (real CPU engine), under
``pytest -n 2``.

The project holds the README's first perf test, copied from the README's code block, so
that what the README tells a new user is what runs here, on the shipped ``default``
profile; its other file runs the shipped ``api-servers-2``, so that a profile with
``api_server_count: 2`` boots through the launcher and serves text prompts, tokenized by
the server. The two files go to two pytest-xdist workers (``--dist loadfile``), each
booting its own server with its engine bound to a core of its own, and the controller
prints one summary and writes one report: the many-worker run on real engines, on the
boots this file pays for anyway (one more than a one-process run of the same tests).

Broken on purpose (the profiles left out of pyproject.toml's package-data), both tests
fail: "shipped: no such folder". Broken on purpose (every worker given core 0 in
``state.own_devices``), the engines' cores are one and the first test fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.real_engine import require_engine
from tests.wheel_venv import wheel_venv

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
PERF_TEST = """
import pytest_vllm_perf

@pytest.mark.vllm_perf(workload="tokenizer_pressure", profile="api-servers-2", duration_s=4,
                       warmup_requests=1, repeat=1, text={"rate": 2.0, "prompt_tokens": 300})
def test_text(vllm_perf):
    outcome = vllm_perf.run()
    assert outcome.result.metrics["completed"] >= 2
    assert outcome.provenance.profile_settings["engine"]["api_server_count"] == 2
    # text prompts, tokenized by the server: the embedded word-level tokenizer is exact
    assert {r.prompt_tokens for r in outcome.result.records} == {300}
    print("PLUGIN FROM", pytest_vllm_perf.__file__)


# the same server again: its boot was charged to the test that waited for it, not here
@pytest.mark.vllm_perf(workload="tokenizer_pressure", profile="api-servers-2", duration_s=2,
                       warmup_requests=1, repeat=1, text={"rate": 2.0, "prompt_tokens": 300})
def test_text_again(vllm_perf):
    vllm_perf.run()
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the wheel installed; the CPU engine comes from this environment."""
    require_engine()
    root = tmp_path_factory.mktemp("installed")
    python = wheel_venv(root, root / "venv")
    project = root / "project"
    project.mkdir()
    (project / "test_text.py").write_text("import pytest\n" + PERF_TEST)
    (project / "test_first.py").write_text(readme_first_test())
    return python


def readme_first_test() -> str:
    """The README's "A first perf test" code block, the one that starts ``# test_first.py``."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    [first] = [b for b in blocks if b.startswith("# test_first.py")]
    return first


def run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # not this worker's own core (the plugin's, for its own engines): the run's workers
    # take theirs
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_CPU_OMP_THREADS_BIND")
    }
    return subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=python.parents[2] / "project",
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_shipped_profiles_run_from_a_folder_without_profiles_on_two_workers(installed):
    # two passes for the README's test (its own default is 8); test_text pins repeat=1
    result = run(
        installed, "-n", "2", "--dist", "loadfile", "--vllm-repeat=2", "-rA",
        "--vllm-json=all.json",
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert "PASSED test_text.py::test_text" in out, out[-4000:]
    assert "PASSED test_text.py::test_text_again" in out, out[-4000:]
    # the README's test ran its load; its SLO is a GPU chat service's, which two shared
    # cores may miss: then it fails on a latency threshold, and on nothing else (no
    # failed request, no error, no other test)
    first = re.search(r"(PASSED|FAILED) test_first.py::test_chat_slo.*", out)
    assert first, out[-4000:]
    if first.group(1) == "FAILED":
        assert "vLLM perf thresholds failed" in out and "1 failed, 2 passed" in out, out[-4000:]
        missed = re.findall(r"^\s*FAIL (\S+): ", out, re.MULTILINE)
        assert missed and set(missed) <= {"ttft_p99_ms", "itl_p99_ms"}, out[-4000:]
        assert re.search(r"^\s*ok\s+failed: 0 ", out, re.MULTILINE), out[-4000:]
    else:
        assert result.returncode == 0, out[-4000:]
    # one summary and one report from the controller, holding every worker's results
    assert out.count("vLLM perf summary") == 1, out[-4000:]
    project = installed.parents[2] / "project"
    doc = json.loads((project / "all.json").read_text())
    assert sorted(doc["run"]["merged"]) == ["gw0", "gw1"], doc["run"]
    results = {r["test"]: r for r in doc["results"]}
    assert sorted(results) == [
        "test_first.py::test_chat_slo",
        "test_text.py::test_text",
        "test_text.py::test_text_again",
    ]
    assert {r["profile"] for r in results.values()} == {"default", "api-servers-2"}
    # what each test cost, on the real engine: each worker's boot is charged to the test
    # that waited for it, none to the next on the same server, and no energy without NVML
    boots = {test: r["cost"]["boot_s"] for test, r in results.items()}
    assert boots["test_first.py::test_chat_slo"] > 0 and boots["test_text.py::test_text"] > 0
    assert boots["test_text.py::test_text_again"] == 0, boots
    table = out.split("what each test cost:\n", 1)[-1].splitlines()
    assert any(line.startswith("test_text.py::test_text_again") for line in table[1:4]), table
    assert "energy not measured: no NVIDIA GPU (the CPU engine)" in out, table[:5]
    # each worker's engine bound to a core of its own: as the results record it, and
    # as vLLM says in each server's log ("local_rank=0, core ids=[N]")
    cores = sorted(os.sched_getaffinity(0))[:2]
    bound = sorted(
        results[test]["environment"]["device_env"].get("VLLM_CPU_OMP_THREADS_BIND", "")
        for test in ("test_first.py::test_chat_slo", "test_text.py::test_text")
    )
    assert bound == sorted(str(c) for c in cores), bound
    logs = sorted((project / ".vllm-perf-cache" / "logs").glob("*.log"))
    engine_cores = sorted(
        c for log in logs for c in re.findall(r"core ids=\[(\d+)\]", log.read_text())
    )
    assert engine_cores == bound, (engine_cores, logs)
    assert "PLUGIN FROM " + str(installed.parents[1]) in out  # the wheel, not the checkout
    assert not (project / "profiles").exists()


def test_unknown_profile_lists_the_shipped_ones(installed):
    result = run(installed, "--vllm-profile=nosuch")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "unknown vLLM profile 'nosuch'" in result.stderr
    assert (
        "shipped: api-servers-2, chunked, default, no-prefix-cache, roomy-kv, small-kv, tuned"
        in result.stderr
    )
