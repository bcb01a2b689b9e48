"""What tokenizing a 2000-token text costs: the presets' byte-level BPE against word-level.

The same measurement as ``test_bpe_costs_more_to_tokenize_than_word_level`` in
``tests/unit/test_models.py`` (transformers' fast tokenizer, as vLLM's API server
calls it; interleaved calls, fastest of ``--calls``), with the figures written to
``bench/results/tokenizer_cost.md``::

    .venv/bin/python bench/tokenizer_cost.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from pytest_vllm_perf.serving import models

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=2000)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    cache = ROOT / ".vllm-perf-cache" / "models"
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        bpe_folder = models.build(models.LLAMA_8B, cache)
        built_s = time.perf_counter() - started
        bpe = AutoTokenizer.from_pretrained(str(bpe_folder))
        word = AutoTokenizer.from_pretrained(str(models.build(models.TINY, Path(tmp))))
    pool, rng = models.words(2000), random.Random(0)
    per_word = len(bpe.encode(" ".join(pool), add_special_tokens=False)) / len(pool)
    texts = {
        "word-level (tiny)": (word, " ".join(rng.choices(pool, k=args.tokens))),
        "byte-level BPE, 128256 (llama-8b, llama-70b)": (
            bpe,
            " ".join(rng.choices(pool, k=round(args.tokens / per_word))),
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in texts}
    for _ in range(args.calls):
        for name, (tok, text) in texts.items():
            start = time.perf_counter()
            tok.encode(text, add_special_tokens=False)
            times[name].append(time.perf_counter() - start)
    word_best = min(times["word-level (tiny)"])
    lines = [
        f"`.venv/bin/python bench/tokenizer_cost.py --calls {args.calls} --tokens {args.tokens}`: "
        f"one text of about {args.tokens} tokens, {args.calls} interleaved calls each "
        f"(BPE: {per_word:.2f} tokens a word; its folder took {built_s:.1f} s to build, "
        "0 if cached)",
        "",
        "| tokenizer | tokens | fastest ms | median ms | fastest, ratio to word-level |",
        "|---|---|---|---|---|",
    ]
    for name, (tok, text) in texts.items():
        n = len(tok.encode(text, add_special_tokens=False))
        best, median = min(times[name]), statistics.median(times[name])
        lines.append(
            f"| {name} | {n} | {best * 1e3:.2f} | {median * 1e3:.2f} | x{best / word_best:.2f} |"
        )
    out = ROOT / "bench" / "results" / "tokenizer_cost.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
