"""The reference tables (``docs/reference.md``), generated from the code so that they cannot
drift.

``vllm-perf reference docs/reference.md`` rewrites every block between
``<!-- reference:NAME -->`` and ``<!-- /reference:NAME -->``; ``--check`` exits 1
when a block is stale, and ``tests/unit/test_reference.py`` runs that check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Final

from pytest_vllm_perf.config.workloads import NAMED
from pytest_vllm_perf.core.registry import METRICS, default_tolerances
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.marker import MARKER_DOCS
from pytest_vllm_perf.options import FLAGS, OPTIONS

__all__ = ["BLOCKS", "main", "render"]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def options_table() -> str:
    rows = [
        (f"`{o.flag}=...`", f"`{o.ini}`", f"`{o.default}`" if o.default else "-", o.help)
        for o in OPTIONS
    ]
    rows += [(f"`{flag}`", f"`{ini}`", "off", text) for flag, ini, text in FLAGS]
    rows.append(("-", "`vllm_tolerances`", "-", "regression tolerances, lines of METRIC=FRACTION"))
    return _table(("command line", "ini", "default", "meaning"), rows)


def marker_table() -> str:
    rows = [(f"`{key}`", text) for key, text in MARKER_DOCS.items()]
    rows.append(
        (
            "any other",
            "overrides a workload field (`duration_s=10`) or a class's fields "
            '(`chat={"users": 8}`)',
        )
    )
    return _table(("keyword", "meaning"), rows)


def metrics_table() -> str:
    cpu, cuda = default_tolerances("cpu"), default_tolerances("cuda")
    cuda_ab = default_tolerances("cuda", ab=True)

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    rows = [
        (
            f"`{m.key}`",
            m.label,
            m.unit or "-",
            "per class" if m.per_class else "a search" if m.source == "search" else "whole run",
            "-" if m.tolerance is None else "higher" if m.higher_is_better else "lower",
            pct(cpu.get(m.key)),
            pct(cuda.get(m.key)),
            pct(cuda_ab.get(m.key)),
            f"`{m.bench_serve_key}`" if m.bench_serve_key else "-",
        )
        for m in METRICS.values()
    ]
    header = (
        "metric", "label", "unit", "scope", "better", "tolerance (cpu)", "tolerance (cuda)",
        "A/B (cuda)", "`vllm bench serve` key",
    )  # fmt: skip
    return _table(header, rows)


def _class(c: RequestClass) -> str:
    if c.trace:
        scale = f", time x{c.time_scale:g}" if c.time_scale != 1 else ""
        return f"`{c.name}`: replays the trace `{Path(c.trace).name}`{scale}"
    load = f"{c.users} users" if c.users else f"{c.rate:g}/s arrivals"
    text = (", text" if c.text else "") + (", one shared prompt" if c.shared_prompt else "")
    return f"`{c.name}`: {c.prompt_tokens} in, {c.output_tokens} out, {load}{text}"


def workloads_table() -> str:
    rows = [
        (
            f"`{w.name}`",
            "; ".join(_class(c) for c in w.classes),
            ", ".join(f"`{g}`" for g in w.gate) or "all compared",
            ", ".join(f"`{g}`" for g in w.ab_gate) or "-",
            ", ".join(f"`{g}`" for g in w.report) or "-",
            w.description,
        )
        for w in NAMED.values()
    ]
    defaults = Workload("defaults", (RequestClass("x", 1, 1, users=1),))
    fields_row = ", ".join(
        f"`{f.name}`={getattr(defaults, f.name)!r}"
        for f in fields(Workload)
        if f.name not in ("name", "classes", "gate", "ab_gate", "report", "description")
    )
    class_row = ", ".join(f"`{f.name}`" for f in fields(RequestClass) if f.name != "name")
    header = (
        "workload", "classes", "gated metrics", "A/B also gates", "reported, not gated",
        "what it is for",
    )  # fmt: skip
    table = _table(header, rows)
    return (
        f"{table}\n\nWorkload fields and defaults: {fields_row}. Class fields: {class_row} "
        "(exactly one of `users`, `rate` and `trace`; a trace sets the token counts)."
    )


BLOCKS: Final[Mapping[str, Callable[[], str]]] = {
    "options": options_table,
    "marker": marker_table,
    "metrics": metrics_table,
    "workloads": workloads_table,
}


def render(text: str) -> str:
    """``text`` with every reference block regenerated."""
    for name, build in BLOCKS.items():
        pattern = re.compile(
            rf"(<!-- reference:{name} -->\n)(?:.*?\n)?(<!-- /reference:{name} -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise ValueError(f"no <!-- reference:{name} --> block")
        body = build().replace("\\", "\\\\")  # literal in a replacement template
        text = pattern.sub(rf"\g<1>{body}\n\g<2>", text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-perf reference")
    parser.add_argument("path", type=Path, help="the Markdown file with reference blocks")
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    args = parser.parse_args(argv)
    old = args.path.read_text(encoding="utf-8")
    new = render(old)
    if args.check:
        if new != old:
            print(f"{args.path}: reference blocks are stale; run {parser.prog} {args.path}")
            return 1
        return 0
    args.path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
