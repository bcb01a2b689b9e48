"""Engine settings checked by the vLLM that will serve them, before any boot.

A value vLLM rejects (``max_num_seqs: four``, a flag this release does not have) would
otherwise surface only when its server boots: after every earlier profile's tests in a
session, minutes in. The launcher's ``check`` command builds vLLM's own ``serve``
parser in the interpreter the server will run in and parses each command line; one
process per interpreter, 7-9 s on this 2-core VM (the import of vLLM's argument
modules). Command lines it accepted are remembered in the user's cache folder
(``$XDG_CACHE_HOME/pytest-vllm-perf``, else ``~/.cache/pytest-vllm-perf``), keyed by
interpreter and flags, so a rerun, or another project on the same environment, pays
nothing; a vLLM upgraded in place under the same interpreter is caught by its boot, as
before this check. A memo that cannot be written is skipped: the next run checks again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.records import Progress
from pytest_vllm_perf.serving.server import QUIET_ENV, ServerSpec

__all__ = ["CHECK_TIMEOUT_S", "Candidate", "memo_dir", "reject_lines"]

# the import of vLLM's parser took 7-9 s here; a stalled machine gets ample room, and
# a check that times out leaves the boot to find the error, as before
CHECK_TIMEOUT_S: Final = 300.0
_FLAG = re.compile(r"--(?:no-)?([a-z0-9][a-z0-9-]*)")


@dataclass(frozen=True)
class Candidate:
    """A profile and the server spec it resolves to (its interpreter and flags)."""

    profile: Profile
    spec: ServerSpec


def memo_dir() -> Path:
    """Where accepted command lines are remembered (module docstring)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-vllm-perf" / "engine-args-accepted"


def _key(spec: ServerSpec) -> str:
    # 2: flags spelt out in full (abbreviations refused since): older memos are stale
    body = json.dumps([2, spec.python, list(spec.launcher), list(spec.engine_argv)])
    return hashlib.sha256(body.encode()).hexdigest()[:24]


def _where(profile: Profile, message: str) -> str:
    """The profile key a parser message names (``engine.max_num_seqs``), else ``engine``."""
    for match in _FLAG.finditer(message):
        key = match.group(1).replace("-", "_")
        for section, values in (("cpu", profile.cpu), ("engine", profile.engine)):
            if key in values:
                return f"{section}.{key}"
    return "engine"


def _run_check(
    python: str, launcher: Sequence[str], lines: Mapping[str, list[str]], env: Mapping[str, str]
) -> dict[str, str] | str:
    """The launcher's verdict per command line, or why there is none."""
    try:
        done = subprocess.run(  # noqa: S603 - our launcher, argv list, no shell
            [python, *launcher, "check"],
            input=json.dumps(dict(lines)),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            env=dict(env),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit {done.returncode}: {tail}"
    if not isinstance(found, dict):
        return "the launcher answered no verdicts"
    if "" in found:
        return str(found[""])
    return {str(k): str(v) for k, v in found.items()}


def reject_lines(candidates: Sequence[Candidate], memo: Path, progress: Progress) -> list[str]:
    """One line per profile whose flags the serving vLLM's parser rejects, naming the
    profile's file and key; [] when all parse (or could not be checked, said as progress).
    ``memo``: the folder of accepted command lines (``memo_dir()``)."""
    pending: dict[tuple[str, tuple[str, ...]], dict[str, Candidate]] = {}
    for c in candidates:
        key = _key(c.spec)
        if not (memo / key).is_file():
            pending.setdefault((c.spec.python, c.spec.launcher), {})[key] = c
    problems: list[str] = []
    for (python, launcher), group in pending.items():
        lines = {key: list(c.spec.engine_argv) for key, c in group.items()}
        # the server's environment, so that the check sees the vLLM it will
        env = {**os.environ, **QUIET_ENV, **next(iter(group.values())).spec.env}
        # said first: the check was silent for 83 s on a 2-core machine
        names = ", ".join(sorted({c.profile.name for c in group.values()}))
        progress(
            f"checking {names}'s engine settings with vLLM's own parser before any boot "
            "(it imports vLLM: up to a minute or two on a small machine)"
        )
        verdicts = _run_check(python, launcher, lines, env)
        if isinstance(verdicts, str):
            progress(f"engine settings not checked before the boot ({python}): {verdicts}")
            continue
        for key, c in group.items():
            message = verdicts.get(key, "")
            if message:
                where = _where(c.profile, message)
                problems.append(f"{c.profile.path}: {where}: vLLM's argument parser: {message}")
            else:
                with contextlib.suppress(OSError):  # unwritable: checked again next time
                    atomic.write_text(memo / key, "accepted\n")
    return problems
