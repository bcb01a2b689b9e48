"""Several reports of one run joined: the shards of a CI matrix (``vllm-perf merge``)
or the workers of one ``pytest -n N`` session (the plugin's controller): typed
reports (``core.report``) in, one typed report and its views out."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.report import Headline, Report, ResultEntry
from pytest_vllm_perf.report import cost, text

__all__ = ["markdown", "merge", "summary"]

_BUDGET = ("ab_tests", "stored_tests", "ab_run_alpha", "stored_run_alpha")


def merge(
    reports: Sequence[tuple[str, Report]], shards_of_one_run: bool = True
) -> tuple[Report, list[str]]:
    """The merged report, and what is missing from it (shards not given). BaselineError
    for results that appear twice or shards of different runs. ``shards_of_one_run``
    False: the reports are the workers of one session (one shard or none between
    them), whose shard is not checked."""
    results: list[ResultEntry] = []
    seen: dict[tuple[str, str], str] = {}
    shards: dict[int, str] = {}
    totals: set[int] = set()
    budgets: dict[tuple[object, ...], str] = {}
    for name, doc in reports:
        run = doc.run or {}
        budgets.setdefault(tuple(run.get(k) for k in _BUDGET), name)
        if run.get("shard") and shards_of_one_run:
            k, n = (int(x) for x in str(run["shard"]).split("/"))
            if k in shards:
                raise BaselineError(f"{name}: shard {k}/{n} is also {shards[k]}")
            shards[k] = name
            totals.add(n)
        for result in doc.results:
            key = (result.test, result.profile)
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
    first = dict(reports[0][1].run or {}) if reports else {}
    shard = None if shards_of_one_run else first.get("shard")
    run = {k: first.get(k) for k in _BUDGET} | {"shard": shard, "merged": [n for n, _ in reports]}
    return Report(tuple(results), run), missing


def _table(results: Sequence[ResultEntry], markdown: bool) -> tuple[list[str], list[list[str]]]:
    """A session's own summary columns (``text.result_rows``), and what each failed on."""
    rows = text.result_rows(results, markdown)
    why = [", ".join(r.failures()) or "-" for r in results]
    return [*text.summary_headers(), "failed on"], [[*r, w] for r, w in zip(rows, why, strict=True)]


def _merged_from(doc: Report) -> str:
    names = (doc.run or {}).get("merged")
    return f"merged from {len(names) if isinstance(names, list) else 0} report(s)"


def summary(doc: Report, missing: Sequence[str]) -> tuple[list[str], Headline]:
    """The table of every result, and the final PASS/FAIL line."""
    lines = text.table(*_table(doc.results, markdown=False))
    lines += cost.lines(doc.results)
    failed, head = text.headline(doc.results, [f"{m} missing" for m in missing])
    return lines, Headline(failed, f"vLLM perf {head} ({_merged_from(doc)})")


def markdown(doc: Report, missing: Sequence[str], headline: Headline) -> str:
    """The merged summary as Markdown: the line, then a row per result."""
    lines = ["## vLLM perf (merged)", "", f"**{headline.text}**", ""]
    headers, rows = _table(doc.results, markdown=True)
    lines += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += [f"- {m} missing" for m in missing]
    lines += cost.markdown(doc.results)
    return "\n".join(lines) + "\n"
