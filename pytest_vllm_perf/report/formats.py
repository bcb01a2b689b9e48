"""The report files a run writes, one table of them: each format is the option that
names its path (``options.OPTIONS``) and a function from the run's ``View`` to the
file's text. A session and a merge of reports write through the same table, each
file atomically; adding a format is its module, its option and its row here."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.report import document, html, merged
from pytest_vllm_perf.report.view import View

__all__ = ["FORMATS", "View", "write"]


def _json(view: View, path: Path) -> str:
    return json.dumps(view.report.to_json(), indent=1, sort_keys=True, default=str)


def _markdown(view: View, path: Path | None) -> str:
    if view.missing is not None:
        return merged.markdown(view.report, view.missing, view.headline)
    base = path.resolve().parent if path else None
    plots = [p.resolve() for p in view.plots] if view.linked else []
    return document.markdown(view.report, view.notes, plots, base, view.headline)


# option dest -> the file's text
FORMATS: Final[Mapping[str, Callable[[View, Path], str]]] = {
    "vllm_json": _json,
    "vllm_markdown": _markdown,
    "vllm_html": html.page,
}


def write(view: View, paths: Mapping[str, Path | None], step_summary: str | None) -> list[Path]:
    """Each requested file (``paths``: option dest -> path), written atomically; the
    Markdown also appended to the GitHub job summary (``step_summary``)."""
    written, texts = [], {}
    for name, render in FORMATS.items():
        path = paths.get(name)
        if path is not None:
            texts[name] = render(view, path)
            atomic.write_text(path, texts[name])
            written.append(path)
    if step_summary:  # the Markdown file's text when it was written: rendered once
        summary = texts.get("vllm_markdown") or _markdown(view, None)
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(summary)
    return written
