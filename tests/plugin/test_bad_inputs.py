"""Bad inputs a new user's first week found only after the run, or not at all: each is
now one line naming the file, option or keyword, exit 4, before any request (fake
server). Each was seen failing with its check removed: a traceback after the run, or
a run that passed."""

from __future__ import annotations

import pytest

from tests.plugin.test_surface import PERF_TEST, run

MARKED = """
import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=1, %s)
def test_perf(vllm_perf):
    vllm_perf.run()
"""


def refused(result: pytest.RunResult, fake_vllm: object, line: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([line])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert fake_vllm.requests == []  # type: ignore[attr-defined]


def test_a_marker_threshold_that_is_no_number(perf_project, fake_vllm):
    """``"250ms"``: a ValueError traceback after 50 s of load; in a profile the same
    value was already a one-line exit 4."""
    perf_project.makepyfile(PERF_TEST % "{'ttft_p99_ms': '250ms'}")
    refused(
        run(perf_project, fake_vllm.url), fake_vllm,
        "*marker thresholds: threshold 'ttft_p99_ms': expected a number, got '250ms'*",
    )  # fmt: skip


def test_a_marker_keyword_typo_says_which_keyword_was_meant(perf_project, fake_vllm):
    perf_project.makepyfile(MARKED % "treshold={'ttft_p99_ms': 250}")
    refused(
        run(perf_project, fake_vllm.url), fake_vllm,
        "*unknown keyword 'treshold' (did you mean 'thresholds'?)*",
    )  # fmt: skip


@pytest.mark.parametrize("where", ["profile", "marker"])
def test_a_tolerance_given_in_percent_is_refused(perf_project, fake_vllm, where):
    """``itl_p99_ms: 15`` meant 15% and was accepted: a 1500% tolerance gates nothing."""
    if where == "profile":
        (perf_project.path / "profiles" / "pct.yaml").write_text(
            "extends: default\ntolerances: {itl_p99_ms: 15}\n"
        )
        perf_project.makepyfile(MARKED % "repeat=1")
        result = run(perf_project, fake_vllm.url, "--vllm-profile=pct")
        line = "*pct.yaml: tolerances: tolerance 'itl_p99_ms': expected a fraction*got 15*"
    else:
        perf_project.makepyfile(MARKED % "tolerances={'itl_p99_ms': 15}")
        result = run(perf_project, fake_vllm.url)
        line = "*marker tolerances: tolerance 'itl_p99_ms': expected a fraction*0.15 for 15%*"
    refused(result, fake_vllm, line)


def test_an_empty_profile_is_refused(perf_project, fake_vllm):
    """An empty file ran as vLLM's defaults under its own name, unsaid."""
    (perf_project.path / "profiles" / "empty.yaml").write_text("")
    perf_project.makepyfile(MARKED % "repeat=1")
    refused(
        run(perf_project, fake_vllm.url, "--vllm-profile=empty"), fake_vllm,
        "*empty.yaml: an empty profile; give it a key*",
    )  # fmt: skip


@pytest.mark.parametrize("option", ["--vllm-json", "--vllm-markdown", "--vllm-html"])
def test_a_report_path_that_cannot_be_written(perf_project, fake_vllm, option):
    """A report under a file, or a folder given as the report: a traceback after the
    whole run, with no PASS/FAIL line."""
    perf_project.makepyfile(MARKED % "repeat=1")
    (perf_project.path / "afile").write_text("x")
    (perf_project.path / "afolder").mkdir()
    for path, why in (("afile/r.out", "is a file, not a folder"), ("afolder", "is a folder")):
        refused(
            run(perf_project, fake_vllm.url, f"{option}={path}"), fake_vllm,
            f"*{option}: cannot write *{why}*",
        )  # fmt: skip
