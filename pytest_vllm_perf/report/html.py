"""``--vllm-html``: the run as one self-contained HTML page: the PASS/FAIL line, the
summary table, each result's verdicts with their 95% intervals, what each test cost,
the notes, and the plots inline (PNG as data URIs, so the file can be mailed or
attached to a CI run alone). Built from the typed report, as every view is."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from pytest_vllm_perf.core.report import VERDICT_WORDS, ResultEntry, VerdictEntry
from pytest_vllm_perf.report import cost, text
from pytest_vllm_perf.report.view import View

__all__ = ["page"]

_STYLE: Final = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.line { padding: 0.6em 0.9em; font-weight: bold; border-radius: 4px; color: white; }
.pass { background: #2e7d32; } .fail { background: #c62828; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.5em; text-align: left; }
th { background: #eee; } td.regressed { color: #c62828; font-weight: bold; }
td.improved { color: #2e7d32; } td.inconclusive { color: #8a6d00; }
pre { background: #f6f6f6; padding: 0.6em; white-space: pre-wrap; font-size: 0.85em; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
"""
_VERDICT_HEADERS: Final = ("metric", "baseline", "current", "ratio", "interval",
                           "tolerance", "verdict", "gated", "basis")  # fmt: skip


def _cell(text: str) -> str:
    """A cell; a verdict word is coloured by its class."""
    kind = f' class="{text}"' if text in VERDICT_WORDS else ""
    return f"<td{kind}>{html.escape(text)}</td>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _verdict_row(v: VerdictEntry) -> list[str]:
    ratio = v.ratio
    return [
        v.metric,
        text.fmt(v.figure("baseline")),
        text.fmt(v.figure("current")),
        f"x{ratio:.3f}" if math.isfinite(ratio) else "-",
        text.interval(v.figure("low"), v.figure("high")),
        f"{v.figure('tolerance'):.0%}" if math.isfinite(v.figure("tolerance")) else "-",
        v.verdict,
        "gated" if v.gated else "reported",
        v.basis,
    ]


def _result(r: ResultEntry) -> str:
    title = f"<h3>{html.escape(r.test)} [{html.escape(r.profile)}]</h3>"
    gate = r.baseline
    if gate is None:
        return title + "<p>no baseline: measured, not compared</p>"
    said = f"<p>{html.escape(gate.status)} against {html.escape(gate.path)}: "
    said += f"<b>{html.escape(gate.verdict)}</b></p>"
    note = f"<p>{html.escape(gate.note)}</p>" if gate.note else ""
    changes = "".join(f"<li>{html.escape(c)}</li>" for c in gate.changes)
    changed = f"<p>differs from what it is judged against:</p><ul>{changes}</ul>" if changes else ""
    rows = [_verdict_row(v) for v in gate.verdicts]
    return title + said + note + changed + _table(_VERDICT_HEADERS, rows)


def _plot(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = html.escape(path.stem)
    return f'<h3>{alt}</h3><img alt="{alt}" src="data:image/png;base64,{data}">'


def page(view: View, path: Path) -> str:
    """The whole page; ``path`` (where it goes) is not needed: nothing is linked."""
    results = view.report.results
    line = view.headline
    parts = [
        f'<p class="line {"fail" if line.failed else "pass"}">{html.escape(line.text)}</p>',
        "<h2>Results</h2>",
        _table([*text.summary_headers()], text.result_rows(results)),
        "<h2>Verdicts</h2>",
        *(_result(r) for r in results),
    ]
    costs = cost.lines(results)
    if costs:
        parts += ["<h2>What each test cost</h2>", f"<pre>{html.escape(chr(10).join(costs))}</pre>"]
    if view.notes:
        parts += ["<h2>Notes</h2>", f"<pre>{html.escape(chr(10).join(view.notes))}</pre>"]
    if view.missing:
        parts += ["<h2>Missing</h2>", "<ul>"] + [f"<li>{html.escape(m)}</li>" for m in view.missing]
        parts.append("</ul>")
    if view.plots:
        parts += ["<h2>Plots</h2>", *(_plot(p) for p in view.plots)]
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>vLLM perf: {'FAIL' if line.failed else 'PASS'}</title>"
        f"<style>{_STYLE}</style></head>\n<body>\n<h1>vLLM perf</h1>\n{body}\n</body></html>\n"
    )
