"""Several reports of one run joined: the shards of a CI matrix (``vllm-perf merge``)
or the workers of one ``pytest -n N`` session (the plugin's controller). Plain JSON
in, plain JSON and text out: the ``--vllm-json`` report's own shape."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.report import cost, text

__all__ = ["failures", "markdown", "merge", "summary"]

_BUDGET = ("ab_tests", "stored_tests", "ab_run_alpha", "stored_run_alpha")


def merge(
    reports: Sequence[tuple[str, Mapping[str, Any]]], shards_of_one_run: bool = True
) -> tuple[dict[str, Any], list[str]]:
    """The merged report, and what is missing from it (shards not given). BaselineError
    for results that appear twice or shards of different runs. ``shards_of_one_run``
    False: the reports are the workers of one session (one shard or none between
    them), whose shard is not checked."""
    results: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    shards: dict[int, str] = {}
    totals: set[int] = set()
    budgets: dict[tuple[Any, ...], str] = {}
    for name, doc in reports:
        run = doc.get("run") or {}
        budgets.setdefault(tuple(run.get(k) for k in _BUDGET), name)
        if run.get("shard") and shards_of_one_run:
            k, n = (int(x) for x in str(run["shard"]).split("/"))
            if k in shards:
                raise BaselineError(f"{name}: shard {k}/{n} is also {shards[k]}")
            shards[k] = name
            totals.add(n)
        for result in doc["results"]:
            key = (str(result.get("test")), str(result.get("profile")))
            if key in seen:
                raise BaselineError(
                    f"{name}: {key[0]} [{key[1]}] is also in {seen[key]}: not one run's shards"
                )
            seen[key] = name
            results.append(result)
    if len(totals) > 1 or len(budgets) > 1:
        raise BaselineError(
            f"{', '.join(name for name, _ in reports)}: shards of different runs "
            "(their shard counts or run budgets differ)"
        )
    missing = []
    if totals:
        (n,) = totals
        missing = [f"shard {k}/{n}" for k in range(1, n + 1) if k not in shards]
    first = dict(reports[0][1].get("run") or {}) if reports else {}
    shard = None if shards_of_one_run else first.get("shard")
    run = {k: first.get(k) for k in _BUDGET} | {"shard": shard, "merged": [n for n, _ in reports]}
    return {"results": results, "run": run}, missing


def failures(result: Mapping[str, Any]) -> list[str]:
    """Why one result of a report failed: each gated metric that regressed, with its
    ratio, and each missed threshold; [] when it passed."""
    gate = result.get("baseline") or {}
    regressed = [
        v for v in gate.get("verdicts", ()) if v.get("gated") and v.get("verdict") == "regressed"
    ]
    measured = [v for v in regressed if isinstance(v.get("ratio"), float)]
    why = [f"{v['metric']} x{v['ratio']:.3g}" for v in measured]
    why += [f"{v['metric']} (by rule)" for v in regressed if v not in measured]
    why += [f"{c['key']} (SLO)" for c in result.get("thresholds", ()) if not c.get("passed")]
    return why


def _table(
    results: Sequence[Mapping[str, Any]], markdown: bool
) -> tuple[list[str], list[list[str]]]:
    """A session's own summary columns (``text.result_rows``), and what each failed on."""
    rows = text.result_rows(results, markdown)
    why = [", ".join(failures(r)) or "-" for r in results]
    return [*text.summary_headers(), "failed on"], [[*r, w] for r, w in zip(rows, why, strict=True)]


def summary(doc: Mapping[str, Any], missing: Sequence[str]) -> tuple[list[str], str]:
    """The table of every result, and the final PASS/FAIL line."""
    results = doc["results"]
    lines = text.table(*_table(results, markdown=False))
    lines += cost.lines(results)
    failing = [(r, why) for r in results if (why := ", ".join(failures(r)))]
    merged = f"merged from {len(doc['run']['merged'])} report(s)"
    if failing or missing:
        parts = [f"{r.get('test')} [{r.get('profile')}] {why}" for r, why in failing[:4]]
        parts += [f"{m} missing" for m in missing]
        head = f"FAIL: {len(failing)} of {len(results)} results failed"
        return lines, f"vLLM perf {head}: {'; '.join(parts)} ({merged})"
    counts = Counter(text.result_verdict(r) for r in results)
    words = ", ".join(f"{n} {word}" for word, n in sorted(counts.items()))
    return lines, f"vLLM perf PASS: {len(results)} results ({words}) ({merged})"


def markdown(doc: Mapping[str, Any], missing: Sequence[str], headline: str) -> str:
    """The merged summary as Markdown: the line, then a row per result."""
    lines = ["## vLLM perf (merged)", "", f"**{headline}**", ""]
    headers, rows = _table(doc["results"], markdown=True)
    lines += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += [f"- {m} missing" for m in missing]
    lines += cost.markdown(doc["results"])
    return "\n".join(lines) + "\n"
