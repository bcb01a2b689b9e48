"""One naming rule for every store: ``ROOT/HARDWARE/TEST/PROFILE.EXT``, each part slugged.

A baseline (``.json``), a capacity search (its test id ending ``#capacity``) and a
history file (``.csv``) of the same test, profile and hardware class differ only in
their root, their suffix or that ending, so one listing of a folder finds every store
of a test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final, Literal

__all__ = ["CAPACITY_SUFFIX", "Suffix", "capacity_test", "path_for", "slug", "under_hardware"]

Suffix = Literal[".json", ".csv"]
CAPACITY_SUFFIX: Final = "#capacity"


def slug(text: str) -> str:
    """A file-name-safe form of a test id, profile or hardware class."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "unnamed"


def under_hardware(test_id: str, profile: str, suffix: Suffix = ".json") -> str:
    """A store's path below its hardware class's folder: ``TEST/PROFILE.EXT``."""
    return f"{slug(test_id)}/{slug(profile)}{suffix}"


def path_for(
    root: Path, hardware_class: str, test_id: str, profile: str, suffix: Suffix = ".json"
) -> Path:
    return root / slug(hardware_class) / under_hardware(test_id, profile, suffix)


def capacity_test(test_id: str) -> str:
    """The id a capacity search is stored under: beside the test's workload baselines, in
    a folder of its own (a test may call ``run`` and ``capacity`` both)."""
    return test_id + CAPACITY_SUFFIX
