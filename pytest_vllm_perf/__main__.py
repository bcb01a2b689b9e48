"""``python -m pytest_vllm_perf COMMAND ...``, the same as the ``vllm-perf`` console
script: the tools wing's one command table (``pytest_vllm_perf.tools``)."""

from __future__ import annotations

import sys

from pytest_vllm_perf.tools import COMMANDS, main

__all__ = ["COMMANDS", "main"]

if __name__ == "__main__":
    sys.exit(main())
