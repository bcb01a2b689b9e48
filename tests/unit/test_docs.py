"""The README is a user's guide that states each figure once: a figure in the README must
be the one a document under ``docs/`` states (with the command that made it), the
statements that restate a constant of the code agree with it, and every relative link
reaches a file and a heading that exist."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from pytest_vllm_perf.verdict import compare

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# ratios (x0.431), durations, sizes and shares, as the documents write them
FIGURE = re.compile(r"\bx\d+\.\d+|\b\d+(?:\.\d+)? ?(?:GPU minutes|minutes|min|ms|s|%|KB|MB|GB)\b")
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_readme_is_under_15_kb():
    assert len(README.read_bytes()) < 15_000


def test_every_figure_in_the_readme_is_one_the_docs_state():
    docs = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
    figures = set(FIGURE.findall(README.read_text(encoding="utf-8")))
    assert figures  # the check sees the README's figures at all
    missing = sorted(f for f in figures if f not in docs)
    assert not missing, f"README figures no document under docs/ states: {missing}"


def test_the_pairs_a_verdict_needs_are_stated_as_the_code_has_them():
    text = (ROOT / "docs" / "verdicts.md").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", text)
    stated = re.findall(r"when (\d+) or more passes of both sides share", text)
    assert stated, "docs/verdicts.md no longer states the pairs a paired verdict needs"
    assert {int(n) for n in stated} == {compare.MIN_PAIRS}


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_reach_a_file_and_a_heading(doc):
    broken = []
    for target, anchor in LINK.findall(doc.read_text(encoding="utf-8")):
        if target.startswith(("http:", "https:", "mailto:")):
            continue
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}#{anchor} (no such heading)")
    assert not broken, f"{doc.name}: {broken}"


def test_the_default_tolerances_are_stated_as_the_code_has_them():
    """docs/verdicts.md said TPOT 10% and throughput 15% on a GPU where the code had 15%
    and 25%."""
    from pytest_vllm_perf.core.registry import default_tolerances

    text = re.sub(r"\s+", " ", (ROOT / "docs" / "verdicts.md").read_text(encoding="utf-8"))
    stated = re.search(
        r"on the CPU engine ITL p50 (\d+)%, TPOT (\d+)% and output throughput (\d+)%", text
    )
    gpu = re.search(
        r"on a GPU ITL p50 (\d+)%, TPOT (\d+)%, output throughput (\d+)% and request "
        r"throughput (\d+)%",
        text,
    )
    assert stated and gpu, "docs/verdicts.md no longer states the platform tolerances"
    keys = ("itl_p50_ms", "tpot_mean_ms", "output_throughput", "request_throughput")
    for found, platform in ((stated, "cpu"), (gpu, "cuda")):
        tol = default_tolerances(platform)
        assert [int(x) for x in found.groups()] == [
            round(100 * tol[k]) for k in keys[: len(found.groups())]
        ], platform


def _all_docs() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in (README, *DOCS))


def test_no_table_row_is_stated_in_two_documents():
    """The embedded models' table was in docs/architecture.md and docs/reference.md, and
    the first had lost a preset and kept a boot time the second had changed: a table
    lives in one document, and the others link to it."""
    rows = [
        line
        for line in _all_docs().splitlines()
        if line.startswith("|") and not re.fullmatch(r"[|\s:-]+", line)
    ]
    assert len(rows) > 50  # the check sees the tables at all
    twice = sorted(r for r, n in Counter(rows).items() if n > 1)
    assert not twice, f"table rows stated twice: {twice}"


def _first_look_wall() -> str:
    """``4 min 11 s``: pytest's own time in the first look's committed output."""
    text = (ROOT / "bench/results/cpu/demo-first-look.txt").read_text(encoding="utf-8")
    h, m, s = re.findall(r"passed.* in [\d.]+s \((\d+):(\d+):(\d+)\)", text)[-1]
    return f"{int(h) * 60 + int(m)} min {int(s)} s"


def _warm_pull_request_minutes() -> str:
    """``11.5``: the GPU minutes prgate stated for the warm 34-layer pull request."""
    text = (ROOT / "bench/results/h200/plant-warm/l34/summary.md").read_text(encoding="utf-8")
    return re.findall(r"Total: [\d.]+ min wall, ([\d.]+) GPU minutes", text)[0]


# A figure that several documents state: where each states it, and where it was measured.
STATED_TWICE = (
    ("the first look's time", r"(\d+ min \d+ s)\s*\(`/usr/bin/time make demo`", _first_look_wall),
    (
        "the warm 34-layer pull request's GPU minutes",
        r"(?:warm compile cache[^|]{0,200}?in (\d+\.\d) GPU minutes"
        r"|(\d+\.\d) GPU minutes with a warm compile cache"
        r"|warm compile cache, measured as one run[^|]*\| (\d+\.\d) GPU minutes)",
        _warm_pull_request_minutes,
    ),
)


@pytest.mark.parametrize(("what", "pattern", "measured"), STATED_TWICE, ids=lambda x: str(x)[:20])
def test_a_figure_stated_in_several_documents_is_the_measured_one(what, pattern, measured):
    text = re.sub(r"\s+", " ", _all_docs())
    found = [next(g for g in m.groups() if g) for m in re.finditer(pattern, text)]
    assert len(found) >= 2, f"{what}: stated {len(found)} time(s); the check no longer sees it"
    assert set(found) == {measured()}, f"{what}: stated {found}, measured {measured()}"


def _results_index():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "results_index", ROOT / "bench" / "results_index.py"
    )
    assert spec and spec.loader
    index = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(index)
    return index


def test_every_cited_result_has_a_row_with_exactly_one_command():
    """``bench/results/INDEX.md`` is kept by hand: every ``bench/results/`` path the README
    and ``docs/`` cite is covered by a row, each row has exactly one command, none of them a
    CPU burner, and each row's path exists."""
    index = _results_index()
    assert len(index.rows()) >= 50
    assert index.problems() == []


