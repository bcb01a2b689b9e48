"""The tools wing: every command the plugin has outside pytest, ``vllm-perf NAME``
(or ``python -m pytest_vllm_perf NAME``), behind this one table.

Each command is a module of this package with a ``main(argv)`` whose parser's prog is
``vllm-perf NAME``. A module is imported only when its command runs, so the commands
that read files (``table``, ``promote``, ``benchmark-json``, ``history``) import
nothing that serves or loads (tests/unit/test_layers.py). Maintainer commands, which
regenerate this repository's own documentation, are listed apart.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["COMMANDS", "Command", "main"]


@dataclass(frozen=True)
class Command:
    """One ``vllm-perf`` command: the module and function that run it, what it does,
    and whether it is a maintainer's (regenerates this repository's docs)."""

    module: str
    function: str
    what: str
    maintainer: bool = False


_WING: Final = "pytest_vllm_perf.tools"
COMMANDS: Final[dict[str, Command]] = {
    "prgate": Command(f"{_WING}.prgate", "main", "gate a pull request: A/B against its base"),
    "action-outputs": Command(
        f"{_WING}.action", "main", "the GitHub Action's outputs from a prgate folder"
    ),
    "bisect": Command(
        f"{_WING}.bisect", "main", "the first vLLM release where a workload regressed"
    ),
    "crosscheck": Command(f"{_WING}.crosscheck", "main", "this client against vllm bench serve"),
    "table": Command(f"{_WING}.store", "table", "stored baselines side by side"),
    "promote": Command(f"{_WING}.store", "promote_main", "--vllm-json reports into baselines"),
    "history": Command(f"{_WING}.history", "main", "the run history and its change points (Otava)"),
    "merge": Command(f"{_WING}.merge", "main", "join the --vllm-json reports of a run's shards"),
    "benchmark-json": Command(
        f"{_WING}.store", "benchmark_json", "a --vllm-json report as pytest-benchmark JSON"
    ),
    "claims": Command(
        f"{_WING}.claims", "main", "the tuning-claims table from A/B reports", maintainer=True
    ),
    "reference": Command(
        f"{_WING}.reference", "main", "regenerate docs/reference.md's tables", maintainer=True
    ),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: vllm-perf COMMAND [ARGS...]  (or: python -m pytest_vllm_perf COMMAND)", ""]
    for maintainer in (False, True):
        if maintainer:
            lines += ["", "for this repository's maintainers:"]
        lines += [
            f"  {name:<{width}}  {c.what}"
            for name, c in COMMANDS.items()
            if c.maintainer is maintainer
        ]
    lines += ["", "COMMAND --help says more."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())  # bare, it lists what there is: asking is not an error
        return 0
    name, rest = args[0], args[1:]
    found = COMMANDS.get(name)
    if found is None:
        print(
            f"vllm-perf: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 4
    run = getattr(importlib.import_module(found.module), found.function)
    return int(run(rest) or 0)
