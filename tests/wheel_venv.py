"""The plugin as a user installs it: the built wheel in a virtual environment of its own,
which reuses this environment's CPU engine (for the engine tier's tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def wheel_venv(build: Path, venv: Path) -> Path:
    """Build the wheel under ``build`` and install it alone into a new ``venv``; its
    python. The engine comes from this environment through a plain path line."""
    src = build / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "pytest_vllm_perf", src / "pytest_vllm_perf",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(build / "dist"), str(src)],
        check=True,
        timeout=300,
    )
    [wheel] = (build / "dist").glob("pytest_vllm_perf-*.whl")
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
    return python
