"""Claims about vLLM behaviour, shown against one real engine server shared by every test
in this file (the CPU build in CI; ``real_server`` in tests/conftest.py).

CI spreads the suite over pytest-xdist workers file by file (``--dist loadfile``), so
the tests that share this server are kept in this one file and it boots once; the
tests that need a server of their own are in the other engine files."""

from __future__ import annotations

import json
import math
import re
import statistics

import pytest

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core import trace
from pytest_vllm_perf.core.records import Verdict
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.measure import capacity_search, measure
from pytest_vllm_perf.report import benchjson
from pytest_vllm_perf.store import reports
from pytest_vllm_perf.tools import history, merge
from pytest_vllm_perf.verdict import thresholds
from tests.shards import shard_names

pytestmark = pytest.mark.engine
VERDICTS = {str(v) for v in Verdict}
QUICK = workloads.named("mixed").override(
    {
        "duration_s": 6,
        "warmup_requests": 1,
        "chat": {"users": 2, "output_tokens": 16},
        "long": {"rate": 1.0, "prompt_tokens": 512, "output_tokens": 4},
    }
)
PERF_TEST = """
import pytest

@pytest.mark.vllm_perf(workload="mixed", duration_s=6, warmup_requests=1, repeat=1,
                       chat={{"users": 2, "output_tokens": 16}},
                       long={{"rate": 1.0, "prompt_tokens": 512, "output_tokens": 4}},
                       thresholds={thresholds})
def test_perf(vllm_perf):
    vllm_perf.run()
"""


def test_workload_measures_real_tokens(real_server):
    # gauges every 0.5 s: this checks that they are read during the load; at the default
    # 2 s, a 6 s pass on a stalled 2-core VM once got no reading while a request was in
    # flight (KV usage 0 in every reading)
    result = measure(real_server, QUICK, gauges_every_s=0.5)
    checks = thresholds.check(result.metrics, {"failed": 0})
    assert all(c.passed for c in checks), result.failures[:3]
    assert result.metrics["chat.completed"] >= 2
    assert result.metrics["long.completed"] >= 1
    for record in result.records:
        # exact lengths: ignore_eos + max_tokens on the served model's own tokenizer
        assert record.output_tokens == record.expected_output_tokens
        assert record.prompt_tokens == {"chat": 64, "long": 512}[record.cls]
        # a stream whose tokens all came in one chunk has no gaps: its first token is its
        # last (a 4-token long request did so in a fresh-clone CI run beside three more
        # engine workers)
        assert 0 < record.ttft <= record.e2el
        assert (record.ttft < record.e2el) == bool(record.itl), record
        # one gap per streamed chunk; vLLM may merge tokens into a chunk when it lags
        assert len(record.itl) <= record.output_tokens - 1
    assert any(record.itl for record in result.records), "some stream had gaps to time"
    assert result.metrics["ttft_p50_ms"] > 0
    assert result.metrics["preemptions"] == 0
    counters = result.passes[0].counters  # read at the pass boundaries
    assert counters["preemptions"] == 0.0
    assert counters["prefix_cache_queries"] >= counters["prefix_cache_hits"] >= 0
    # the engine's own histograms, under the names scrape.HISTOGRAMS reads: one first
    # token per request of the pass at most (each is observed once, when it streams)
    first = result.passes[0]
    assert 0 < counters["server_ttft_count"] <= len(first.records) + len(first.ramp_records)
    assert counters["server_itl_count"] > 0 and counters["server_tpot_count"] > 0
    for key in ("server_ttft_mean_ms", "server_itl_mean_ms", "server_tpot_mean_ms"):
        assert 0 < result.metrics[key] < math.inf, key
    # the sampler read and parsed the gauges during the load. Whether a reading is above 0
    # is not asserted: the client cannot know what the server still holds. Read at every
    # 16th chunk of one 1024-token stream, KV usage was 0.00098 at the first chunk and 0.0
    # at every later one while the chunks were still arriving (the stream had been
    # generated ahead of the reader), and a fresh-clone CI run read 0.0 at the first chunk
    # too. Parsing a nonzero gauge is tests/unit/test_scrape.py's.
    assert result.gauges, "KV usage and queue are sampled during the run"
    # (a read that timed out on a busy machine has no values: some reading must have them)
    assert any(r.kv_cache_usage is not None for r in result.gauges)


