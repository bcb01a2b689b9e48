"""Test names that fall in given shards of ``--vllm-shard=K/N`` (the plugin's crc32 of
the test id), for the shard tests of the plugin and engine tiers."""

from __future__ import annotations

import zlib


def shard_names(module: str) -> tuple[str, str]:
    """Two test names of ``module`` that fall in shards 1 and 2 of 2."""
    found: dict[int, str] = {}
    for k in range(100):
        name = f"test_perf_{k}"
        found.setdefault(zlib.crc32(f"{module}::{name}".encode()) % 2, name)
    return found[0], found[1]
