"""Human- and machine-readable views of outcomes: terminal table, JSON, Markdown."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_vllm_perf import atomic, compare, redact
from pytest_vllm_perf.records import Repetition
from pytest_vllm_perf.session import Outcome

COLUMNS = (
    ("n", "completed", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("TTFT p50", "ttft_p50_ms", "{:.0f}ms"),
    ("TTFT p99", "ttft_p99_ms", "{:.0f}ms"),
    ("ITL p50", "itl_p50_ms", "{:.1f}ms"),
    ("ITL p99", "itl_p99_ms", "{:.1f}ms"),
    ("ITL max", "itl_max_ms", "{:.0f}ms"),
    ("TPOT", "tpot_mean_ms", "{:.1f}ms"),
    ("out tok/s", "output_throughput", "{:.1f}"),
    ("preempt", "preemptions", "{:.0f}"),
)


def fmt(value: float | None, pattern: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    return pattern.format(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain aligned text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def summary_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """One row per test and profile: the figures a perf reviewer looks at first."""
    headers = ["test", "profile", *(c[0] for c in COLUMNS), "SLO", "verdict"]
    rows = []
    for o in outcomes:
        m = o.result.metrics
        cells = [fmt(m.get(key), pattern) for _, key, pattern in COLUMNS]
        rows.append([o.test_id, o.profile, *cells, "pass" if o.passed else "FAIL", verdict(o)])
    return table(headers, rows)


def verdict(outcome: Outcome) -> str:
    return outcome.gate.summary() if outcome.gate else "-"


def gate_notes(outcomes: Sequence[Outcome]) -> list[str]:
    """Lines for outcomes whose baseline was missing, saved or not comparable."""
    lines = []
    for o in outcomes:
        g = o.gate
        if g is None:
            continue
        if g.status == "saved":
            lines.append(f"baseline saved: {o.test_id} [{o.profile}] -> {g.path}")
        elif g.note:
            lines.append(f"{o.test_id} [{o.profile}]: {g.note}")
        for v in g.verdicts:
            if v.verdict != "unchanged":
                lines.append(f"  {o.test_id} [{o.profile}] {v.describe()}")
    return lines


SIDE_BY_SIDE = (
    ("TTFT p50", "ttft_p50_ms"),
    ("TTFT p99", "ttft_p99_ms"),
    ("ITL p50", "itl_p50_ms"),
    ("ITL p99", "itl_p99_ms"),
    ("worst stall", "itl_max_ms"),
    ("TPOT", "tpot_mean_ms"),
    ("out tok/s", "output_throughput"),
)


@dataclasses.dataclass(frozen=True)
class Side:
    """One profile's run of one test: what a side-by-side table compares."""

    test_id: str
    profile: str
    repetitions: Sequence[Repetition]
    metrics: Mapping[str, float]

    @classmethod
    def of(cls, o: Outcome) -> Side:
        return cls(o.test_id, o.profile, o.result.repetitions, o.result.metrics)


def comparison_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """Side-by-side tables for the tests this session ran under several profiles."""
    return side_by_side([Side.of(o) for o in outcomes])


def side_by_side(sides: Sequence[Side]) -> list[str]:
    """Per test run under several profiles, a table of each profile against the first.

    Ratios come with the interval of compare.py (over passes, or time blocks of a
    single pass): ``~`` marks a ratio whose 95% interval contains 1, i.e. noise.
    """
    by_test: dict[str, list[Side]] = {}
    for side in sides:
        by_test.setdefault(side.test_id, []).append(side)
    lines: list[str] = []
    for test_id, group in by_test.items():
        if len({s.profile for s in group}) < 2:
            continue
        ref = group[0]
        lines += ["", f"{test_id}: ratios to {ref.profile} (~ = within noise)"]
        rows = [[ref.profile, *(_cell(ref, ref, key, {}) for _, key in SIDE_BY_SIDE)]]
        for other in group[1:]:
            verdicts = {
                v.metric: v for v in compare.compare_runs(ref.repetitions, other.repetitions, {})
            }
            rows.append([other.profile, *(_cell(ref, other, k, verdicts) for _, k in SIDE_BY_SIDE)])
        lines += table(["profile", *(label for label, _ in SIDE_BY_SIDE)], rows)
    return lines


