"""The session's report: the ``--vllm-json`` document built from its outcomes (every
result, its passes, verdicts and cost), read into the typed report every view reads
(``build``), and the Markdown summary (also the GitHub job summary). ``formats``
writes the files."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_vllm_perf.core import redact
from pytest_vllm_perf.core.records import Measurement, MetricVerdict, Outcome
from pytest_vllm_perf.core.registry import metrics_to_report, report_number
from pytest_vllm_perf.core.report import Headline, Report
from pytest_vllm_perf.report import cost, text
from pytest_vllm_perf.store import baselines

__all__ = ["build", "markdown", "to_json"]


def _verdict_json(v: MetricVerdict) -> dict[str, Any]:
    numbers = (
        "baseline", "current", "ratio", "low", "high", "tolerance", "p_value", "p_holm",
        "margin", "level",
    )  # fmt: skip
    return {
        "metric": v.metric,
        **{name: report_number(getattr(v, name)) for name in numbers},
        "bounds": [report_number(b) for b in v.bounds],
        "verdict": str(v.verdict),
        "basis": v.basis,
        "gated": v.gated,
    }


def _passes_json(result: Measurement) -> list[dict[str, Any]]:
    return [
        {
            "index": p.index,
            "duration_s": p.duration_s,  # the throughput window's length
            "window_s": [round(x, 6) for x in p.window],  # in the run's time base
            "ramp_s": p.ramp_s,
            "drain_s": round(p.drain_s, 6),
            "elapsed_s": round(p.counted_s, 6),
            "overloaded": p.overloaded,
            "client_lag_p99_ms": report_number(round(p.client_lag_p99_ms, 3)),
            "started_unix": report_number(round(p.started_unix, 3)),
            "metrics": metrics_to_report(m),
        }
        for p, m in zip(result.passes, result.pass_metrics, strict=True)
    ]


def to_json(outcomes: Sequence[Outcome], run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``--vllm-json`` report: every result; ``run``: what the session was (its
    shard and the run budgets its tests were judged under), which ``vllm-perf merge``
    checks across shards."""
    results = []
    for o in outcomes:
        g, prov = o.gate, o.provenance
        results.append(
            {
                "test": o.test_id,
                "profile": o.profile,
                "profile_settings": dict(prov.profile_settings),
                "profile_hash": prov.profile_hash,
                "engine_argv": list(prov.engine_argv),
                "engine_notes": list(prov.engine_notes),
                "environment": prov.environment.to_dict(),
                "workload": o.result.workload.to_dict(),
                "duration": round(o.result.duration_s, 3),
                "metrics": metrics_to_report(o.result.metrics),
                "distribution": baselines.distribution(o.result),
                "passes": _passes_json(o.result),
                **({"base_passes": _passes_json(o.base)} if o.base is not None else {}),
                **({"capacity": dict(o.search)} if o.search is not None else {}),
                "cost": cost.record(o),
                "thresholds": [
                    {"key": c.key, "limit": c.limit, "measured": c.measured, "passed": c.passed}
                    for c in o.checks
                ],
                "baseline": None
                if g is None
                else {
                    "status": str(g.status),
                    "path": str(g.path),
                    "verdict": g.summary(),
                    "changes": list(g.changes),
                    "note": g.note,
                    "verdicts": [_verdict_json(v) for v in g.verdicts],
                },
            }
        )
    return redact.mapping({"results": results, **({"run": dict(run)} if run else {})})


def build(outcomes: Sequence[Outcome], run: Mapping[str, Any] | None = None) -> Report:
    """The session's typed report (``core.report``), which every view reads: built
    through its JSON, so that what a view shows is what ``--vllm-json`` holds."""
    return Report.from_json(to_json(outcomes, run))


def markdown(
    report: Report,
    notes: Sequence[str] = (),
    plots: Sequence[Path] = (),
    base: Path | None = None,
    headline: Headline | None = None,
) -> str:
    """The Markdown summary (also the GitHub job summary): the line, the table, the
    ``notes`` (the terminal's gate notes and side-by-side tables), cost and plots."""
    headers = text.summary_headers()
    lines = ["## vLLM perf", ""] + ([f"**{headline.text}**", ""] if headline else [])
    lines += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in text.result_rows(report.results, True)]
    if notes:
        lines += ["", "```", *notes, "```"]
    lines += cost.markdown(report.results)
    for plot in plots:
        target = os.path.relpath(plot, base) if base else str(plot)
        lines += ["", f"![{plot.stem}]({target})"]
    return "\n".join(lines) + "\n"
