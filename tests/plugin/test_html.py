"""``--vllm-html``: one self-contained page of the run, from the typed report every view
reads (fake server). ``bench/html_screenshot.py`` looks at one in a headless browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pytest_vllm_perf.tools import merge
from tests.plugin.test_gate import SLOWDOWN, run

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_has_the_line_the_verdicts_with_intervals_and_the_plots(
    project, fake_vllm, tmp_path
):
    """A regressed run's page: the FAIL line marked failed, each metric's verdict with its
    95% interval, the plots inline (no file beside it, none left in a scratch folder),
    and the same results as ``--vllm-json``. Broken on purpose (the verdict rows left
    out of the page), the interval check fails."""
    run(project, fake_vllm, "--vllm-save-baseline").assert_outcomes(passed=1)
    fake_vllm.delay_s *= SLOWDOWN
    result = run(project, fake_vllm, "--vllm-html=out/r.html", "--vllm-json=out/r.json")
    result.assert_outcomes(failed=1)
    page = (project.path / "out" / "r.html").read_text(encoding="utf-8")
    assert re.search(r'<p class="line fail">vLLM perf FAIL: 1 of 1 results: ', page), page[:600]
    assert re.search(r"<h3>\S+::test_perf \[p\]</h3>", page), page[:600]
    rows = re.findall(r"<tr><td[^>]*>(\w+)</td>.*?</tr>", page.split("<h2>Verdicts</h2>")[1])
    assert "output_throughput" in rows, rows
    assert re.search(r"<td>95% CI x[0-9.]+\.\.x[0-9.]+</td>", page), "no interval"
    assert '<td class="regressed">regressed</td>' in page
    doc = json.loads((project.path / "out" / "r.json").read_text(encoding="utf-8"))
    assert doc["results"][0]["baseline"]["verdict"] in page
    assert not list((project.path / "out").glob("*.png"))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert page.count('src="data:image/png;base64,') == 3, "the three plots inline"
    assert "vllm-perf-plots-" not in result.stdout.str()


def test_a_merge_writes_the_page_of_every_shard(tmp_path, capsys):
    """``vllm-perf merge --html``: the merged line and each result's verdicts."""
    report = ROOT / "bench/results/h200/ab-modes-aa/resident/ab.json"
    out = tmp_path / "merged.html"
    assert merge.main([str(report), "--html", str(out)]) in (0, 1)
    page = out.read_text(encoding="utf-8")
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("vLLM perf ") and line in page.replace("&#x27;", "'")
    assert page.count("<h3>") == len(json.loads(report.read_text())["results"])
