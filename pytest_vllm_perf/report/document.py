"""The report documents of a session: ``--vllm-json`` (every result, its passes,
verdicts and cost) and ``--vllm-markdown`` (also the GitHub job summary), each
written atomically."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_vllm_perf.core import atomic, redact
from pytest_vllm_perf.core.records import Measurement, MetricVerdict, Outcome
from pytest_vllm_perf.core.registry import metrics_to_report, report_number
from pytest_vllm_perf.report import cost, sides, text
from pytest_vllm_perf.verdict import baseline

__all__ = ["markdown", "to_json", "write_files", "write_report"]


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
                "distribution": baseline.distribution(o.result),
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


def markdown(
    outcomes: Sequence[Outcome],
    plots: Sequence[Path] = (),
    base: Path | None = None,
    headline: str = "",
) -> str:
    headers = text.summary_headers()
    lines = ["## vLLM perf", ""] + ([f"**{headline}**", ""] if headline else [])
    lines += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in text.outcome_rows(outcomes, markdown=True)]
    notes = text.gate_notes(outcomes) + sides.comparison_lines(outcomes)
    if notes:
        lines += ["", "```", *notes, "```"]
    lines += cost.markdown(text.cost_records(outcomes))
    for plot in plots:
        target = os.path.relpath(plot, base) if base else str(plot)
        lines += ["", f"![{plot.stem}]({target})"]
    return "\n".join(lines) + "\n"


def write_files(
    outcomes: Sequence[Outcome],
    json_path: Path | None,
    markdown_path: Path | None,
    step_summary: str | None,
    plots: Sequence[Path] = (),
    headline: str = "",
    run: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write the requested reports; the Markdown also goes to the GitHub job summary."""
    base = markdown_path.resolve().parent if markdown_path else None
    text = markdown(outcomes, [p.resolve() for p in plots], base, headline)
    report = to_json(outcomes, run) if json_path else None
    return write_report(report, text, json_path, markdown_path, step_summary)


def write_report(
    report: Mapping[str, Any] | None,
    markdown_text: str,
    json_path: Path | None,
    markdown_path: Path | None,
    step_summary: str | None,
) -> list[Path]:
    """A report's JSON and Markdown, each written atomically where asked, the Markdown
    also appended to the GitHub job summary: one session's, or a merge of several."""
    written = []
    if json_path and report is not None:
        atomic.write_text(json_path, json.dumps(report, indent=1, sort_keys=True, default=str))
        written.append(json_path)
    if markdown_path:
        atomic.write_text(markdown_path, markdown_text)
        written.append(markdown_path)
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(markdown_text)
    return written
