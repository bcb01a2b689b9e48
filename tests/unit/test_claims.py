from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.records import MetricVerdict, Verdict
from pytest_vllm_perf.report import claims
from pytest_vllm_perf.tools import main as vllm_perf

ROOT = Path(__file__).resolve().parents[2]


def test_readme_claims_table_matches_the_committed_results():
    # regenerated from the reports the claims file cites: a re-run result, an edited
    # claim or a hand-edited table makes this fail
    args = ["claims", str(ROOT / "bench/results/claims.yaml"), "--root", str(ROOT)]
    assert vllm_perf([*args, "--readme", str(ROOT / "docs" / "results.md"), "--check"]) == 0


def test_the_measured_claims_say_what_the_h200_showed():
    evaluated = [claims.evaluate(c, ROOT) for c in claims.load(ROOT / "bench/results/claims.yaml")]
    rows = {r.claim.profile: r for r in evaluated if not r.claim.sweep}
    chunked = {v.metric: v for v in rows["half-gpu-chunked"].verdicts}
    assert rows["half-gpu-chunked"].outcome == "trades"
    assert chunked["chat.itl_max_ms"].verdict is Verdict.IMPROVED
    assert chunked["chat.itl_p99_ms"].verdict is Verdict.REGRESSED
    for servers in (
        "half-gpu-api-2",
        "half-gpu-api-4",
    ):  # bench/results/h200/tokenization-kv-len: TTFT for TPOT
        found = {v.metric: v.verdict for v in rows[servers].verdicts}
        assert rows[servers].outcome == "trades"
        assert found["ttft_p50_ms"] is found["ttft_p99_ms"] is Verdict.IMPROVED
        assert found["tpot_mean_ms"] is Verdict.REGRESSED
    length = {v.metric: v.verdict for v in rows["one-gpu-kv-len-131072"].verdicts}
    assert length["preemptions_per_s"] is length["ttft_p99_ms"] is Verdict.UNCHANGED
    assert not [r for r in evaluated if r.outcome == "not measured"]
    [kv] = [r for r in evaluated if r.claim.sweep]
    assert kv.outcome == "one pass each"
    assert "kv_capacity_tokens 340528 / 386352 / 422992; preemptions 18 / 20 / 18" in kv.figures


def _sweep_file(path: Path, rows: list[tuple[str, int]]) -> str:
    path.write_text(
        json.dumps(
            {
                "rows": [
                    {"profile": p, "preemptions": 3.0, "workload": {"users": users}}
                    for p, users in rows
                ]
            }
        )
    )
    return path.name


def test_a_sweep_claim_lists_each_metric_across_its_profiles(tmp_path):
    name = _sweep_file(tmp_path / "kv.json", [("a", 9), ("b", 9), ("c", 9)])
    claim = claims.Claim("advice", sweep=(name,), profiles=("c", "a"), claimed=("preemptions",))
    row = claims.evaluate(claim, tmp_path)
    assert row.outcome == "one pass each"  # one pass has no interval: never a verdict
    assert row.figures == "c / a (one load, one pass each): preemptions 3 / 3"
    assert f"`{name}`" in claims.markdown([row])


def test_a_sweep_of_two_loads_or_a_missing_profile_is_an_error(tmp_path):
    name = _sweep_file(tmp_path / "kv.json", [("a", 9), ("b", 10)])
    claim = claims.Claim("advice", sweep=(name,), profiles=("a", "b"), claimed=("preemptions",))
    with pytest.raises(BaselineError, match="ran different loads"):
        claims.evaluate(claim, tmp_path)
    with pytest.raises(BaselineError, match="no row for profile 'z'"):
        claims.evaluate(claims.Claim("advice", sweep=(name,), profiles=("z",)), tmp_path)
    path = tmp_path / "claims.yaml"
    path.write_text(f"claims:\n  - advice: x\n    sweep: [{name}]\n")
    with pytest.raises(BaselineError, match=r"claims\[0\]: a sweep needs its 'profiles'"):
        claims.load(path)
    both = f"result: r.json\n    sweep: [{name}]\n    profiles: [a]"
    path.write_text(f"claims:\n  - advice: x\n    {both}\n")
    with pytest.raises(BaselineError, match=r"claims\[0\]: a 'result' or a 'sweep', not both"):
        claims.load(path)


def _v(metric: str, verdict: Verdict) -> MetricVerdict:
    nan = math.nan
    return MetricVerdict(metric, nan, nan, nan, nan, nan, 0.1, verdict)


@pytest.mark.parametrize(
    ("verdicts", "outcome"),
    [
        ({"a": Verdict.IMPROVED, "w": Verdict.UNCHANGED}, "holds"),
        ({"a": Verdict.IMPROVED, "w": Verdict.REGRESSED}, "trades"),
        ({"a": Verdict.REGRESSED, "w": Verdict.UNCHANGED}, "fails"),
        ({"a": Verdict.UNCHANGED, "w": Verdict.UNCHANGED}, "no change"),
        ({"a": Verdict.INCONCLUSIVE, "w": Verdict.UNCHANGED}, "inconclusive"),
        # only a watched metric got better: the advice's own claim is not shown
        ({"a": Verdict.UNCHANGED, "w": Verdict.IMPROVED}, "inconclusive"),
    ],
)
def test_outcome_words(verdicts, outcome):
    claim = claims.Claim("advice", "r.json", claimed=("a",), watched=("w",))
    found = [_v(k, v) for k, v in verdicts.items()]
    assert claims._outcome(claim, found) == outcome


def test_a_bad_claims_file_names_the_file_and_the_entry(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text("claims:\n  - advice: x\n    reslt: r.json\n")
    with pytest.raises(BaselineError, match=r"claims.yaml: claims\[0\]: unknown key \['reslt'\]"):
        claims.load(path)
    path.write_text("claims:\n  - advice: x\n")
    with pytest.raises(BaselineError, match=r"claims\[0\]: a claim with no result needs a 'why'"):
        claims.load(path)
