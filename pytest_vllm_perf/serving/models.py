"""Embedded dummy-weight models: a Llama config plus a locally trained tokenizer.

No model hub is reachable in CI, and perf gating needs a model with known
shapes, so the plugin builds its own folder and vLLM serves it with
``--load-format dummy`` (random weights of the right sizes).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "LLAMA_8B",
    "LLAMA_70B",
    "PRESETS",
    "TINY",
    "ModelPreset",
    "TokenizerKind",
    "build",
    "folder_name",
    "max_context",
    "train_tokenizer",
    "words",
]

WORDS_SEED: Final = 1234
TokenizerKind = Literal["word", "bpe"]


@dataclass(frozen=True)
class ModelPreset:
    """The shape of a Llama-architecture model; weights are always dummy."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    vocab_size: int
    rope_theta: float = 500000.0
    # "word": one token per word, so text prompts are exact (the tiny CPU model).
    # "bpe": byte-level BPE like Llama 3's, whose tokenization costs what a real
    # model's does: x1.33 the word-level time on 2000 tokens (bench/results/tokenizer_cost.md).
    tokenizer: TokenizerKind = "word"

    def config(self) -> dict[str, object]:
        """The ``config.json`` of this preset."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.hidden_size // self.num_attention_heads,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            # without it transformers 5 warns that a local tokenizer may have Mistral's
            # broken regex; the configs of Llama 3.1 carry it too
            "transformers_version": "4.43.0",
            "bos_token_id": 1,
            "eos_token_id": 2,
        }


# Small enough to boot in 25-50 s on two CPU cores (the "ready at" lines of
# bench/results/cpu/demo-ab.txt, burst-ab-tiny.txt); 8192 context so real profiles fit.
TINY = ModelPreset("tiny-llama", 256, 512, 2, 4, 4, 8192, 4096)
# The CPU demo's model: a decode step of 10-16 ms on one core (bench/results/cpu/
# burst_presets.md), slow enough that the engine, not a starved API server, paces the
# stream. The tiny model's 6 ms step streamed in bursts (median gap 0.01-0.02 ms) in 7 of
# 8 A/B passes of the chunked side with two servers up on two cores.
SMALL = ModelPreset("small-llama", 512, 1408, 4, 8, 8, 8192, 4096)
# The layer sizes of Llama-3.1-8B and its vocabulary size, with a byte-level BPE
# tokenizer trained here (no hub): the LM head and the tokenizer cost what they do
# for the real model.
LLAMA_8B = ModelPreset(
    "llama-3.1-8b-shaped", 4096, 14336, 32, 32, 8, 131072, 128256, tokenizer="bpe"
)
# Llama-3.1-70B's shapes: 140 GB of bf16 weights, so it needs tensor parallelism 2 on
# H200s, and its KV cache (320 KiB a token) is small enough there that the
# gpu_memory_utilization and max_model_len advice can matter.
LLAMA_70B = ModelPreset(
    "llama-3.1-70b-shaped", 8192, 28672, 80, 64, 8, 131072, 128256, tokenizer="bpe"
)
PRESETS: Final = {"tiny": TINY, "small": SMALL, "llama-8b": LLAMA_8B, "llama-70b": LLAMA_70B}
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
# BPE training text: this many distinct words, drawn with Zipf-like weights, so that
# frequent words become one token and rare ones split, as in natural text.
BPE_WORDS: Final = 200_000
BPE_LINES: Final = 2000
LLAMA3_SPLIT: Final = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def words(count: int, seed: int = WORDS_SEED) -> list[str]:
    """Distinct pronounceable lowercase words, deterministic for a seed."""
    rng = random.Random(seed)
    consonants, vowels = "bcdfghjklmnprstvz", "aeiou"
    seen: dict[str, None] = {}
    while len(seen) < count:
        syllables = rng.randint(1, 3)
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
        seen.setdefault(word, None)
    return list(seen)


def folder_name(preset: ModelPreset) -> str:
    """The model folder's name: the preset's name and a hash of its shape and tokenizer.

    Baselines record it as the model, so it is known before anything is built or
    booted (``--vllm-require-baseline`` checks it at collection)."""
    fields = asdict(preset)
    if preset.tokenizer == "word":  # the key from before tokenizers had a kind
        del fields["tokenizer"]
    key = json.dumps(fields, sort_keys=True)
    return f"{preset.name}-{abs(hash_text(key)) % 10**10}"


def build(preset: ModelPreset, cache_dir: Path) -> Path:
    """The model folder for ``preset`` under ``cache_dir``, built once and then reused."""
    folder = cache_dir / folder_name(preset)
    if (folder / "config.json").is_file():
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_dir))
    try:
        train_tokenizer(preset.tokenizer, preset.vocab_size, staging)
        (staging / "config.json").write_text(json.dumps(preset.config(), indent=2) + "\n")
        (staging / "generation_config.json").write_text(
            json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n"
        )
        try:
            os.rename(staging, folder)  # atomic: concurrent builders never see a half folder
        except OSError:
            if not (folder / "config.json").is_file():
                raise
    finally:
        # a failed build's, or the copy of a builder that lost the race: once, a whole
        # 9 MB 8B tokenizer was left behind in the test cache
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def hash_text(text: str) -> int:
    """A stable (not per-process salted) hash of a string."""
    import hashlib

    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def train_tokenizer(kind: TokenizerKind, vocab_size: int, folder: Path) -> None:
    """Train a tokenizer of ``vocab_size`` tokens into ``folder`` (tokenizer.json and config).

    ``word``: every word of :func:`words` is exactly one token. ``bpe``: byte-level
    BPE, as Llama 3 and GPT-style models use, trained on seeded text until the
    vocabulary is full (15 s for 128256 tokens on one core here).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    if kind == "word":
        vocab = words(vocab_size - len(SPECIAL_TOKENS))
        tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))  # noqa: S106
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
        word_trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), min_frequency=1
        )
        tokenizer.train_from_iterator([" ".join(vocab)], trainer=word_trainer)
    else:
        tokenizer = Tokenizer(models.BPE())
        # Llama 3's tokenizer.json: its split regex, then bytes mapped to characters
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tokenizer.decoder = decoders.ByteLevel()
        bpe_trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(_bpe_text(), trainer=bpe_trainer)
        if tokenizer.get_vocab_size() != vocab_size:  # the config's vocab_size must match
            raise RuntimeError(
                f"BPE training reached {tokenizer.get_vocab_size()} tokens, not {vocab_size}"
            )
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": 1 << 20,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def _bpe_text() -> Iterator[str]:
    """Seeded lines of words with Zipf-like frequencies, then every word once."""
    # another seed than the prompt pool's, so that pool words split as a real text's
    # rarer words do: 1.4 tokens a word (English text in Llama 3's: about 1.3)
    vocab = words(BPE_WORDS, seed=WORDS_SEED + 1)
    weights = [1.0 / (rank + 10) for rank in range(len(vocab))]
    rng = random.Random(WORDS_SEED)
    for _ in range(BPE_LINES):
        yield " ".join(rng.choices(vocab, weights=weights, k=500))
    yield " ".join(vocab)


def max_context(model: str) -> int | None:
    """The context length a local model folder declares, or None when unknown."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None
