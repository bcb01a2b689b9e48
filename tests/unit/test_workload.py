from __future__ import annotations

import pytest

from pytest_vllm_perf.config import workloads as workload
from pytest_vllm_perf.core.errors import WorkloadError
from pytest_vllm_perf.core.workload import RequestClass, Workload


def test_named_workloads_exist_with_descriptions():
    for name in ("mixed", "interference", "kv_pressure", "tokenizer_pressure"):
        assert workload.named(name).description


def test_override_top_level_and_class_fields():
    w = workload.named("interference").override({"duration_s": 5, "chat": {"users": 2}})
    assert w.duration_s == 5
    assert w.classes[0].users == 2
    assert w.hash != workload.named("interference").hash


def test_unknown_override_names_choices():
    with pytest.raises(WorkloadError, match="unknown override 'usrs'"):
        workload.named("mixed").override({"usrs": 3})
    with pytest.raises(WorkloadError, match="unknown field 'user'"):
        workload.named("mixed").override({"chat": {"user": 3}})


def test_class_needs_exactly_one_arrival_mode():
    with pytest.raises(WorkloadError, match="exactly one of users, rate and trace"):
        RequestClass("x", 10, 10, users=1, rate=1.0)


def test_yaml_file(tmp_path):
    path = tmp_path / "steady.yaml"
    path.write_text(
        "duration_s: 3\nclasses:\n  - {name: a, prompt_tokens: 8, output_tokens: 4, users: 1}\n"
    )
    w = workload.load_file(path)
    assert w.name == "steady"
    assert w.classes[0].prompt_tokens == 8


def test_unknown_named_workload():
    with pytest.raises(WorkloadError, match="built in: api_server, capacity, decode, interference"):
        workload.named("nope")


def test_every_built_in_workload_gates_on_a_few_compared_metrics():
    for w in workload.NAMED.values():
        assert 1 <= len(w.gate) <= 4, w.name


def test_gate_names_a_compared_metric_of_a_class_it_has():
    chat = RequestClass("chat", 8, 8, users=1)
    with pytest.raises(WorkloadError, match="gate: unknown metric 'itl_p98_ms'"):
        Workload("w", (chat,), gate=("itl_p98_ms",))
    with pytest.raises(WorkloadError, match=r"'long\.ttft_p50_ms' is not a compared metric"):
        Workload("w", (chat,), gate=("long.ttft_p50_ms",))
    assert Workload("w", (chat,), gate=["chat.itl_p99_ms"]).gate == ("chat.itl_p99_ms",)


def test_gate_does_not_change_the_load_hash():
    w = workload.named("decode")
    assert w.override({"gate": ["itl_p50_ms"]}).hash == w.hash


def test_a_later_field_at_its_default_keeps_the_stored_baselines_key():
    # the hashes the committed baselines were saved under, before shared_prompt existed
    assert workload.named("decode").hash == "ace291462fc9d360"
    assert workload.named("interference").hash == "13b81b5bec0e8e40"
    shared = workload.named("decode").override({"chat": {"shared_prompt": True}})
    assert shared.hash != workload.named("decode").hash


def test_a_shared_prompt_class_sends_one_prompt_and_the_others_fresh_ones():
    import random

    from pytest_vllm_perf.load import prompts, runner

    factory = prompts.PromptFactory(tuple(range(100, 200)), ("ba", "ke", "lo"), 1.0)
    api = workload.named("api_server")
    run = runner._Run(api, None, "", "m", factory)  # type: ignore[arg-type]
    [doc] = api.classes
    rng = random.Random(1)
    sent = {str(run.spec(doc, rng).prompt) for _ in range(3)}
    assert len(sent) == 1
    fresh = workload.named("decode").classes[0]
    assert len({str(run.spec(fresh, rng).prompt) for _ in range(3)}) == 3


def test_progress_says_seconds_of_the_pass_and_the_drain_past_it():
    """``decode pass 2/8: 6/5s`` read as 6 s of a 5-s pass: past the deadline it was the
    drain. Broken on purpose (the old ``elapsed/total s``), neither line matches."""
    import asyncio
    import time
    from types import SimpleNamespace

    from pytest_vllm_perf.load import runner

    said: list[str] = []

    async def main(elapsed_s: float) -> None:
        state = SimpleNamespace(
            workload=SimpleNamespace(name="decode", duration_s=5.0), label=" pass 2/8",
            deadline=time.perf_counter() - elapsed_s + 5.0, records=[], inflight=8,
        )  # fmt: skip
        stop = asyncio.Event()
        task = asyncio.create_task(runner._report(state, stop, said.append, 0.01))
        before = len(said)
        while len(said) == before:  # until it has said something, however slow the machine
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(main(3.0))
    asyncio.run(main(6.4))
    assert "decode pass 2/8: 3 s of 5 s, 0 done, 0 failed, 8 in flight" in said, said
    assert "decode pass 2/8: draining, 1 s past its 5 s, 0 done, 0 failed, 8 in flight" in said
