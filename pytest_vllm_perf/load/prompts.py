"""Prompts with exact token counts in the served model's own tokenizer.

Token-id prompts are exact by construction: ids come from the server's
``/tokenize`` of seeded words, so they are valid for any model it serves, and
each prompt is a fresh random draw, so prefix caching cannot shortcut prefill.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import aiohttp

from pytest_vllm_perf.core.errors import PromptError
from pytest_vllm_perf.serving.models import words

__all__ = ["PromptError", "PromptFactory", "build"]

POOL_WORDS = 2000


@dataclass(frozen=True)
class PromptFactory:
    """Draws prompts from a pool of the model's own token ids and words."""

    token_ids: tuple[int, ...]
    words: tuple[str, ...]
    tokens_per_word: float

    def ids(self, n: int, rng: random.Random) -> list[int]:
        """A prompt of exactly ``n`` token ids."""
        return rng.choices(self.token_ids, k=n)

    def text(self, n: int, rng: random.Random) -> str:
        """A text of about ``n`` tokens (exactly ``n`` with a word-level tokenizer)."""
        count = max(1, round(n / self.tokens_per_word))
        return " ".join(rng.choices(self.words, k=count))


async def build(session: aiohttp.ClientSession, base_url: str, model: str) -> PromptFactory:
    """Ask the server how it tokenizes a seeded word list, and keep the distinct ids."""
    pool = words(POOL_WORDS)
    body = {"model": model, "prompt": " ".join(pool), "add_special_tokens": False}
    async with session.post(f"{base_url}/tokenize", json=body) as resp:
        if resp.status != 200:
            text = (await resp.text())[:300]
            raise PromptError(f"{base_url}/tokenize for model {model!r}: HTTP {resp.status} {text}")
        tokens = [int(t) for t in (await resp.json())["tokens"]]
    if not tokens:
        raise PromptError(f"{base_url}/tokenize returned no tokens for model {model!r}")
    return PromptFactory(tuple(sorted(set(tokens))), tuple(pool), len(tokens) / len(pool))
