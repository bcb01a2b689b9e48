"""A scratch git repository for tests of what reads profiles at a revision."""

from __future__ import annotations

import subprocess
from pathlib import Path


def commit_all(repo: Path, message: str = "suite") -> None:
    """A new repository at ``repo`` holding everything in it as one commit."""
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def git(repo: Path, *args: str) -> None:
    """Run git in ``repo`` with a fixed identity, so commits work on a bare CI user."""
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )
