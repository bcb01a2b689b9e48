"""Leaf data of pytest-vllm-perf: plain frozen records, the metric registry, errors.

Nothing here imports any other part of the package, so every layer above
(config, serving, load, verdict, report) can share these types without cycles.
"""
