"""Check the hand-kept index from each published result to the one command that made it.

``bench/results/INDEX.md`` is a table kept by hand: one row per result (a file, a folder
of one run, or a name prefix shared by a run's files) with exactly one backticked command.
This lists every ``bench/results/...`` path the README and ``docs/`` cite that no row
covers, every row whose command cell is not one command (or is a CPU burner, which is a
condition of a run and not its command), and every row whose path matches no file.
It exits 1 if it found any; tests/unit/test_docs.py runs the same checks.

    .venv/bin/python bench/results_index.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "bench" / "results" / "INDEX.md"
PATH = re.compile(r"bench/results/[A-Za-z0-9_./*{},-]*[A-Za-z0-9_/*}-]")
BURNER = re.compile(r"while\s+True")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def cited() -> dict[str, list[str]]:
    """Each cited path (braces expanded, cut at a glob's first ``*``) and where."""
    found: dict[str, list[str]] = {}
    for doc in documents():
        for rel in PATH.findall(doc.read_text(encoding="utf-8")):
            for path in _expand(rel.rstrip(".,")):
                found.setdefault(path.split("*", 1)[0], []).append(doc.name)
    return found


def _expand(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [p for alt in match.group(1).split(",") for p in _expand(head + alt + tail)]


def rows() -> list[tuple[str, list[str]]]:
    """(result path, the backticked commands of its command cell) per table row."""
    out = []
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `bench/results/") and len(cells) >= 2:
            out.append((cells[0].strip("`"), re.findall(r"`([^`]+)`", cells[1])))
    return out


def problems() -> list[str]:
    table = rows()
    found = []
    for path, commands in table:
        if len(commands) != 1:
            found.append(f"{path}: {len(commands)} commands in its row, not one")
        elif BURNER.search(commands[0]):
            found.append(f"{path}: its command is a CPU burner")
        if not list(ROOT.glob(path.rstrip("/") + "*")):
            found.append(f"{path}: no such result")
    for path, docs in cited().items():
        bare = path.rstrip("/")
        # a folder cited whole is covered by the rows of what it holds
        folder = (ROOT / bare).is_dir()
        if not any(_covers(r, bare) or (folder and r.startswith(bare + "/")) for r, _ in table):
            found.append(f"{path}: cited in {', '.join(sorted(set(docs)))}, no row of the index")
    return found


def _covers(row: str, path: str) -> bool:
    """A row names a file, a folder, or a prefix ending in ``-`` (``acceptance-``); it
    covers that path and what lies under it, not a sibling that merely starts alike."""
    if path == row.rstrip("/"):
        return True
    rest = path[len(row) :] if path.startswith(row) else ""
    return bool(rest) and (row.endswith(("/", "-")) or rest[0] in "./")


def main() -> int:
    found = problems()
    for line in found:
        print(f"{INDEX.relative_to(ROOT)}: {line}")
    print(f"{len(rows())} rows, {len(cited())} cited paths, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
