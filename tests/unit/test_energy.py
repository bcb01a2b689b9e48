"""GPU energy from NVML, read at pass boundaries: the meter, the pass's joules, the
metrics and the cost table. NVML itself is replaced by a fake ``pynvml`` module (its
parsing only); that the counter agrees with the GPU's own power reading was checked on
the H200 (README, "What each test cost")."""

from __future__ import annotations

import math
import sys
import types
from dataclasses import replace

import pytest

from pytest_vllm_perf.core.records import (
    Cost,
    Environment,
    Measurement,
    Outcome,
    PassRecord,
    Provenance,
    RequestRecord,
)
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import boundary
from pytest_vllm_perf.metrics import compute
from pytest_vllm_perf.report import cost, document
from pytest_vllm_perf.serving import energy


class NVMLError(Exception):
    pass


def fake_nvml(monkeypatch, counters_mj, fail_init=False, no_counter=False):
    """A pynvml module whose GPUs' energy counters are ``counters_mj`` (mJ), by index."""
    module = types.ModuleType("pynvml")
    module.NVMLError = NVMLError

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    def energy_of(handle):
        if no_counter:
            raise NVMLError("Not Supported")
        return counters_mj[handle]

    module.nvmlInit = init
    module.nvmlDeviceGetCount = lambda: len(counters_mj)
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetHandleByUUID = lambda uuid: int(uuid.rsplit("-", 1)[1])
    module.nvmlDeviceGetTotalEnergyConsumption = energy_of
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_the_meter_sums_the_visible_gpus_in_joules_and_says_why_it_cannot(monkeypatch):
    """Every GPU when CUDA_VISIBLE_DEVICES is unset, the listed ones (indices or UUIDs)
    when set, in joules; a missing module, a driver that does not load and a GPU
    without the counter each give no meter and one clause saying why."""
    counters = [1_000_000, 2_500_000, 7_000]
    fake_nvml(monkeypatch, counters)
    meter, why = energy.open_meter(None)
    assert why == "" and meter is not None and meter.read_j() == pytest.approx(3507.0)
    meter, _ = energy.open_meter("1")
    assert meter is not None and meter.read_j() == pytest.approx(2500.0)
    meter, _ = energy.open_meter("GPU-x-0, 2")
    assert meter is not None and meter.read_j() == pytest.approx(1007.0)
    counters[2] += 3_000  # the counter moves: the next read sees it
    assert meter.read_j() == pytest.approx(1010.0)

    fake_nvml(monkeypatch, counters, fail_init=True)
    meter, why = energy.open_meter(None)
    assert meter is None and why == "NVML unavailable: NVMLError: Driver Not Loaded"
    fake_nvml(monkeypatch, counters, no_counter=True)
    meter, why = energy.open_meter(None)
    assert meter is None and "no energy counter" in why
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert energy.open_meter(None) == (None, energy.MISSING_MODULE)


def test_a_pass_gets_its_joules_and_a_failed_read_is_nan(monkeypatch):
    """The delta of the counter over the pass; a read that failed at either end is NaN
    (never 0: a counter that did not move); unmetered, no ``energy_j`` at all."""
    reads = {"ok": ({"vllm:num_preemptions_total": 1.0}, 100.0, True)}
    after = ({"vllm:num_preemptions_total": 1.0}, 350.5, True)
    deltas = boundary.pass_deltas(reads["ok"], after)
    assert deltas["energy_j"] == pytest.approx(250.5) and deltas["preemptions"] == 0
    assert math.isnan(boundary.pass_deltas(reads["ok"], (after[0], None, True))["energy_j"])
    assert "energy_j" not in boundary.pass_deltas((after[0], None, False), (after[0], None, False))


CHAT = RequestClass("chat", prompt_tokens=8, output_tokens=50, users=1)
WORKLOAD = Workload("w", (CHAT,), duration_s=1.0)


def _pass(index: int, joules: float | None, tokens: int = 50) -> PassRecord:
    record = RequestRecord("chat", 0.1, 0.01, (0.01,) * (tokens - 1), 0.5, 8, tokens, tokens)
    ramp = RequestRecord("chat", 0.0, 0.01, (0.01,) * 9, 0.1, 8, 10, 10)
    counters = {} if joules is None else {"energy_j": joules}
    return PassRecord((record,), 1.0, index=index, counters=counters, ramp_records=(ramp,))


def test_energy_per_1000_output_tokens_counts_every_token_of_the_pass():
    """Energy spans the whole pass, so its tokens are every request's, ramp-up ones
    too: 120 J over 50 + 10 tokens is 2000 J per 1,000; pooled over passes, the sum of
    joules over the sum of tokens. A pass without a meter has neither metric."""
    one = compute.pass_metrics(WORKLOAD, _pass(0, 120.0))
    assert one["energy_j"] == 120.0 and one["energy_per_1k_tokens_j"] == pytest.approx(2000.0)
    pooled = compute._energy((_pass(0, 120.0), _pass(1, 60.0, tokens=20)))
    assert pooled["energy_per_1k_tokens_j"] == pytest.approx(1000 * 180 / 90)
    assert "energy_j" not in compute.pass_metrics(WORKLOAD, _pass(0, None))
    assert math.isnan(compute._energy((_pass(0, math.nan),))["energy_per_1k_tokens_j"])


