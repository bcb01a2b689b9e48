"""Reading the YAML files users write (profiles, workloads, claims): safe, and one line on error.

A malformed file is reported as ``FILE:LINE:COLUMN: malformed YAML: PROBLEM``, the way
compilers report it, rather than PyYAML's four-line excerpt, so that a usage error stays
one line that names the file and the place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pytest_vllm_perf.core.errors import VllmPerfError

__all__ = ["load"]


def load(path: Path, error: type[VllmPerfError], what: str) -> Any:
    """``yaml.safe_load`` of ``path``; ``error`` (one line naming the file) if it cannot be
    read or parsed. ``what`` says what the file is, for the unreadable case."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        detail = f"{problem} ({context})" if context else problem
        raise error(f"{where}: malformed YAML: {detail}") from None
