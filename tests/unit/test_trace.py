"""Trace replay: the JSON-lines format, its errors by line, and the replay."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core import trace
from pytest_vllm_perf.core.errors import WorkloadError
from pytest_vllm_perf.core.workload import RequestClass, Workload
from pytest_vllm_perf.load import runner

LINES = [
    {"timestamp": 1000, "input_length": 700, "output_length": 4, "hash_ids": [1, 2]},
    {"timestamp": 1200, "input_length": 600, "output_length": 3, "hash_ids": [1, 9]},
    {"timestamp": 1500, "input_length": 50, "output_length": 2},
]


def write(tmp_path, lines) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(path)


def test_arrivals_are_seconds_after_the_first_request(tmp_path):
    found = trace.load(write(tmp_path, LINES))
    assert [r.arrival_s for r in found] == [0.0, 0.2, 0.5]
    assert [(r.input_tokens, r.output_tokens, r.hash_ids) for r in found] == [
        (700, 4, (1, 2)), (600, 3, (1, 9)), (50, 2, ()),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not JSON"),
        ('[1, 2]', "expected an object, got list"),
        ('{"timestamp": 5, "input_length": 3}', "missing output_length"),
        ('{"timestamp": -1, "input_length": 3, "output_length": 1}', "timestamp must be"),
        ('{"timestamp": 1, "input_length": 3, "output_length": 1}', "before the previous"),
        ('{"timestamp": 2000, "input_length": 0, "output_length": 1}', "input_length must be"),
        ('{"timestamp": 2000, "input_length": 2.5, "output_length": 1}', "input_length must"),
        ('{"timestamp": 2000, "input_length": 3, "output_length": 1, "hash_ids": "ab"}',
         "hash_ids must be"),
    ],
)  # fmt: skip
def test_a_malformed_line_is_named(tmp_path, bad, message):
    path = write(tmp_path, [LINES[0], "", bad])
    with pytest.raises(WorkloadError) as exc:
        trace.load(path)
    assert str(exc.value).startswith(f"{path}:3: ") and message in str(exc.value)


def test_an_empty_or_missing_trace_is_an_error(tmp_path):
    with pytest.raises(WorkloadError, match="holds no requests"):
        trace.load(write(tmp_path, [""]))
    with pytest.raises(WorkloadError, match="cannot read trace"):
        trace.load(tmp_path / "nosuch.jsonl")


def test_a_trace_class_takes_its_lengths_from_the_trace(tmp_path):
    with pytest.raises(WorkloadError, match="a trace sets the arrivals and token counts"):
        RequestClass("r", prompt_tokens=10, trace=write(tmp_path, LINES))
    with pytest.raises(WorkloadError, match="exactly one of users, rate and trace"):
        RequestClass("r", 10, 10)


def test_the_hash_follows_the_trace_content_not_its_path(tmp_path):
    path = write(tmp_path, LINES)
    one = Workload("w", (RequestClass("r", trace=path),))
    moved = tmp_path / "elsewhere.jsonl"
    shutil.copy(path, moved)
    assert Workload("w", (RequestClass("r", trace=str(moved)),)).hash == one.hash
    moved.write_text(moved.read_text().replace('"output_length": 2', '"output_length": 3'))
    assert Workload("w", (RequestClass("r", trace=str(moved)),)).hash != one.hash
    # a class without a trace hashes as before the field existed
    plain = Workload("w", (RequestClass("chat", 8, 8, users=1),))
    assert plain.hash == Workload("w", (RequestClass("chat", 8, 8, users=1),)).hash


def test_the_shipped_synthetic_trace_parses_and_shares_blocks():
    path = workloads.named("trace").classes[0].trace
    found = trace.load(path)
    assert len(found) == 40
    firsts = [r.hash_ids[0] for r in found if r.hash_ids]
    assert len(firsts) > len(set(firsts))  # some requests share a first block


def test_replay_sends_the_traced_lengths_at_the_traced_times(tmp_path, fake_vllm):
    """Pass k: the requests of the trace at their (scaled) times, with the traced
    lengths; requests sharing a hash block share its tokens; nothing past the deadline."""
    # at x0.5, 3 s after the first request is 1.5 s (inside the 2 s pass), 8 s is 4 s
    lines = [
        *LINES,
        {"timestamp": 4000, "input_length": 10, "output_length": 1},
        {"timestamp": 9000, "input_length": 20, "output_length": 1},
    ]
    load = Workload(
        "w", (RequestClass("r", trace=write(tmp_path, lines), time_scale=0.5),),
        duration_s=2.0, warmup_requests=0, ramp_s=0.0,
    )  # fmt: skip
    recording = asyncio.run(runner.run(load, fake_vllm.url, "fake-model", repeat=1))
    [p] = recording.passes
    assert sorted(r.prompt_tokens for r in p.records) == [10, 50, 600, 700]
    prompts = {len(b["prompt"]): b["prompt"] for b in fake_vllm.requests}
    assert [len(b["prompt"]) for b in fake_vllm.requests] == [700, 600, 50, 10]
    assert prompts[700][:512] == prompts[600][:512]  # block 1, shared
    assert prompts[700][512:600] != prompts[600][512:600]  # blocks 2 and 9 differ
