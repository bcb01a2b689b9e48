"""CPU tokenization: many long texts with tiny outputs keep the API server busy."""

LOAD = {
    "cpu": {"duration_s": 6, "text": {"rate": 3.0, "prompt_tokens": 1000}},
    "cuda": {"duration_s": 8, "text": {"rate": 8.0, "prompt_tokens": 2000}},
}


def test_tokenizer_pressure(vllm_perf):
    platform = vllm_perf.server.platform
    outcome = vllm_perf.run(
        "tokenizer_pressure", thresholds={"ttft_p99_ms": 30_000}, **LOAD[platform]
    )
    # text prompts: the server tokenized them, and the embedded word-level tokenizer is
    # exact (the GPU presets' byte-level BPE is not: about 1.4 tokens a word)
    if vllm_perf.server.tokenizer == "word":
        assert {r.prompt_tokens for r in outcome.result.records} == {
            LOAD[platform]["text"]["prompt_tokens"]
        }
    assert outcome.result.metrics["request_throughput"] > 0
