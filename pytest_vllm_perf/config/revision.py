"""Profiles as committed at a git revision: the base side of ``--vllm-ab-rev``.

A pull request is judged against its base: each profile it runs is compared with
the same profile as committed at the base revision. The files are read with
``git show`` into a private folder, never checked out, so the working tree (and
the tests that drive both sides) stays the pull request's. The user's profiles
folder and, where the repository holds them, the shipped profiles are read at the
revision; shipped profiles installed from a package are the same on both sides.
Shipped profiles are always the installed package's, never read from git: in the
usual layout the package lives in a virtual environment inside the repository
(a gitignored ``.venv``), whose files no revision holds.
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pytest_vllm_perf.config import profiles
from pytest_vllm_perf.core.errors import ProfileError

__all__ = ["FALLBACK", "Revision", "resolve"]

FALLBACK = "default"  # what a profile that does not exist at the revision is judged against


def _git(args: Sequence[str], cwd: Path) -> str:
    done = subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["git", *args],  # noqa: S607 - git from PATH, as a user runs it
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ProfileError(f"git {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _copy_at(top: Path, commit: str, folder: Path, copy: Path) -> Path:
    """The YAML files of ``folder`` as committed at ``commit``, copied into ``copy``;
    a folder outside the repository is used as it is."""
    try:
        rel = folder.resolve().relative_to(top.resolve())
    except ValueError:
        return folder  # outside the repository
    copy.mkdir(parents=True, exist_ok=True)
    try:
        listing = _git(["ls-tree", "--name-only", f"{commit}:{rel.as_posix() or '.'}"], top)
    except ProfileError:
        listing = ""  # the folder did not exist at the revision
    for name in listing.split():
        if name.endswith(".yaml"):
            text = _git(["show", f"{commit}:{(rel / name).as_posix()}"], top)
            (copy / name).write_text(text, encoding="utf-8")
    return copy


@dataclasses.dataclass(frozen=True)
class Revision:
    """The profile folders as committed at one revision, copied into ``folders``."""

    rev: str
    commit: str
    folders: tuple[Path, ...]

    def load(self, name: str) -> tuple[profiles.Profile, str]:
        """Profile ``name`` as committed at the revision, named ``NAME@REV``, and a note;
        a profile the revision does not have is judged against ``default``, and the
        note says so."""
        note = ""
        try:
            found = profiles.load(name, self.folders)
        except ProfileError as exc:
            if not str(exc).startswith(f"unknown vLLM profile {name!r}"):
                raise
            found = profiles.load(FALLBACK, self.folders)
            note = f"profile {name!r} does not exist at {self.rev}: judged against {FALLBACK!r}"
        return dataclasses.replace(found, name=f"{found.name}@{self.rev}"), note


def resolve(rev: str, user_dir: Path, into: Path | None = None) -> Revision:
    """The revision ``rev`` of the git repository holding ``user_dir`` (or its nearest
    existing parent), with its profile folders copied under ``into`` (by default a new
    temporary folder, removed when the process exits); ProfileError naming the
    revision when git cannot read it."""
    start = user_dir
    while not start.is_dir():
        start = start.parent
    top = Path(_git(["rev-parse", "--show-toplevel"], start).strip())
    try:
        commit = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], top).strip()
    except ProfileError:
        raise ProfileError(f"--vllm-ab-rev {rev!r}: not a commit of {top}") from None
    if into is None:  # a temporary folder of this process's, removed when it exits
        into = Path(tempfile.mkdtemp(prefix="vllm-perf-rev-"))
        atexit.register(shutil.rmtree, into, ignore_errors=True)
    folders: list[Path] = []
    if user_dir.resolve() != profiles.SHIPPED:
        folders.append(_copy_at(top, commit, user_dir, into / "0"))
    folders.append(profiles.SHIPPED)  # the installed package's, the same on both sides
    return Revision(rev, commit, tuple(folders))
