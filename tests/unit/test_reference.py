"""docs/reference.md's tables are generated from the code; a stale table fails here."""

from __future__ import annotations

from pathlib import Path

from pytest_vllm_perf.config.workloads import NAMED
from pytest_vllm_perf.core.registry import METRICS
from pytest_vllm_perf.marker import MARKER_KEYS
from pytest_vllm_perf.tools import reference

README = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def test_readme_reference_blocks_are_current():
    text = README.read_text(encoding="utf-8")
    assert reference.render(text) == text, "docs/reference.md blocks are stale: run make reference"


def test_check_mode_catches_a_stale_block(tmp_path):
    stale = tmp_path / "doc.md"
    stale.write_text(
        "".join(f"<!-- reference:{n} -->\nold\n<!-- /reference:{n} -->\n" for n in reference.BLOCKS)
    )
    assert reference.main([str(stale), "--check"]) == 1
    assert reference.main([str(stale)]) == 0
    assert reference.main([str(stale), "--check"]) == 0


def test_every_metric_workload_and_marker_keyword_is_in_the_reference():
    text = README.read_text(encoding="utf-8")
    for key in (*METRICS, *NAMED, *MARKER_KEYS):
        assert f"`{key}`" in text, key
