"""One command for everything the plugin does outside pytest: ``python -m pytest_vllm_perf
COMMAND ...`` (or the ``vllm-perf`` console script).

Each command's module is imported only when that command runs, so the commands that read
JSON (``table``, ``promote``, ``claims``) import nothing that serves or loads, as their
own modules promise (tests/unit/test_layers.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Final

__all__ = ["COMMANDS", "main"]

# command -> (module, the arguments put before the user's, what it does)
COMMANDS: Final[dict[str, tuple[str, tuple[str, ...], str]]] = {
    "table": ("pytest_vllm_perf.cli", ("table",), "stored baselines side by side"),
    "promote": ("pytest_vllm_perf.cli", ("promote",), "--vllm-json reports into baselines"),
    "claims": ("pytest_vllm_perf.cli", ("claims",), "the tuning-claims table from A/B reports"),
    "benchmark-json": (
        "pytest_vllm_perf.cli",
        ("benchmark-json",),
        "a --vllm-json report as pytest-benchmark JSON",
    ),
    "prgate": ("pytest_vllm_perf.prgate", (), "gate a pull request: A/B against its base"),
    "bisect": ("pytest_vllm_perf.bisect", (), "the first vLLM release where a workload regressed"),
    "crosscheck": ("pytest_vllm_perf.crosscheck", (), "this client against vllm bench serve"),
    "history": ("pytest_vllm_perf.history", (), "the run history and its change points (Otava)"),
    "reference": ("pytest_vllm_perf.reference", (), "regenerate docs/reference.md's tables"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m pytest_vllm_perf COMMAND [ARGS...]  (or: vllm-perf COMMAND)", ""]
    lines += [f"  {name:<{width}}  {what}" for name, (_, _, what) in COMMANDS.items()]
    lines += ["", "COMMAND --help says more."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())  # bare, it lists what there is: asking is not an error
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(
            f"vllm-perf: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 4
    module, prefix, _ = COMMANDS[name]
    command = importlib.import_module(module)
    return int(command.main([*prefix, *rest]) or 0)


if __name__ == "__main__":
    sys.exit(main())