def test_threshold_pass_and_fail_against_real_engine(real_server, perf_project):
    perf_project.makepyfile(
        test_ok=PERF_TEST.format(thresholds="{'ttft_p99_ms': 60000, 'itl_p99_ms': 60000}"),
        test_bad=PERF_TEST.format(thresholds="{'itl_p50_ms': 0.001}"),
    )
    result = perf_project.runpytest_subprocess(
        f"--vllm-url={real_server.base_url}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAIL itl_p50_ms:*(limit <= 0.001)*"])


CONVERSATIONS = workloads.named("multi_turn").override(
    {"duration_s": 5, "warmup_requests": 1, "chat": {"users": 2, "output_tokens": 8}}
)


def test_conversations_are_served_from_the_prefix_cache_and_a_trace_is_replayed(real_server):
    """On the real engine. Multi-turn: each turn resends the history, and vLLM's
    prefix cache (on by default) serves most of it; with no-prefix-cache it serves none
    (shown on the SIGTERM test's server, below: one boot fewer for CI). Trace: the
    shipped synthetic trace at twice its speed, every request sent with its traced
    length. Broken on purpose (the history dropped from later turns), the hit rate
    falls to 0 (0 hits of 4736 queried tokens) and the hit-rate check
    fails."""
    on = measure(real_server, CONVERSATIONS)
    assert on.metrics["failed"] == 0
    assert on.metrics["chat.turn3.ttft_p50_ms"] > 0  # conversations reached turn 3
    # at most ~0.59 (turn 1 misses; later turns hit the previous prompt's full blocks)
    assert on.metrics["prefix_cache_hit_rate"] > 0.4, on.passes[0].counters
    replay = workloads.named("trace").override(
        {"duration_s": 5, "warmup_requests": 1, "requests": {"time_scale": 0.5}}
    )
    played = measure(real_server, replay)
    traced = trace.load(replay.classes[0].trace)
    sent = sorted(r.prompt_tokens for r in played.records)
    expected = sorted(r.input_tokens for r in traced if r.arrival_s * 0.5 < 5)
    assert played.metrics["failed"] == 0 and sent == expected


def test_the_capacity_search_brackets_the_real_engines_slo_boundary(real_server):
    """The capacity search on the real engine finds a rate that keeps the SLO and one
    that breaks it, and its fastest rate breaks the SLO.

    Calibrated on the machine it runs on: the tiny dummy model's capacity is per-request
    Python overhead, which differed more than tenfold between two 2-core machines of one
    kind (one broke a fixed 1500 ms TTFT SLO at 16 req/s; another held it up to 64, the
    most a fixed start of 4 req/s reaches in 5 passes). So one closed-loop pass of 8
    users first measures the engine's saturated request rate R and its TTFT p99 at that
    concurrency; the search starts at R/4, and its SLO is twice that TTFT p99 (at most
    half the pass): an open-loop rate well below R keeps it, a rate above R queues
    without bound and breaks it within a 3 s pass. A 95% interval needs more passes than CI spends;
    examples/test_capacity.py runs the whole search. Broken on purpose (the rate not
    doubled while the SLO holds), no pass breaks the SLO and the bracket check fails."""
    shape = {"prompt_tokens": 256, "output_tokens": 16}
    saturate = Workload(
        "saturate", (RequestClass("requests", users=8, **shape),), duration_s=3,
        warmup_requests=1,
    )  # fmt: skip
    closed = measure(real_server, saturate)
    assert closed.metrics["failed"] == 0, closed.failures[:3]
    rate, ttft_ms = closed.metrics["request_throughput"], closed.metrics["ttft_p99_ms"]
    assert rate > 0 and ttft_ms > 0, closed.metrics
    load = workloads.named("capacity").override(
        {"duration_s": 3, "warmup_requests": 1, "requests": {"rate": rate / 4, **shape}}
    )
    # at most half the pass: a queue that grows without bound shows in a 3 s pass as a
    # TTFT p99 of at most about the pass's length; a busy fresh-clone CI run calibrated
    # 1190 ms, and its SLO of 2384 ms held even at 450 req/s (TTFT p99 2186 ms)
    slo = {"ttft_p99_ms": min(2 * ttft_ms, 1_500), "itl_p99_ms": 1_000}
    found = capacity_search(real_server, load, slo, tolerance=0.2, max_passes=8)
    search = found.search
    rates = dict(zip(search.rates, search.margins, strict=True))
    why = f"{found.line()}; calibration {rate:.3g} req/s, TTFT p99 {ttft_ms:.3g} ms; {rates}"
    assert search.held > 0 and search.broke < float("inf"), why
    # the search went past the boundary: some rate broke the SLO and some held it. Not "the
    # fastest rate broke it": near the boundary single passes disagree (a fresh-clone CI
    # run broke it at 13.1 req/s, margin 2.6, and held it at 13.3, margin 0.25), nor "the
    # margin at the fastest rate exceeds the slowest's" (one stalled pass broke 14.7 req/s
    # by x15 while 15 and 30 req/s gave 0.51 and 4.5)
    assert max(rates.values()) > 1 > min(rates.values()), why
    assert search.passes <= 8 and "capacity of 'requests'" in found.line()


