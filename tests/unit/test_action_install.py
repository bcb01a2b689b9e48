"""The Action's install step, run as its own bash against a stub interpreter whose pip
records what it was asked: a remote ``uses:`` names its ref in the version (it was
0.1.0 whatever the ref), and ``extras: cpu`` brings the CPU torch index and removes the
three packages that break the CPU engine (it had neither). Broken on purpose (either
part of the step removed), its check fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STUB = """#!/bin/bash
# a stub python: `python -m venv DIR` makes DIR/bin/pip, which logs its calls
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  v='${SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST_VLLM_PERF:-}'
  printf '#!/bin/bash\\necho "pip $* version=%s" >> %s\\n' "$v" "$LOG" > "$3/bin/pip"
  chmod +x "$3/bin/pip"
fi
"""


def install_step() -> str:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    [step] = [s for s in action["runs"]["steps"] if s.get("name") == "Install pytest-vllm-perf"]
    return str(step["run"])


def run(tmp_path: Path, ref: str, extras: str) -> list[str]:
    log = tmp_path / "pip.log"
    log.unlink(missing_ok=True)
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    action = tmp_path / "action"  # a remote checkout: no .git
    action.mkdir(exist_ok=True)
    env = {
        **os.environ, "LOG": str(log), "PYTHON": str(stub), "ACTION_PATH": str(action),
        "ACTION_REF": ref, "EXTRAS": extras, "CONSTRAINTS": "", "RUNNER_TEMP": str(tmp_path),
        "GITHUB_PATH": str(tmp_path / "path"),
    }  # fmt: skip
    subprocess.run(["bash", "-euo", "pipefail", "-c", install_step()], env=env, check=True)
    return log.read_text().splitlines()


@pytest.mark.parametrize(
    ("ref", "version"),
    [("v1.2.3", "1.2.3"), ("0123456789abcdef0123", "0.1.0+ref.0123456789abcdef0123"),
     ("main", "0.1.0+ref.main")],
)  # fmt: skip
def test_a_remote_uses_names_its_ref_in_the_version(tmp_path, ref, version):
    [install] = run(tmp_path, ref, "gpu")
    assert install.endswith(f"version={version}"), install
    assert "download.pytorch.org" not in install


def test_the_cpu_extra_brings_the_cpu_torch_index_and_removes_what_breaks_it(tmp_path):
    install, uninstall = run(tmp_path, "v1.0.0", "cpu,plots")
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in install, install
    assert install.split(" version=")[0].endswith("/action[cpu,plots]"), install
    assert uninstall.startswith("pip uninstall -y -q torchvision torchaudio torchcodec")
