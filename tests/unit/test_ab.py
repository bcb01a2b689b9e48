"""A/B runs: the alternation order and the paired verdict on recorded passes."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from pytest_vllm_perf import measure as measure_module
from pytest_vllm_perf.core.records import (
    Environment,
    GateResult,
    GateStatus,
    MetricVerdict,
    Outcome,
    PassRecord,
    Provenance,
    RequestRecord,
    Verdict,
)
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.measure import alternation, assemble
from pytest_vllm_perf.tools import bisect
from pytest_vllm_perf.verdict import gate
from pytest_vllm_perf.verdict.sequential import Design

LOAD = Workload("w", (RequestClass("c", 16, 32, users=1),), gate=("tpot_mean_ms",))
ENV = Environment("cuda", "1x test GPU", "0.32.0", "2.9", "3.11")


def provenance(name: str, engine: dict) -> Provenance:
    settings = {"name": name, "engine": engine, "env": {}, "cpu": {}}
    return Provenance(name, settings, name, (), (), ENV)


def recorded(scale: float, schedule_noise: list[float], seed: int):
    """8 passes; pass k's level is the schedule's (shared by both sides) times ``scale``."""
    passes = []
    for k, level in enumerate(schedule_noise):
        rng = random.Random(seed * 100 + k)
        s = scale * level
        records = tuple(
            RequestRecord(
                "c",
                i * 0.1,
                0.1 * s,
                tuple(0.01 * s * rng.uniform(0.9, 1.1) for _ in range(31)),
                0.5 * s,
                16,
                32,
                32,
            )
            for i in range(60)
        )
        passes.append(PassRecord(records, 6.0, index=k))
    return assemble(LOAD, passes, ())


def test_alternation_is_abba_and_each_side_runs_every_pass_once():
    order = alternation(4)
    assert [k for k, _ in order] == [0, 1, 2, 3]
    assert [o for _, o in order] == [
        ("base", "candidate"),
        ("candidate", "base"),
        ("base", "candidate"),
        ("candidate", "base"),
    ]
    flat = [side for _, o in order for side in o]
    assert flat == ["base", "candidate", "candidate", "base"] * 2


# Passes differ by their schedule far more than a 20% change: pairing cancels that.
SCHEDULE = [1.0, 1.6, 0.8, 1.3, 0.7, 1.5, 1.1, 0.9]


def test_paired_verdict_catches_a_change_smaller_than_the_spread_between_passes():
    base = recorded(1.0, SCHEDULE, 1)
    slower = recorded(1.2, SCHEDULE, 2)
    result = gate.ab(
        base,
        slower,
        provenance("default", {}),
        provenance("chunked", {"max_num_batched_tokens": 2048}),
        {"tpot_mean_ms": 0.1},
        ["tpot_mean_ms"],
    )
    assert result.status is GateStatus.AB
    [tpot] = [v for v in result.verdicts if v.metric == "tpot_mean_ms"]
    assert tpot.verdict is Verdict.REGRESSED and tpot.gated
    assert "paired" in tpot.basis
    assert 1.15 < tpot.ratio < 1.25
    assert result.regressions == [tpot]
    assert "profile engine.max_num_batched_tokens (unset) -> 2048" in result.changes
    assert "'chunked' against 'default'" in result.note
    assert result.summary() == "regressed"


def test_a_a_comes_out_clean():
    result = gate.ab(
        recorded(1.0, SCHEDULE, 1),
        recorded(1.0, SCHEDULE, 2),
        provenance("default", {}),
        provenance("default", {}),
        {"tpot_mean_ms": 0.1},
        ["tpot_mean_ms"],
    )
    assert not result.regressions
    [tpot] = [v for v in result.verdicts if v.metric == "tpot_mean_ms"]
    assert tpot.verdict is Verdict.UNCHANGED
    assert result.changes == ()


def test_a_side_in_another_environment_runs_the_lone_launcher_with_that_python(tmp_path):
    """The two-environment launch: the base side's server is started by the other
    venv's interpreter, running the launcher as a lone script (that venv need not
    have the plugin, and this one's packages must not shadow its vLLM), and its
    versions are read from that interpreter."""
    import subprocess
    import sys
    import venv
    from pathlib import Path

    from pytest_vllm_perf.config import profiles
    from pytest_vllm_perf.serving import hardware, launch
    from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool

    other = tmp_path / "other-venv"
    venv.create(other, with_pip=False)  # bare: no vLLM, no torch, no plugin
    python = str(other / "bin" / "python")
    pool = ServerPool(PoolConfig(tmp_path / "cache", model=str(tmp_path / "model")))
    default = profiles.load("default", profiles.search_path(None))
    mine, _, _ = pool.spec(default)
    spec, _, _ = pool.spec(default, python)
    argv = spec.argv(8000)
    assert mine.argv(8000)[:3] == [sys.executable, "-m", "pytest_vllm_perf.serving.launch"]
    assert argv[0] == python and argv[1].endswith("launcher/pytest_vllm_perf.serving.launch.py")
    assert argv[2:] == mine.argv(8000)[3:]  # the same serve command otherwise
    assert Path(argv[1]).read_text() == Path(launch.__file__).read_text()
    assert "PYTHONPATH" not in spec.env
    # the bare venv runs the launcher itself: it fails on the missing vLLM, not on a
    # missing plugin module
    ran = subprocess.run([python, argv[1], "serve", "m"], capture_output=True, text=True)
    assert ran.returncode != 0
    assert "No module named 'vllm'" in ran.stderr
    assert "No module named 'pytest_vllm_perf" not in ran.stderr
    vllm_version, torch_version, python_version = hardware.interpreter_versions(python)
    assert (vllm_version, torch_version) == (None, None)
    assert python_version == ".".join(map(str, sys.version_info[:3]))


def test_two_resident_sides_split_the_gpu_and_say_so(tmp_path):
    """Both A/B sides must fit one GPU. vLLM's default 0.9 becomes 0.44 a side
    (the H200 A/A's setting); a profile that already leaves room is left alone; the CPU
    engine has no GPU memory to split; a plain run never splits. Broken on purpose
    (split_memory ignored in ServerPool.spec), the first assertion fails."""
    from pytest_vllm_perf.config import profiles
    from pytest_vllm_perf.config.profiles import Profile
    from pytest_vllm_perf.serving.pool import SPLIT_NOTE, PoolConfig, ServerPool, split_fraction

    default = profiles.load("default", profiles.search_path(None))
    model = str(tmp_path / "model")

    def spec(profile: Profile, platform: str, split: bool) -> tuple[list[str], tuple[str, ...]]:
        config = PoolConfig(tmp_path / "c", model=model, platform=platform, split_memory=split)
        found, settings, _ = ServerPool(config).spec(profile)
        return found.argv(8000), settings.notes

    argv, notes = spec(default, "cuda", True)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.44"
    assert [n for n in notes if n.startswith(SPLIT_NOTE)] == [
        f"{SPLIT_NOTE}: gpu_memory_utilization 0.9 -> 0.44, both sides resident on one GPU"
    ]
    tuned = profiles.load("tuned", profiles.search_path(None))  # asks for 0.94
    argv, _ = spec(tuned, "cuda", True)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.46"
    half = Profile("half", tmp_path / "half.yaml", engine={"gpu_memory_utilization": 0.44})
    argv, notes = spec(half, "cuda", True)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.44"
    assert not any(n.startswith(SPLIT_NOTE) for n in notes)
    for platform, split in (("cuda", False), ("cpu", True)):
        argv, notes = spec(default, platform, split)
        assert "--gpu-memory-utilization" not in argv
        assert not any(n.startswith(SPLIT_NOTE) for n in notes)
    assert [split_fraction(x) for x in (0.9, 0.92, 0.95, 0.5)] == [0.44, 0.45, 0.46, None]


def test_workers_sharing_a_gpu_split_it_again_and_are_filed_apart(tmp_path, monkeypatch):
    """Two pytest-xdist workers on one GPU (``--vllm-workers-per-gpu 2``): each server
    takes a little under half, a quarter in a resident A/B run (four servers), the
    notes say why, and the hardware class says the GPU was shared, so that such a
    result is never judged against a baseline measured on a GPU of its own. Broken on
    purpose (gpu_share ignored in ServerPool.spec), the first assertion fails."""
    from pytest_vllm_perf.config import profiles
    from pytest_vllm_perf.serving import hardware
    from pytest_vllm_perf.serving.pool import SHARE_NOTE, PoolConfig, ServerPool, split_fraction

    default = profiles.load("default", profiles.search_path(None))
    model = str(tmp_path / "model")

    def spec(share: int, split: bool) -> tuple[list[str], tuple[str, ...]]:
        config = PoolConfig(
            tmp_path / "c", model=model, platform="cuda", split_memory=split, gpu_share=share
        )
        found, settings, _ = ServerPool(config).spec(default)
        return found.argv(8000), settings.notes

    argv, notes = spec(2, False)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.44"
    assert f"{SHARE_NOTE}: gpu_memory_utilization 0.9 -> 0.44, the GPU shared by 2 " in (
        " ".join(notes) + " "
    )
    argv, notes = spec(2, True)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.21"
    assert any("both sides resident on one GPU and the GPU shared by 2" in n for n in notes)
    assert split_fraction(0.9, 4) == 0.21 and split_fraction(0.2, 4) is None
    monkeypatch.setattr(hardware, "all_gpus", lambda: (("0", "NVIDIA H200"),))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert hardware.hardware_class("cuda") == "1x NVIDIA H200"
    assert hardware.hardware_class("cuda", 2) == "1x NVIDIA H200, shared by 2 workers"


def test_ab_runs_gate_what_one_machine_holds_steady():
    """An A/B run gates the workload's ``ab_gate`` on top of its ``gate``, at
    the A/B tolerances fitted to the H200 A/A (5%); a stored-baseline run gates decode's
    TPOT and throughput too, at tolerances above their machine spread (x1.088 and x1.187
    across H200 machines), so that a collapse fails. Broken on purpose (ab ignored in
    gated_metrics), the first assertion fails."""
    from types import SimpleNamespace
    from typing import Any, cast

    from pytest_vllm_perf import measure
    from pytest_vllm_perf.config.workloads import named
    from pytest_vllm_perf.core.registry import default_tolerances
    from pytest_vllm_perf.verdict.gate import gated_metrics

    def result(name: str) -> Any:
        return cast(Any, SimpleNamespace(workload=named(name)))

    assert "chat.itl_p50_ms" in gated_metrics(result("interference"), ab=True)
    assert "chat.itl_p50_ms" not in gated_metrics(result("interference"))
    assert set(gated_metrics(result("decode"))) == {
        "itl_p50_ms",
        "tpot_mean_ms",
        "output_throughput",
    }
    stored, ab = default_tolerances("cuda"), default_tolerances("cuda", ab=True)
    assert stored["output_throughput"] > 0.187 and stored["tpot_mean_ms"] > 0.088
    for key in ("tpot_mean_ms", "output_throughput", "itl_p50_ms", "long.ttft_p50_ms"):
        assert ab[key] == 0.05, key
    assert ab["ttft_p50_ms"] == stored["ttft_p50_ms"]  # the tokenizer's TTFT: no A/A yet
    assert default_tolerances("cpu", ab=True) == default_tolerances("cpu")
    plan = measure.Plan.resolve("t", named("decode"), 8, "cuda", ab=True)
    assert plan.tolerances["output_throughput"] == 0.05
    plan = measure.Plan.resolve(
        "t", named("decode"), 8, "cuda", tolerance_layers=[{"tpot_mean_ms": 0.2}], ab=True
    )
    assert plan.tolerances["tpot_mean_ms"] == 0.2  # a user's tolerance still wins


def test_sequential_blocks_are_cbbc_and_cover_every_pass_once_a_side():
    """--vllm-ab-mode=sequential: the candidate (up when the test starts) runs the
    first half, the base both halves on one boot, the candidate the second half, so
    each test boots the base once and the candidate once more."""
    from pytest_vllm_perf.measure import blocks

    assert blocks(8) == [
        ("candidate", range(4)),
        ("base", range(4)),
        ("base", range(4, 8)),
        ("candidate", range(4, 8)),
    ]
    assert blocks(1) == [("candidate", range(1)), ("base", range(1))]
    for n in (1, 2, 5, 8):
        for side in ("base", "candidate"):
            done = [k for s, passes in blocks(n) if s == side for k in passes]
            assert sorted(done) == list(range(n)), (n, side)


TWO = Workload("w", (RequestClass("c", 16, 32, users=1),), gate=("tpot_mean_ms", "ttft_p99_ms"))


def one_pass(k: int, tpot_scale: float, ttft_scale: float) -> PassRecord:
    rng = random.Random(k)

    def record(i: int) -> RequestRecord:
        gaps = tuple(0.01 * tpot_scale * rng.uniform(0.99, 1.01) for _ in range(31))
        ttft = 0.1 * ttft_scale
        return RequestRecord("c", i * 0.1, ttft, gaps, ttft + sum(gaps), 16, 32, 32)

    return PassRecord(tuple(record(i) for i in range(60)), 6.0, index=k)


def test_looks_go_on_after_a_regression_and_the_regression_stays(monkeypatch):
    """TPOT x1.3 in the first 8 pairs regresses at the first look; TTFT p99 (signed-rank,
    the TTFT of each pass scattered x0.3-x3 on both sides) stays undecided, so the run
    adds pairs up to the budget of 16. The candidate's pairs 9-16 are x0.75 faster:
    judged afresh at 16 pairs TPOT would no longer be regressed; it stays so, as the
    first look decided. Broken on purpose (no carry, or looks stopping once a metric
    regressed), the pass count or the final verdict fails."""
    scatter = [random.Random(100 + k).uniform(0.3, 3.0) for k in range(32)]
    calls: list[tuple[str, int]] = []

    def fake_measure(handle, workload, repeat, progress, first_index=0, settle=0):
        k = first_index
        calls.append((handle.profile, k))
        cand = handle.profile == "cand"
        tpot = (1.3 if k < 8 else 0.75) if cand else 1.0
        ttft = scatter[2 * k + cand]
        return assemble(workload, [one_pass(k, tpot, ttft)], ())

    monkeypatch.setattr(measure_module.ab, "measure", fake_measure)  # what run_ab calls
    plan = measure_module.Plan.resolve("t", TWO, 8, "cpu", ab=True, most=16)
    base = FakeHandle("base", provenance("base", {}))
    cand = FakeHandle("cand", provenance("cand", {}))
    said: list[str] = []
    outcome = measure_module.run_ab(plan, measure_module.Resident(base, cand), said.append)
    assert sorted(calls) == sorted((side, k) for side in ("base", "cand") for k in range(16))
    verdicts = {v.metric: v for v in outcome.gate.verdicts}
    assert verdicts["ttft_p99_ms"].verdict is Verdict.INCONCLUSIVE
    assert verdicts["tpot_mean_ms"].verdict is Verdict.REGRESSED
    assert verdicts["tpot_mean_ms"].basis.startswith("8 pairs")  # the first look's line
    assert "look 3 of 3 after 16 pairs" in outcome.gate.note
    # judged afresh at 16 pairs, the same passes are not a regression
    fresh = gate.ab(outcome.base, outcome.result, base.provenance, cand.provenance,
                    plan.tolerances, list(TWO.gate), look=Design(8, 16).looks()[-1])  # fmt: skip
    assert {v.metric: v for v in fresh.verdicts}["tpot_mean_ms"].verdict is not Verdict.REGRESSED


@dataclasses.dataclass
class FakeHandle:
    profile: str
    provenance: Provenance


def test_a_gate_that_gated_nothing_is_inconclusive_in_tables_as_in_bisect():
    """The table said ``unchanged`` where bisect's step said ``inconclusive``: nothing was
    decided. Broken on purpose (the old default), the first check fails."""
    reported = MetricVerdict("itl_p99_ms", 1.0, 1.0, 1.0, 0.9, 1.1, 0.15, Verdict.UNCHANGED,
                             gated=False)  # fmt: skip
    result = GateResult(GateStatus.AB, Path("base"), (reported,))
    assert result.summary() == "inconclusive"
    base = recorded(1.0, SCHEDULE, 1)
    outcome = Outcome("t", provenance("p", {}), base, (), result)
    assert bisect.step_verdict(outcome) == result.summary()


def test_a_new_way_of_taking_turns_is_one_class_that_run_ab_follows(monkeypatch):
    """An A/B mode is the ``Turns`` of its sides: ``run_ab`` asks it for each side's
    server, the looks and the order of the passes, and never what it is. A made-up
    mode (candidate first in every pair, one look of 3 pairs, booted in turn) is run
    in exactly its order, judged with a boot's drift allowed, and nothing of
    ``measure`` had to change for it. Broken on purpose (``run_ab`` alternating ABBA
    whatever the turns say), the order assertion fails."""
    calls: list[tuple[str, int]] = []

    def fake_measure(handle, workload, repeat, progress, first_index=0, settle=0):
        calls.append((handle.profile, first_index))
        return assemble(workload, [one_pass(first_index, 1.0, 1.0)], ())

    monkeypatch.setattr(measure_module.ab, "measure", fake_measure)
    handles = {
        "base": FakeHandle("base", provenance("base", {})),
        "candidate": FakeHandle("cand", provenance("cand", {})),
    }

    @dataclasses.dataclass(frozen=True)
    class CandidateFirst:
        in_turn: bool = True

        def server(self, side):
            return handles[side]

        def design(self, plan):
            return Design(first=3, most=3, alpha=plan.alpha)

        def order(self, pairs):
            return [(k, side) for k in range(pairs) for side in ("candidate", "base")]

    plan = measure_module.Plan.resolve("t", TWO, 8, "cpu", ab=True, most=16)
    seen: dict[str, bool] = {}
    real_ab = measure_module.ab.gate.ab

    def spy(*args, **kwargs):
        seen["sequential"] = kwargs["sequential"]
        return real_ab(*args, **kwargs)

    monkeypatch.setattr(measure_module.ab.gate, "ab", spy)
    outcome = measure_module.run_ab(plan, CandidateFirst(), None)
    assert calls == [("cand", 0), ("base", 0), ("cand", 1), ("base", 1), ("cand", 2), ("base", 2)]
    assert seen == {"sequential": True}
    assert outcome.gate is not None
    assert "booted in turn" in outcome.gate.note and "; 3 pairs:" in outcome.gate.note


def test_no_pairs_are_bought_for_a_metric_no_pass_measured(monkeypatch):
    """Both sides streamed in bursts in every pass but the base side's first, so TPOT
    (gated) is measured in 1 vs 0 passes and has no estimate; TTFT p50, the same on
    both sides, is decided at the first look. The run stops there: it went on to the
    budget (16 pairs), each look "undecided (tpot_mean_ms)". Broken on purpose (every
    inconclusive metric open), all 16 pairs run."""
    load = Workload(
        "w", (RequestClass("c", 16, 32, users=1),), gate=("tpot_mean_ms", "ttft_p50_ms")
    )
    calls: list[tuple[str, int]] = []

    def fake_measure(handle, workload, repeat, progress, first_index=0, settle=0):
        k = first_index
        calls.append((handle.profile, k))
        measured = handle.profile == "base" and k == 0
        made = one_pass(k, 1.0 if measured else 0.01, 1.0)  # gaps of 0.1 ms: bursts
        return assemble(workload, [made], ())

    monkeypatch.setattr(measure_module.ab, "measure", fake_measure)
    plan = measure_module.Plan.resolve("t", load, 8, "cpu", ab=True, most=16)
    base = FakeHandle("base", provenance("base", {}))
    cand = FakeHandle("cand", provenance("cand", {}))
    outcome = measure_module.run_ab(plan, measure_module.Resident(base, cand), print)
    verdicts = {v.metric: v for v in outcome.gate.verdicts}
    assert verdicts["tpot_mean_ms"].verdict is Verdict.INCONCLUSIVE
    assert verdicts["tpot_mean_ms"].ratio != verdicts["tpot_mean_ms"].ratio  # no estimate
    assert verdicts["ttft_p50_ms"].verdict is Verdict.UNCHANGED
    assert len(calls) == 16, calls  # 8 pairs: the first look


def test_saving_a_baseline_whose_gated_metrics_no_pass_measured_warns(tmp_path):
    """The tiny preset streamed in bursts on two cores, so TPOT (gated) was left out of
    every pass, and ``--vllm-save-baseline`` saved a baseline that can never gate it,
    saying nothing. Broken on purpose (no warning), the note is empty."""
    bursty = assemble(LOAD, [one_pass(k, 0.01, 1.0) for k in range(4)], ())
    made = gate.evaluate(
        "t.py::t", bursty, provenance("p", {}), tmp_path, {}, ["tpot_mean_ms"], gate.SaveMode.SAVE
    )
    assert made.status is GateStatus.SAVED
    assert made.note.startswith("WARNING: gated metrics measured in too few passes"), made.note
    assert "tpot_mean_ms in 0 of 4" in made.note
    steady = assemble(LOAD, [one_pass(k, 1.0, 1.0) for k in range(4)], ())
    again = gate.evaluate(
        "t.py::t", steady, provenance("p", {}), tmp_path, {}, ["tpot_mean_ms"], gate.SaveMode.SAVE
    )
    assert again.note == ""