GATE_TEST = """
import pytest

# 3 passes a side of 2 s, the default tolerances: the test checks what is gated, not
# the verdict (6 passes of 3 s, the fewest with which a verdict over 4 gated metrics
# can be significant, cost CI's longest chain of engine files about 40 s); long prompts
# at 1.5/s, so that each side has some in its passes (at 0.5/s three 2 s passes
# would all go without one about once in 15 sides)
@pytest.mark.vllm_perf(workload="mixed", duration_s=2, warmup_requests=1, repeat=3,
                       chat={"users": 4, "output_tokens": 32},
                       long={"rate": 1.5, "prompt_tokens": 512, "output_tokens": 4})
def test_gate(vllm_perf):
    vllm_perf.run()
"""


def test_a_saved_baseline_gates_a_rerun_on_the_same_server(real_server, perf_project):
    """The real engine's passes are saved, and a rerun on the same server is judged
    against them with each of the workload's gated metrics gated: the baseline's
    provenance (model folder, vLLM release, hardware class) matches the rerun's, so
    nothing is "reported, not gated" (the failure the GPU gate had with an older
    preset's baselines). A missing baseline's report is the fake server's
    (tests/plugin/test_gate.py::test_missing_baseline_is_reported_not_failed).

    The A/A's verdict is not asserted. The engine shares CI's two cores with the other
    xdist workers, whose boots starve it at random: one rerun had a pass with no output
    and came out ``regressed`` (before, with 50% tolerances, it was asserted). The
    A/A false-alarm rate is measured on a quiet machine (bench/gate_power.py) and on the
    fake server (tests/plugin/test_gate.py); a regression failing a run on the real
    engine is tests/engine/test_pr_gate.py's. Broken on purpose (the release recorded
    in a saved baseline replaced by another), ``--vllm-require-baseline`` refuses the
    baseline ("other release") before any load, the rerun has no outcome and the
    outcome check fails."""
    perf_project.makepyfile(GATE_TEST)
    args = (f"--vllm-url={real_server.base_url}", "-p", "no:cacheprovider")
    perf_project.runpytest_subprocess(*args, "--vllm-save-baseline").assert_outcomes(passed=1)
    assert list((perf_project.path / ".vllm-perf").rglob("default.json"))
    # a second boot (here, a second run on the same server): with one, and no other
    # baseline of this hardware of two, --vllm-require-baseline refuses it (its drift
    # would be the platform's figure alone)
    perf_project.runpytest_subprocess(*args, "--vllm-add-boot").assert_outcomes(passed=1)
    again = perf_project.runpytest_subprocess(
        *args, "--vllm-require-baseline", "--vllm-json=a.json"
    )
    outcomes = again.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, again.stdout.str()
    if outcomes.get("failed"):  # only a verdict may fail it
        again.stdout.fnmatch_lines(["*vLLM perf regression against*"])
    [found] = json.loads((perf_project.path / "a.json").read_text())["results"]
    gate = found["baseline"]
    assert gate["status"] == "compared", gate
    gated = {v["metric"] for v in gate["verdicts"] if v["gated"]}
    assert gated == set(workloads.named("mixed").gate), gate["verdicts"]
    # each gated metric printed with its verdict, unchanged ones too (a decode rerun
    # once printed no itl_p50_ms line)
    out, names = again.stdout.str(), "|".join(VERDICTS)
    for metric in gated:
        assert re.search(rf"::test_gate \[default\] {metric}: .*\) ({names})\n", out), metric
    # the real engine's report feeds the run history and the pytest-benchmark export
    report = reports.read_report(perf_project.path / "a.json")
    [row] = history.rows_of(report, "2026-12-04T00:00:00+00:00", "c0")
    assert row["passes"] == "3" and row["vllm_version"] == found["environment"]["vllm_version"]
    # a pass that streamed in bursts leaves its per-chunk figures out (null in the report;
    # under CI's load one did): the row holds the median of the passes that measured it
    names = {"tpot_mean_ms": "mean_tpot_ms", "itl_p99_ms": "p99_itl_ms",
             "ttft_p99_ms": "p99_ttft_ms", "output_throughput": "output_throughput"}  # fmt: skip
    measured = {
        key: [v for p in found["passes"] if isinstance(v := p["metrics"].get(name), float)]
        for key, name in names.items()
    }
    assert measured["ttft_p99_ms"] and measured["output_throughput"], measured
    exported = {b["extra_info"]["metric"] for b in benchjson.document(report, {})["benchmarks"]}
    for key, values in measured.items():
        assert (key in exported) == bool(values), (key, exported)
        if values:
            assert float(row[key]) == pytest.approx(statistics.median(values), rel=1e-5), key
    assert history.append(perf_project.path / "hist", [row])[0].endswith("1 run(s), 1 appended")


