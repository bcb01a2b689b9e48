from __future__ import annotations

from pytest_vllm_perf.core import redact


def test_secret_names_and_values_are_masked():
    env = {
        "HF_TOKEN": "hf_abcdefghijkl",
        "VLLM_API_KEY": "k",
        "OMP_NUM_THREADS": "2",
        "NOTE": "use Bearer abc.def",
    }
    assert redact.mapping(env) == {
        "HF_TOKEN": "***",
        "VLLM_API_KEY": "***",
        "OMP_NUM_THREADS": "2",
        "NOTE": "use ***",
    }


def test_argv_masks_secret_flag_values():
    argv = [
        "serve",
        "m",
        "--api-key",
        "s3cret",
        "--max-num-seqs",
        "4",
        "--hf-token=hf_xyzxyzxyzxyz",
    ]
    assert redact.argv(argv) == [
        "serve",
        "m",
        "--api-key",
        "***",
        "--max-num-seqs",
        "4",
        "--hf-token=***",
    ]


def test_token_counts_are_not_secrets():
    assert not redact.is_secret_name("--max-num-batched-tokens")
    assert not redact.is_secret_name("max_tokens")
    assert not redact.is_secret_name("tokenizer_mode")
    assert redact.is_secret_name("HF_TOKEN") and redact.is_secret_name("--api-key")
    argv = ["--max-num-batched-tokens", "2048", "--tokenizer", "t"]
    assert redact.argv(argv) == argv
