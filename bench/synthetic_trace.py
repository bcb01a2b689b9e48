"""Write the shipped synthetic trace, ``pytest_vllm_perf/traces/synthetic.jsonl``.

Mooncake's JSON-lines format (``core/trace.py``): 40 requests over about 40 s
(exponential gaps, mean 1 s), prompts of 256-1280 tokens and outputs of 8-32. A third of
the requests continue one of four "documents": they share its first one or two
512-token hash blocks, as requests about one document or one system prompt do, so the
prefix cache has something to find. Seeded; rerun it to get the same file:

    python bench/synthetic_trace.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "pytest_vllm_perf" / "traces" / "synthetic.jsonl"


def main() -> None:
    rng = random.Random(2026)
    lines, t_ms, next_block = [], 0.0, 100
    documents = [[i * 2, i * 2 + 1] for i in range(4)]  # two blocks each
    for _ in range(40):
        t_ms += rng.expovariate(1.0) * 1000
        length = rng.randrange(256, 1281)
        blocks = (length + 511) // 512
        shared = documents[rng.randrange(4)][: min(2, blocks)] if rng.random() < 1 / 3 else []
        own = list(range(next_block, next_block + blocks - len(shared)))
        next_block += len(own)
        entry = {
            "timestamp": round(t_ms),
            "input_length": length,
            "output_length": rng.randrange(8, 33),
            "hash_ids": shared + own,
        }
        lines.append(json.dumps(entry))
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(lines)} requests, {t_ms / 1000:.1f} s)")


if __name__ == "__main__":
    main()
