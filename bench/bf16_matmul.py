"""bfloat16 against float32 matmuls of a decode step's shape, on this CPU, one thread
(the CPU engine's worker runs on one core of two): whether the embedded models should
run in float32 here (``config.profiles.engine_settings``'s ``native_bf16``).

    .venv/bin/python bench/bf16_matmul.py > bench/results/cpu/bf16-avx2.txt
"""

from __future__ import annotations

import time

import torch

from pytest_vllm_perf.serving import hardware

# the small preset's MLP: 16 decoding sequences times hidden 512 -> intermediate 1408
SHAPE = ((16, 512), (512, 1408))


def per_call_us(dtype: torch.dtype, calls: int = 500) -> float:
    a, w = torch.randn(*SHAPE[0], dtype=dtype), torch.randn(*SHAPE[1], dtype=dtype)
    for _ in range(10):
        a @ w
    started = time.perf_counter()
    for _ in range(calls):
        a @ w
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    torch.set_num_threads(1)
    print(
        f"cpu: {hardware.cpu_model()}; native bf16 (AVX-512 BF16 or AMX): {hardware.cpu_has_bf16()}"
    )
    print(f"torch {torch.__version__}, one thread, {SHAPE[0]} @ {SHAPE[1]}")
    # three rounds each, interleaved, so that a busy moment hits both
    rounds = [(per_call_us(torch.bfloat16), per_call_us(torch.float32)) for _ in range(3)]
    for i, (bf16, f32) in enumerate(rounds, 1):
        print(
            f"round {i}: bf16 {bf16:.0f} us, float32 {f32:.0f} us, bf16/float32 x{bf16 / f32:.1f}"
        )


if __name__ == "__main__":
    main()