def test_the_results_index_check_names_each_kind_of_row_it_refuses(tmp_path, monkeypatch):
    """Broken on purpose, the check names the row: two commands, a burner as the command,
    a path that does not exist, and a cited result with no row."""
    index = _results_index()
    table = (ROOT / "bench" / "results" / "INDEX.md").read_text(encoding="utf-8")
    lines = [line for line in table.splitlines() if "`bench/results/cpu/matrix.txt`" not in line]
    lines = [
        line.replace("`bash bench/gpu/gpu_gate.sh` |", "`bash bench/gpu/gpu_gate.sh`<br>`make` |")
        .replace(
            "`.venv/bin/python bench/tokenizer_cost.py` |", "`python3 -c 'while True: pass'` |"
        )
        .replace("`bench/results/h200/rejudged.txt`", "`bench/results/h200/rejudged-gone.txt`")
        for line in lines
    ]
    broken = tmp_path / "INDEX.md"
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(index, "INDEX", broken)
    found = "\n".join(index.problems())
    assert "pr-gate-baselines: 2 commands in its row, not one" in found
    assert "tokenizer_cost.md: its command is a CPU burner" in found
    assert "rejudged-gone.txt: no such result" in found
    assert "cpu/matrix.txt: cited in results.md, no row of the index" in found
    assert "rejudged.txt: cited in" in found


def test_every_bench_script_is_in_the_catalogue():
    """``bench/README.md`` names every script of ``bench/`` and of its GPU drivers'
    folder ``bench/gpu/``, by its path from ``bench/`` (a new one with no row fails)."""
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    bench = ROOT / "bench"
    scripts = [
        p.relative_to(bench).as_posix()
        for folder in (bench, bench / "gpu")
        for p in folder.glob("*")
        if p.suffix in (".py", ".sh")
    ]
    assert len(scripts) >= 20 and any(s.startswith("gpu/") for s in scripts)
    assert [name for name in scripts if f"`{name}`" not in text] == []
