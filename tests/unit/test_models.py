from __future__ import annotations

import json

from pytest_vllm_perf.serving import models


def test_tiny_model_folder_has_a_working_tokenizer(tmp_path):
    folder = models.build(models.TINY, tmp_path)
    assert models.build(models.TINY, tmp_path) == folder  # cached
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == models.TINY.vocab_size
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tok.get_vocab_size() == config["vocab_size"]
    text = " ".join(models.words(50))
    assert len(tok.encode(text).ids) == 50  # one word, one token: text prompts are exact


def test_llama_8b_preset_has_the_8b_layer_sizes(tmp_path):
    folder = models.build(models.LLAMA_8B, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert {
        k: config[k]
        for k in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        )
    } == {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
    }
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    assert len(tok) == config["vocab_size"]
    assert tok.encode("baba", add_special_tokens=False)
