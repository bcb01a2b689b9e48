"""What each test cost: boot and load seconds, GPU-seconds, and the GPUs' energy.

One field list (``FIELDS``) drives the terminal table, the Markdown table and the
``cost`` record of each ``--vllm-json`` result, so a session's report and a merge of
several (``report.merged``) show the same columns. Rows are built from the typed
report (``core.report``), the one document both have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

from pytest_vllm_perf.core.records import Outcome
from pytest_vllm_perf.core.report import JsonObject, ResultEntry

__all__ = ["FIELDS", "lines", "markdown", "record"]

# (key of the ``cost`` record, column header, format)
FIELDS: Final = (
    ("boot_s", "boots s", "{:.0f}"),
    ("load_s", "load s", "{:.0f}"),
    ("gpus", "GPUs", "{:g}"),  # 0.5: one of two workers sharing a GPU
    ("gpu_boot_s", "GPU-s boots", "{:.0f}"),
    ("gpu_load_s", "GPU-s load", "{:.0f}"),
    ("energy_j", "energy J", "{:.0f}"),
    ("energy_per_1k_tokens_j", "J / 1k out tok", "{:.1f}"),
)


def record(o: Outcome) -> dict[str, Any]:
    """A result's ``cost`` record: its ``Cost`` (every side's measured passes' energy),
    the energy per 1,000 output tokens of those passes, and why energy is missing."""
    out: dict[str, Any] = {} if o.cost is None else o.cost.to_dict()
    sides = [o.result, *([o.base] if o.base is not None else [])]
    joules = [m.metrics.get("energy_j", math.nan) for m in sides]
    tokens = sum(
        r.output_tokens for m in sides for p in m.passes for r in (*p.records, *p.ramp_records)
    )
    total = math.fsum(joules)
    if math.isfinite(total):
        out["energy_j"] = total
        out["energy_per_1k_tokens_j"] = 1000 * total / tokens if tokens else math.nan
    note = o.provenance.energy_note
    out["energy_note"] = note
    return {k: _finite(v) for k, v in out.items()}


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _cell(found: JsonObject, key: str, pattern: str) -> str:
    value = found.get(key)
    return pattern.format(value) if isinstance(value, int | float) else "-"


def _rows(results: Sequence[ResultEntry]) -> list[list[str]]:
    return [
        [r.test, r.profile, *(_cell(r.cost, key, pattern) for key, _, pattern in FIELDS)]
        for r in results
    ]


def _header() -> list[str]:
    return ["test", "profile", *(label for _, label, _ in FIELDS)]


def _notes(results: Sequence[ResultEntry]) -> list[str]:
    """Why energy is missing, once per reason."""
    reasons = {str(r.cost.get("energy_note") or "") for r in results}
    return [f"energy not measured: {why}" for why in sorted(reasons) if why]


def lines(results: Sequence[ResultEntry]) -> list[str]:
    """The cost table for a terminal, with why energy is missing; [] without results."""
    rows = _rows(results)
    if not rows:
        return []
    header = _header()
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    table = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in (header, *rows)
    ]
    return ["what each test cost:", *table, *_notes(results)]


def markdown(results: Sequence[ResultEntry]) -> list[str]:
    """The cost table as Markdown lines, with why energy is missing."""
    rows = _rows(results)
    if not rows:
        return []
    header = _header()
    out = ["", "### What each test cost", "", "| " + " | ".join(header) + " |"]
    out.append("|" + "---|" * len(header))
    out += ["| `" + row[0] + "` | " + " | ".join(row[1:]) + " |" for row in rows]
    out += [f"\n{note}" for note in _notes(results)]
    return out
