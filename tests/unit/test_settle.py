"""Settle passes: run at full load before the measured passes, and thrown away.

On the H200 the first pass after the boots read ITL p50 2.5-4% slower than every later
pass of the same server in each planted A/B run (bench/results/h200/plant/*/ab.json);
what these tests hold is the mechanism: the settle pass is sent, is not measured, and
replays a schedule no measured pass replays (else its prompts would be in the prefix
cache of the pass after it).
"""

from __future__ import annotations

import asyncio
import re
import time

from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import runner

LOAD = Workload("s", (RequestClass("chat", 8, 4, users=2),), duration_s=0.4, warmup_requests=1)


def _prompt(body: dict) -> str:
    return str(body["prompt"])


def test_a_settle_pass_is_sent_at_load_and_not_measured(fake_vllm):
    said: list[str] = []
    recording = asyncio.run(
        runner.run(LOAD, fake_vllm.url, "fake-model", said.append, repeat=2, settle=1)
    )
    assert [p.index for p in recording.passes] == [0, 1]
    lines = [m for m in said if "settle pass" in m]
    assert len(lines) == 1, said
    found = re.search(r"s: settle pass 1/1 thrown away \((\d+) requests, 0 failed\)", lines[0])
    assert found, lines
    settled = int(found.group(1))
    assert settled >= 2  # two users at full load, not a request or two
    measured = sum(len(p.records) + len(p.ramp_records) for p in recording.passes)
    warmups = len(LOAD.classes) * LOAD.warmup_requests
    assert len(fake_vllm.requests) == warmups + settled + measured
    # its own schedule: none of its prompts is one a measured pass sent
    sent = [_prompt(b) for b in fake_vllm.requests]
    settle_prompts = set(sent[warmups : warmups + settled])
    assert not settle_prompts & set(sent[warmups + settled :])


def test_no_settle_pass_by_default_in_the_runner(fake_vllm):
    said: list[str] = []
    asyncio.run(runner.run(LOAD, fake_vllm.url, "fake-model", said.append, repeat=1))
    assert not [m for m in said if "settle" in m]


def test_a_server_that_dies_in_the_settle_pass_ends_the_run(fake_vllm):
    """The dead server's run ends at once, no measured pass begun. Broken on purpose
    (the measured passes not checking ``dead``), each pass set its deadline again and
    failed requests for its whole 30 s: the engine tier's killed-engine-core test timed
    out on it."""
    fake_vllm.fail_every = 1
    long = Workload("s", LOAD.classes, duration_s=30, warmup_requests=0)
    started = time.monotonic()
    recording = asyncio.run(
        runner.run(long, fake_vllm.url, "fake-model", repeat=2, settle=1, alive=lambda: False)
    )
    assert recording.passes == ()
    assert time.monotonic() - started < 25  # not a 30 s pass


def test_the_automatic_settle_is_one_pass_on_a_gpu_and_none_on_the_cpu():
    """On the H200 the first pass after the boots read slower (the module's docstring);
    a GPU run with no settle pass by default brought that bias back to pair 1 of every
    A/B run, and nothing noticed. An explicit count wins either way."""
    import dataclasses
    from pathlib import Path

    from pytest_vllm_perf.settings import Settings

    here = Path(".")
    auto = Settings(("default",), here, None, "tiny", None, None, 60.0, here, here, {}, None,
                    8)  # fmt: skip
    assert auto.settle_for("cuda") == 1
    assert auto.settle_for("cpu") == 0
    assert dataclasses.replace(auto, settle_passes=0).settle_for("cuda") == 0
    assert dataclasses.replace(auto, settle_passes=2).settle_for("cpu") == 2