def _cell(ref: Side, other: Side, key: str, verdicts: Mapping[str, compare.Verdict]) -> str:
    a, b = ref.metrics.get(key), other.metrics.get(key)
    value = fmt(b, "{:.1f}")
    if ref is other or not a or b is None or math.isnan(a) or math.isnan(b):
        return value
    v = verdicts.get(key)
    noise = "~" if v and v.low <= 1 <= v.high else ""
    return f"{value} (x{b / a:.2f}{noise})"


# Our metric names -> `vllm bench serve` result keys, for the same quantities.
BENCH_SERVE_STATS = {
    "mean": "mean",
    "p50": "median",
    "p90": "p90",
    "p99": "p99",
    "p999": "p99.9",
    "max": "max",
}


def bench_serve_keys(metrics: dict[str, float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, value in metrics.items():
        cls, _, name = key.rpartition(".")
        parts = name.split("_")
        if len(parts) == 3 and parts[2] == "ms" and parts[1] in BENCH_SERVE_STATS:
            name = f"{BENCH_SERVE_STATS[parts[1]]}_{parts[0]}_ms"
        clean = None if math.isnan(value) else (str(value) if math.isinf(value) else value)
        out[f"{cls}.{name}" if cls else name] = clean  # type: ignore[assignment]
    return out


def to_json(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    results = []
    for o in outcomes:
        g = o.gate
        results.append(
            {
                "test": o.test_id,
                "profile": o.profile,
                "profile_settings": o.handle.profile.to_dict(),
                "engine_argv": list(o.handle.argv),
                "engine_notes": list(o.handle.settings.notes),
                "environment": {**o.handle.environment.to_dict(), "model": o.handle.model_id},
                "workload": o.result.workload.to_dict(),
                "duration": round(o.result.duration_s, 3),
                "metrics": bench_serve_keys(o.result.metrics),
                "thresholds": [
                    {"key": c.key, "limit": c.limit, "measured": c.measured, "passed": c.passed}
                    for c in o.checks
                ],
                "baseline": None
                if g is None
                else {
                    "status": g.status,
                    "path": str(g.path),
                    "verdict": g.summary(),
                    "changes": list(g.changes),
                    "note": g.note,
                    "verdicts": [dataclasses.asdict(v) for v in g.verdicts],
                },
            }
        )
    return redact.mapping({"results": results})


def markdown(
    outcomes: Sequence[Outcome], plots: Sequence[Path] = (), base: Path | None = None
) -> str:
    headers = ["test", "profile", *(c[0] for c in COLUMNS), "SLO", "verdict"]
    lines = ["## vLLM perf", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for o in outcomes:
        m = o.result.metrics
        cells = [fmt(m.get(key), pattern) for _, key, pattern in COLUMNS]
        row = [f"`{o.test_id}`", o.profile, *cells, "pass" if o.passed else "**FAIL**", verdict(o)]
        lines.append("| " + " | ".join(row) + " |")
    notes = gate_notes(outcomes) + comparison_lines(outcomes)
    if notes:
        lines += ["", "```", *notes, "```"]
    for plot in plots:
        target = os.path.relpath(plot, base) if base else str(plot)
        lines += ["", f"![{plot.stem}]({target})"]
    return "\n".join(lines) + "\n"


def write_files(
    outcomes: Sequence[Outcome],
    json_path: str | None,
    markdown_path: str | None,
    step_summary: str | None,
    plots: Sequence[Path] = (),
) -> list[str]:
    """Write the requested reports; the Markdown also goes to the GitHub job summary."""
    written = []
    if json_path:
        atomic.write_text(Path(json_path), json.dumps(to_json(outcomes), indent=1, sort_keys=True))
        written.append(json_path)
    base = Path(markdown_path).resolve().parent if markdown_path else None
    text = markdown(outcomes, [p.resolve() for p in plots], base)
    if markdown_path:
        atomic.write_text(Path(markdown_path), text)
        written.append(markdown_path)
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(text)
    return written