# A worse profile failing a run, naming the metric and the changed setting, and the
# A/B mechanism on two real servers (alternation, nothing stored): tests/engine/
# test_pr_gate.py, through the pull-request gate in a scratch git repository.


# ramp_s=0: every request of the pass counts, drained past its end. With the default ramp
# (a tenth of the pass) a request that outlasted the 2 s pass on a loaded machine left
# none counted: a fresh-clone CI run beside a CPU-bound process measured 0 completed.
SHARDED = """
import pytest

@pytest.mark.vllm_perf(workload="decode", duration_s=2, warmup_requests=1, repeat=1, ramp_s=0,
                       chat={{"users": 2, "output_tokens": 8}}, thresholds={thresholds})
def NAME(vllm_perf):
    vllm_perf.run()
"""


def test_shards_measured_apart_merge_into_one_report_and_status(real_server, perf_project, capsys):
    """Two shards of one run (``--vllm-shard``), each measuring its one test on the real
    engine, and ``vllm-perf merge``: one report holding both results, and exit 1 naming
    the second shard's failed test (a threshold it cannot meet); the first shard alone
    is a shard missing. The merge's verdict rules, a regressed metric in either shard
    among them, are tests/plugin/test_shards.py's on the fake server. Broken on purpose
    (every test in every shard), the first shard runs both tests and its outcome check
    fails."""
    first, second = shard_names("test_sharded.py")
    ok = SHARDED.format(thresholds="{'failed': 0}").replace("NAME", first)
    bad = SHARDED.format(thresholds="{'ttft_p50_ms': 0.001}").replace("NAME", second)
    perf_project.makepyfile(test_sharded=ok + bad.split("import pytest", 1)[1])
    args = (f"--vllm-url={real_server.base_url}", "-p", "no:cacheprovider")
    reports = []
    for k, outcome in ((1, {"passed": 1}), (2, {"failed": 1})):
        out = perf_project.path / f"shard{k}.json"
        run = perf_project.runpytest_subprocess(*args, f"--vllm-shard={k}/2", f"--vllm-json={out}")
        run.assert_outcomes(**outcome, deselected=1)
        reports.append(str(out))
    capsys.readouterr()
    assert merge.main([*reports, "--json", str(perf_project.path / "merged.json")]) == 1
    printed = capsys.readouterr().out
    assert (
        f"vLLM perf FAIL: 1 of 2 results: test_sharded.py::{second} [default] "
        "ttft_p50_ms (SLO)" in printed
    ), printed
    doc = json.loads((perf_project.path / "merged.json").read_text())
    assert sorted(r["test"] for r in doc["results"]) == sorted(
        f"test_sharded.py::{n}" for n in (first, second)
    )
    assert all(r["metrics"]["completed"] > 0 for r in doc["results"]), doc["results"]
    assert merge.main(reports[:1]) == 1
    assert "shard 2/2 missing" in capsys.readouterr().out
