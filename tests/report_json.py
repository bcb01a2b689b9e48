"""Whole ``--vllm-json`` results for tests that write reports by hand: the typed
report (``core.report``) refuses a result without the keys every written one has."""

from __future__ import annotations

from typing import Any


def result(**fields: Any) -> dict[str, Any]:
    """A result with every key a written one has; ``fields`` override them."""
    base: dict[str, Any] = {
        "test": "t.py::test_x", "profile": "default", "profile_settings": {},
        "profile_hash": "0", "engine_argv": [], "engine_notes": [], "environment": {},
        "workload": {}, "duration": 1.0, "metrics": {}, "distribution": None, "passes": [],
        "cost": {}, "thresholds": [], "baseline": None,
    }  # fmt: skip
    return base | fields


def passes(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Passes of these metrics, indexed from 0."""
    return [{"index": i, "duration_s": 1.0, "metrics": m} for i, m in enumerate(metrics)]
