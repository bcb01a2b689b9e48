"""Embedded dummy-weight models: a Llama config plus a locally trained tokenizer.

No model hub is reachable in CI, and perf gating needs a model with known
shapes, so the plugin builds its own folder and vLLM serves it with
``--load-format dummy`` (random weights of the right sizes).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

__all__ = ["LLAMA_8B", "PRESETS", "TINY", "ModelPreset", "build", "max_context", "words"]

WORDS_SEED: Final = 1234


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
            "bos_token_id": 1,
            "eos_token_id": 2,
        }


# Small enough to boot in ~35 s on two CPU cores; 8192 context so real profiles fit.
TINY = ModelPreset("tiny-llama", 256, 512, 2, 4, 4, 8192, 4096)
# The layer sizes of Llama-3.1-8B; only the vocabulary is smaller (a local tokenizer).
LLAMA_8B = ModelPreset("llama-3.1-8b-shaped", 4096, 14336, 32, 32, 8, 131072, 32000)
PRESETS: Final = {"tiny": TINY, "llama-8b": LLAMA_8B}
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")


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


def build(preset: ModelPreset, cache_dir: Path) -> Path:
    """The model folder for ``preset`` under ``cache_dir``, built once and then reused."""
    key = json.dumps(asdict(preset), sort_keys=True)
    folder = cache_dir / f"{preset.name}-{abs(hash_text(key)) % 10**10}"
    if (folder / "config.json").is_file():
        return folder
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_dir))
    _train_tokenizer(preset.vocab_size, staging)
    (staging / "config.json").write_text(json.dumps(preset.config(), indent=2) + "\n")
    (staging / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n"
    )
    try:
        os.rename(staging, folder)  # atomic: concurrent builders never see a half folder
    except OSError:
        if not (folder / "config.json").is_file():
            raise
    return folder


def hash_text(text: str) -> int:
    """A stable (not per-process salted) hash of a string."""
    import hashlib

    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def _train_tokenizer(vocab_size: int, folder: Path) -> None:
    """Train a word-level tokenizer whose every word is exactly one token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    vocab = words(vocab_size - len(SPECIAL_TOKENS))
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))  # noqa: S106
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), min_frequency=1
    )
    tokenizer.train_from_iterator([" ".join(vocab)], trainer=trainer)
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


def max_context(model: str) -> int | None:
    """The context length a local model folder declares, or None when unknown."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None
