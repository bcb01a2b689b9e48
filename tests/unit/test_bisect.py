"""The release bisect's search logic, on a fake, fast verdict function."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_vllm_perf.core.errors import VllmPerfError
from pytest_vllm_perf.tools import bisect

REPO = Path(__file__).resolve().parents[2]
RELEASES = ["0.25.0", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"]


def judge_with(first_bad: str, inconclusive: frozenset[str] = frozenset()):
    asked: list[str] = []

    def judge(release: str) -> bisect.Step:
        asked.append(release)
        if release in inconclusive:
            return bisect.Step(release, "inconclusive")
        bad = RELEASES.index(release) >= RELEASES.index(first_bad)
        return bisect.Step(release, "regressed" if bad else "good")

    return judge, asked


@pytest.mark.parametrize("first_bad", RELEASES[1:])
def test_names_the_first_regressed_release_in_log2_steps(first_bad):
    judge, asked = judge_with(first_bad)
    result = bisect.search(RELEASES, judge, progress=lambda _m: None)
    assert result.first_bad == first_bad
    assert asked[0] == RELEASES[-1]  # the bad end is confirmed first
    assert len(asked) <= 1 + 3  # 8 releases: 7 gaps, ceil(log2 7) = 3 more steps
    assert len(set(asked)) == len(asked)  # no release measured twice
    assert RELEASES[0] not in asked  # the good end is the base, never a candidate


def test_an_inconclusive_step_stops_the_search_with_the_range_open():
    judge, asked = judge_with("0.30.0", inconclusive=frozenset({"0.27.1"}))
    result = bisect.search(RELEASES, judge, progress=lambda _m: None)
    assert result.first_bad is None
    assert asked == ["0.31.0", "0.27.1"]
    assert "0.27.1 is inconclusive" in result.conclusion
    assert "after 0.25.0 and at or before 0.31.0" in result.conclusion


def test_a_bad_end_that_is_not_regressed_has_nothing_to_bisect():
    judge, asked = judge_with("0.31.0")
    result = bisect.search(RELEASES[:-1], judge, progress=lambda _m: None)
    assert result.first_bad is None and asked == ["0.30.0"]
    assert "not regressed" in result.conclusion
    judge, asked = judge_with("0.31.0", inconclusive=frozenset({"0.31.0"}))
    result = bisect.search(RELEASES, judge, progress=lambda _m: None)
    assert result.first_bad is None and asked == ["0.31.0"]
    assert "inconclusive" in result.conclusion


def test_two_releases_need_one_step():
    judge, asked = judge_with("0.26.0")
    result = bisect.search(RELEASES[:2], judge, progress=lambda _m: None)
    assert result.first_bad == "0.26.0" and asked == ["0.26.0"]


def test_releases_between_orders_versions_and_skips_pre_releases():
    offered = ["0.32.0", "0.9.2", "0.10.0", "0.31.0rc1", "0.31.0", "0.10.1.post2", "0.8.5"]
    assert bisect.releases_between(offered, "0.9.2", "0.31.0") == [
        "0.9.2", "0.10.0", "0.10.1.post2", "0.31.0",
    ]  # fmt: skip
    with pytest.raises(VllmPerfError, match="must be newer"):
        bisect.releases_between(offered, "0.31.0", "0.9.2")
    with pytest.raises(VllmPerfError, match=r"0\.30\.0 is not among"):
        bisect.releases_between(offered, "0.9.2", "0.30.0")


def test_markdown_lists_every_step_and_the_conclusion():
    judge, _ = judge_with("0.27.1")
    result = bisect.search(RELEASES, judge, progress=lambda _m: None)
    table = "\n".join(bisect.markdown(result, ["header"]))
    assert table.startswith("header")
    assert table.count("| regressed |") + table.count("| good |") == len(result.steps)
    assert "**first regressed release: 0.27.1 (the last good one: 0.27.0)**" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tolerance", "itl_p50_msx=0.1"], "itl_p50_msx"),
        (["--tolerance", "itl_p50_ms=ten"], "--tolerance itl_p50_ms=ten: not a number"),
        (["--gate", "long.ttft_p50_ms"], "long"),
        (["--tolerance", "long.ttft_p50_ms=0.1"], "long"),
        (["--gate", "ttft_p42_ms"], "ttft_p42_ms"),
        (["--override", "{duration_s: 1}"], "--override: not JSON"),
        (["--plant", "0.31.0"], "--plant '0.31.0': expected RELEASE:PROFILE"),
        (["--profile", "nosuch"], "unknown vLLM profile 'nosuch'"),
    ],
)
def test_bad_input_exits_4_in_one_line_before_anything_is_installed(
    monkeypatch, capsys, args, message
):
    """A typo in --tolerance or --gate was found only after the release environments
    were installed (about 100 s and 3.5 GB each). Broken on purpose (the plan resolved
    after ensure_environment again), the gate and tolerance cases reach the install."""

    def install(*_args, **_kwargs):
        raise AssertionError("an environment was installed before the input was checked")

    monkeypatch.setattr(bisect, "ensure_environment", install)
    base = ["--good", "0.29.0", "--bad", "0.31.0", "--releases", "0.29.0,0.30.0,0.31.0"]
    assert bisect.main([*base, "--profiles-dir", str(REPO / "profiles"), *args]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bisect: ") and message in err[0], err
