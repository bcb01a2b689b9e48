from __future__ import annotations

from pathlib import Path

import pytest

from pytest_vllm_perf.load import client

RECORDED = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0-completion.sse"


def events(path: Path) -> list:
    return list(client.parse_sse(path.read_bytes().splitlines(keepends=True)))


def test_recorded_vllm_stream_parses():
    parsed = events(RECORDED)
    assert parsed[-1] is client.DONE
    texts = [e["choices"][0]["text"] for e in parsed[:-1] if e["choices"]]
    assert len(texts) == 8
    assert parsed[-2]["usage"] == {"prompt_tokens": 4, "total_tokens": 12, "completion_tokens": 8}


def test_parse_ignores_comments_and_blank_lines():
    lines = [
        b": keep-alive\n",
        b"\n",
        b'data: {"a": 1}\n',
        b"event: x\n",
        b"data: [DONE]\n",
        b'data: {"after": 1}\n',
    ]
    assert list(client.parse_sse(lines)) == [{"a": 1}, client.DONE]


def replay(state: client.StreamState, times: list[float]) -> None:
    """Feed the recorded events to a stream state at the given arrival times."""
    parsed = [e for e in events(RECORDED) if e is not client.DONE]
    for event, t in zip(parsed, times, strict=True):
        state.on_event(event, t)


def test_ttft_and_itl_follow_content_chunks_and_e2el_ends_at_the_last_token():
    state = client.StreamState(start=10.0)
    # the 9th event is the usage-only chunk after the last token: it times nothing
    replay(state, [10.5, 10.6, 10.8, 10.9, 11.0, 11.1, 11.2, 11.3, 11.35])
    spec = client.RequestSpec("chat", [1, 2, 3, 4], 4, 8)
    rec = client.finish(spec, state, t0=9.0)
    assert rec.ok
    assert rec.ttft == pytest.approx(0.5)
    assert rec.itl == pytest.approx((0.1, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1))
    assert rec.start == pytest.approx(1.0)
    # as vllm bench serve: E2EL ends at the last token (11.3), not at the usage chunk or [DONE]
    assert rec.e2el == pytest.approx(1.3)
    assert rec.output_tokens == 8


def test_chunks_with_empty_text_count_as_vllm_bench_serve_counts_them():
    """Byte-level BPE streams a partial character as a chunk whose text is empty."""
    state = client.StreamState(start=0.0)
    chunk = {"choices": [{"index": 0, "text": ""}]}
    state.on_event(chunk, 0.2)  # the first token is half a character
    state.on_event({"choices": [{"index": 0, "text": "\u00e9"}]}, 0.3)
    state.on_event({"choices": [], "usage": {"completion_tokens": 2}}, 0.35)
    rec = client.finish(client.RequestSpec("c", [1], 1, 2), state, t0=0.0)
    assert rec.ttft == pytest.approx(0.2)
    assert rec.itl == pytest.approx((0.1,))
    assert rec.e2el == pytest.approx(0.3)


def test_short_response_is_a_failure():
    state = client.StreamState(start=0.0)
    replay(state, [0.1 * i for i in range(1, 10)])
    rec = client.finish(client.RequestSpec("chat", [1], 4, 16), state, t0=0.0)
    assert not rec.ok
    assert rec.error == "short response: 8 of 16 tokens"


def test_error_event_is_a_failure():
    state = client.StreamState(start=0.0)
    state.on_event({"error": {"message": "prompt too long", "code": 400}}, 0.1)
    rec = client.finish(client.RequestSpec("chat", [1], 1, 4), state, t0=0.0)
    assert rec.error == "prompt too long"
    assert rec.ttft is None


def test_payload_fixes_output_length():
    body = client.payload(client.RequestSpec("c", [1, 2], 2, 7), "m")
    assert body["max_tokens"] == body["min_tokens"] == 7
    assert body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True}