def _outcome(joules: float | None, note: str = "") -> Outcome:
    passes = (_pass(0, joules), _pass(1, joules))
    per_pass = tuple(compute.pass_metrics(WORKLOAD, p) for p in passes)
    metrics = compute.measure_metrics(WORKLOAD, passes, {}, per_pass)
    env = Environment("cuda", "1x NVIDIA H200", "0.26.0", "2.11", "3.12")
    prov = Provenance("p", {}, "h", (), (), env, energy_note=note)
    return Outcome(
        "t.py::test_x",
        prov,
        Measurement(WORKLOAD, passes, metrics, per_pass),
        (),
        cost=Cost(boot_s=80.0, load_s=30.0, gpus=1),
    )


def test_every_report_shows_what_each_test_cost_and_why_energy_is_missing():
    """The terminal table, the Markdown and the JSON carry the boots' and the load's
    GPU-seconds apart, the joules and the joules per 1,000 output tokens; where NVML
    measured nothing the reason is printed instead. Broken on purpose (the energy left
    out of ``cost.record``), the first assertion fails."""
    measured = _outcome(120.0)
    found = cost.record(measured)
    assert found["energy_j"] == pytest.approx(240.0)
    assert found["energy_per_1k_tokens_j"] == pytest.approx(2000.0)
    assert (found["gpu_boot_s"], found["gpu_load_s"]) == (80.0, 30.0)
    lines = cost.lines(document.build([measured]).results)
    assert lines[0] == "what each test cost:" and "J / 1k out tok" in lines[1]
    assert "2000.0" in lines[2] and "240" in lines[2]
    assert "| `t.py::test_x` | p | 80 | 30 | 1 | 80 | 30 | 240 | 2000.0 |" in document.markdown(
        document.build([measured])
    )
    doc = document.to_json([measured])["results"][0]
    assert doc["cost"]["energy_per_1k_tokens_j"] == pytest.approx(2000.0)
    assert doc["metrics"]["energy_per_1k_tokens_j"] == pytest.approx(2000.0)

    cpu = _outcome(None, note="no NVIDIA GPU (the CPU engine), so no NVML")
    lines = cost.lines(document.build([cpu]).results)
    assert lines[-1] == f"energy not measured: {cpu.provenance.energy_note}"
    assert cost.record(cpu).get("energy_j") is None
    assert lines[2].split()[-2:] == ["-", "-"]  # energy and per 1k tokens: not measured


def test_workers_sharing_a_gpu_are_charged_their_share_of_it(monkeypatch, tmp_path):
    """Two pytest-xdist workers on one GPU hold half of it each: their GPU-seconds sum to
    the GPU's, not twice that (on the H200, counted as one GPU apiece, a merged report
    charged 310 GPU-seconds over a 229 s session). The CPU engine and a server someone
    else started hold none."""
    from pytest_vllm_perf.serving import hardware
    from pytest_vllm_perf.serving.pool import PoolConfig

    monkeypatch.setattr(hardware, "gpu_count", lambda: 1)
    shared = PoolConfig(tmp_path, platform="cuda", gpu_share=2)
    assert shared.gpus_held() == 0.5
    assert PoolConfig(tmp_path, platform="cuda").gpus_held() == 1
    assert PoolConfig(tmp_path, platform="cpu").gpus_held() == 0
    assert PoolConfig(tmp_path, platform="cuda", external_url="http://x").gpus_held() == 0

    half = replace(_outcome(None), cost=Cost(boot_s=80.0, load_s=30.0, gpus=shared.gpus_held()))
    found = cost.record(half)
    assert (found["gpu_boot_s"], found["gpu_load_s"]) == (40.0, 15.0)
    assert "| `t.py::test_x` | p | 80 | 30 | 0.5 | 40 | 15 | - | - |" in document.markdown(
        document.build([half])
    )


def test_an_ab_results_energy_per_token_divides_both_sides_joules_by_both_sides_tokens():
    """An A/B result's passes are both sides': 240 J and 120 output tokens a side is 480 J
    over 240 tokens, 2000 J / 1k tokens, as one side alone is. Seen failing with the
    candidate's tokens alone under both sides' joules (4000)."""
    one = _outcome(120.0)
    both = replace(one, base=one.result)
    found = cost.record(both)
    assert found["energy_j"] == pytest.approx(480.0)
    assert found["energy_per_1k_tokens_j"] == pytest.approx(2000.0)
