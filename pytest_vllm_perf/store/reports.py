"""The ``--vllm-json`` report read back: its passes as a verdict reads them, its
per-pass series (history, benchmark-json), and one result promoted to a one-boot
baseline (``vllm-perf promote``)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_vllm_perf.core import redact
from pytest_vllm_perf.core.capacity import METRIC as CAPACITY_METRIC
from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.registry import COMPARED, SERVER_COMPARED, metrics_from_report
from pytest_vllm_perf.core.report import PassEntry, Report, ResultEntry
from pytest_vllm_perf.core.workload import from_dict as workload_from_dict
from pytest_vllm_perf.metrics.passes import Passes
from pytest_vllm_perf.store import baselines
from pytest_vllm_perf.store.provenance import plugin_version

__all__ = ["from_report", "read_report", "report_passes", "report_series"]


def report_passes(passes: Sequence[PassEntry]) -> Passes:
    """The ``passes`` (or ``base_passes``) of a ``--vllm-json`` result, as a verdict reads them."""
    return baselines.boot_passes(
        {
            "passes": [
                {"index": p.index, "duration_s": p.duration_s, "metrics": _internal_keys(p.metrics)}
                for p in passes
            ]
        }
    )


def _internal_keys(metrics: Mapping[str, Any]) -> dict[str, float | str]:
    """A report's metrics as a stored baseline holds them (NaN and infinities as text)."""
    return {
        key: baselines.json_number(value) for key, value in metrics_from_report(metrics).items()
    }


def report_series(result: ResultEntry) -> dict[str, list[float]]:
    """A ``--vllm-json`` result's per-pass values by our metric keys, finite ones only
    (NaN and infinities, written as null and strings, left out), for the compared
    metrics and the workload's gated ones; a metric no pass measured is absent. What
    the history and the pytest-benchmark export summarise. A capacity search (its
    ``capacity`` field) has no passes of one rate: its one figure, ``capacity_rps``."""
    if result.capacity is not None:
        found = metrics_from_report(result.metrics).get(CAPACITY_METRIC, math.nan)
        return {CAPACITY_METRIC: [found]} if math.isfinite(found) and found > 0 else {}
    named = [
        str(name)
        for key in ("gate", "ab_gate", "report")
        if isinstance(names := result.workload.get(key), list)
        for name in names
    ]
    # the engine's own means and the GPUs' energy where measured (absent otherwise)
    keys = dict.fromkeys([*COMPARED, *named, *SERVER_COMPARED, "energy_j"])
    per_pass = [metrics_from_report(p.metrics) for p in result.passes]
    series = {key: [v for m in per_pass if key in m and math.isfinite(v := m[key])] for key in keys}
    return {k: values for k, values in series.items() if values}


def read_report(path: Path) -> Report:
    """A ``--vllm-json`` report as written (``report.document``), typed; BaselineError
    naming the file (and the key) when it is not one. The one reader of the report for
    promote, merge, history and benchmark-json."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(f"{path}: not a --vllm-json report: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise BaselineError(f"{path}: not a --vllm-json report (no 'results' list)")
    return Report.from_json(doc, str(path))


def from_report(result: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A one-boot baseline document from one result of a ``--vllm-json`` report.

    A GPU CI job's report is its artifact; promoting it saves the runner's push
    access and a second run. The report holds what a verdict reads (every pass's
    metrics, the environment, the profile and workload); per-pass counters and,
    for reports older than the distribution field, the quantile summary are absent.
    """
    try:
        workload = workload_from_dict(result["workload"], f"{source}: workload")
        passes = [
            {
                "index": int(p["index"]),
                "duration_s": round(float(p["duration_s"]), 6),
                "overloaded": bool(p.get("overloaded", False)),
                "metrics": _internal_keys(p["metrics"]),
            }
            for p in result["passes"]
        ]
        boot = {
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "promoted_from": source,
            "environment": dict(result["environment"]),
            "engine": {"argv": list(result["engine_argv"]), "notes": list(result["engine_notes"])},
            "plugin_version": plugin_version(),
            "passes": passes,
        }
        doc = {
            "schema": baselines.SCHEMA,
            "test": str(result["test"]),
            "profile": dict(result["profile_settings"]),
            "profile_hash": str(result["profile_hash"]),
            "workload": workload.to_dict(),
            "workload_hash": workload.hash,
            "metrics": _internal_keys(result["metrics"]),
            "distribution": result.get("distribution"),
            "boots": [boot],
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise BaselineError(
            f"{source}: not a result of a --vllm-json report: {type(exc).__name__}: {exc}"
        ) from None
    if not passes:
        raise BaselineError(f"{source}: {result['test']} has no passes to promote")
    return redact.mapping(doc)
