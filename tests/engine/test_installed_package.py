"""The plugin as a user gets it: a built wheel, installed into a fresh virtual environment,
run from a folder outside this repository that has no profiles/ (real CPU engine).

The project holds the README's first perf test, copied from the README's code block, so
that what the README tells a new user is what runs here. The shipped profile it runs is
``api-servers-2``, so the same boot also shows that a
profile with ``api_server_count: 2`` boots through the launcher and serves text
prompts, tokenized by the server (a test of its own until CI's boots were counted).

Broken on purpose (the profiles left out of pyproject.toml's package-data), both tests
fail: "shipped: no such folder"."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.real_engine import require_engine

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]
PERF_TEST = """
import pytest_vllm_perf

@pytest.mark.vllm_perf(workload="tokenizer_pressure", duration_s=4, warmup_requests=1,
                       repeat=1, text={"rate": 2.0, "prompt_tokens": 300})
def test_text(vllm_perf):
    outcome = vllm_perf.run()
    assert outcome.result.metrics["completed"] >= 2
    assert outcome.provenance.profile_settings["engine"]["api_server_count"] == 2
    # text prompts, tokenized by the server: the embedded word-level tokenizer is exact
    assert {r.prompt_tokens for r in outcome.result.records} == {300}
    print("PLUGIN FROM", pytest_vllm_perf.__file__)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the wheel installed; the CPU engine comes from this environment."""
    require_engine()
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "pytest_vllm_perf", src / "pytest_vllm_perf",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(src)],
        check=True,
        timeout=300,
    )
    [wheel] = (root / "dist").glob("pytest_vllm_perf-*.whl")
    venv = root / "venv"
    # uv where make setup installed it (the same install of a wheel in a fraction of
    # the time: a venv with pip took 7 s of CI's two idle cores, uv's install 0.2 s),
    # else pip
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    venv_args = ["--without-pip"] if uv else []
    subprocess.run([sys.executable, "-m", "venv", *venv_args, str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # Reuse the installed engine: a plain path line, so this environment's .pth files
    # (the editable install of the repository among them) are not run.
    Path(purelib, "reuse-engine.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = (
        [uv, "pip", "install", "-q", "--python", str(python)]
        if uv
        else [str(python), "-m", "pip", "install", "-q"]
    )
    subprocess.run([*install, "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
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
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-s", *args],
        cwd=python.parents[2] / "project",
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_shipped_profile_runs_from_a_folder_without_profiles(installed):
    # two passes for the README's test (its own default is 8); test_text pins repeat=1
    result = run(installed, "--vllm-profile=api-servers-2", "--vllm-repeat=2", "-rA")
    out = result.stdout + result.stderr
    assert "PASSED test_text.py::test_text" in out, out[-4000:]
    # the README's test ran its load; its SLO is a GPU chat service's, which two shared
    # cores may miss: then it fails on a latency threshold, and on nothing else (no
    # failed request, no error, no other test)
    first = re.search(r"(PASSED|FAILED) test_first.py::test_chat_slo.*", out)
    assert first, out[-4000:]
    if first.group(1) == "FAILED":
        assert "vLLM perf thresholds failed" in out and "1 failed, 1 passed" in out, out[-4000:]
        missed = re.findall(r"^\s*FAIL (\S+): ", out, re.MULTILINE)
        assert missed and set(missed) <= {"ttft_p99_ms", "itl_p99_ms"}, out[-4000:]
        assert re.search(r"^\s*ok\s+failed: 0 ", out, re.MULTILINE), out[-4000:]
    else:
        assert result.returncode == 0, out[-4000:]
    # what each test cost, on the real engine: the boot is charged to the test that
    # waited for it (the first to run), none to the next, and no energy without NVML
    table = out.split("what each test cost:\n", 1)[-1].splitlines()
    rows = [line.split() for line in table[1:3]]
    assert [r[0] for r in rows] == ["test_first.py::test_chat_slo", "test_text.py::test_text"]
    assert float(rows[0][2]) > 0 and float(rows[1][2]) == 0 and rows[1][4] == "0", table[:4]
    assert "energy not measured: no NVIDIA GPU (the CPU engine)" in out, table[:5]
    assert "PLUGIN FROM " + str(installed.parents[1]) in out  # the wheel, not the checkout
    assert not (installed.parents[2] / "project" / "profiles").exists()


def test_unknown_profile_lists_the_shipped_ones(installed):
    result = run(installed, "--vllm-profile=nosuch")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "unknown vLLM profile 'nosuch'" in result.stderr
    assert (
        "shipped: api-servers-2, chunked, default, no-prefix-cache, roomy-kv, small-kv, tuned"
        in result.stderr
    )
