"""The tuning advice on real GPUs: a tokenization bottleneck, and KV pressure on a 70B shape.

Two measurements the example suite cannot make in its fixed load, each in one
command on a GPU machine (README "Tuning claims"):

``tokenization``
    One API server process as the bottleneck. A long shared document (the
    ``api_server`` workload: the prefix cache serves its prefill, so the GPU's
    share is small) is sent at rising rates, once as token ids (no tokenizing)
    and once as text. Where text's TTFT grows and ids' does not, at the same
    GPU work, the API server's tokenizing is the bottleneck; GPU utilization
    (nvidia-smi) and the engine's waiting queue show the GPU idle. At that rate,
    each candidate profile (more API server processes) is run A/B against the
    base profile, and the tool's paired verdict is reported.

``kv``
    The gpu_memory_utilization advice with vLLM's own allocator: each profile
    is booted in turn on the same load, which is sized from the first profile's
    KV cache (``--fill`` times its token capacity, spread over closed-loop users;
    ``--users`` fixes it instead, to repeat an earlier run's load), and
    preemptions, TTFT p99 and throughput are recorded. With ``--save`` each
    result is also saved as that profile's baseline. With ``--ab`` the two
    profiles named stay resident at once and run A/B (passes alternated), which
    gives the tool's verdict with 95% intervals rather than one pass each: the
    ``max_model_len`` test (bench/results/h200/tokenization-kv-len) ran so on one H200.

Both write ``NAME.json`` (every figure, the load, the versions) and ``NAME.md``
to ``--out``. Run from the repository root with vLLM importable::

    python3 bench/gpu/gpu_advice.py tokenization --out out/tok
    python3 bench/gpu/gpu_advice.py kv --preset llama-70b \\
        --profiles tp2-mem-0.90,tp2-mem-0.85,tp2-mem-0.94 --save --out out/kv
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_vllm_perf import measure
from pytest_vllm_perf.config import profiles, workloads
from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.records import Outcome
from pytest_vllm_perf.core.workload import Workload
from pytest_vllm_perf.report import document
from pytest_vllm_perf.serving.pool import PoolConfig, ServerHandle, ServerPool

ROOT = Path(__file__).resolve().parents[2]

SHOWN = ("request_throughput", "ttft_p50_ms", "ttft_p99_ms", "failed", "num_requests_waiting_peak")


class GpuUtilization:
    """nvidia-smi's utilization.gpu of the visible GPUs, every 200 ms, while in use."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuUtilization:
        smi = shutil.which("nvidia-smi")
        if smi:
            mask = os.environ.get("CUDA_VISIBLE_DEVICES")
            argv = [smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
            if mask and all(p.strip().isdigit() for p in mask.split(",")):
                argv += ["-i", mask]
            self._proc = subprocess.Popen([*argv, "-lms", "200"], stdout=subprocess.PIPE, text=True)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.strip().isdigit():
                self.samples.append(float(line))

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def kv_capacity_tokens(handle: ServerHandle, log: Path | None) -> int | None:
    """The KV cache's size in tokens: from /metrics' cache_config_info, else the log."""
    try:
        with urllib.request.urlopen(f"{handle.base_url}/metrics", timeout=10) as resp:
            body = resp.read().decode()
        for line in body.splitlines():
            if line.startswith("vllm:cache_config_info{"):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                blocks, size = labels.get("num_gpu_blocks"), labels.get("block_size")
                if blocks and size and blocks != "None":
                    return int(blocks) * int(size)
    except OSError:
        pass
    if log is not None and log.is_file():
        found = re.findall(r"KV cache size: ([\d,]+) tokens", log.read_text(errors="replace"))
        if found:
            return int(found[-1].replace(",", ""))
    return None


def _row(workload: Workload, metrics: dict[str, float], **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        **{k: metrics.get(k) for k in SHOWN},
        "preemptions": metrics.get("preemptions"),
        "output_throughput": metrics.get("output_throughput"),
        "kv_cache_usage_peak": metrics.get("kv_cache_usage_peak"),
        "workload": workload.to_dict(),
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return lines


def _verdict_lines(outcome: Outcome) -> list[str]:
    """The A/B verdict, one line per metric, printed as the run's progress and returned."""
    gate = outcome.gate
    if gate is None:
        return []
    lines = [gate.note]
    for v in gate.verdicts:
        lines.append(
            f"{v.metric}: {v.baseline:.4g} -> {v.current:.4g} (x{v.ratio:.3f}, 95% CI "
            f"x{v.low:.3f}..x{v.high:.3f}, {v.basis}, tolerance {v.tolerance:.0%}) {v.verdict}"
            + ("" if v.gated else " [reported, not gated]")
        )
    print("\n".join(f"[gpu-advice] {line}" for line in lines), flush=True)
    return lines


def _pool(args: argparse.Namespace) -> ServerPool:
    config = PoolConfig(Path(args.cache_dir), preset=args.preset, boot_timeout_s=args.boot_timeout)
    return ServerPool(config, lambda m: print(f"[gpu-advice] {m}", flush=True))


Emit = Callable[[dict[str, Any], list[str]], None]


def tokenization(args: argparse.Namespace) -> dict[str, Any]:
    where = profiles.search_path(ROOT / "bench" / "profiles")
    base_profile = profiles.load(args.profile, where)
    pool = _pool(args)
    base_workload = workloads.named("api_server").override({"duration_s": args.duration})
    sweep: list[dict[str, Any]] = []
    ab: list[dict[str, Any]] = []
    outcomes: list[Outcome] = []
    try:
        base = pool.get(base_profile, slot="base")
        for kind in ("ids", "text"):
            for rate in args.rates:
                load = {"rate": rate, "prompt_tokens": args.prompt_tokens, "text": kind == "text"}
                workload = base_workload.override({"doc": load})
                print(f"[gpu-advice] sweep: {kind} at {rate}/s", flush=True)
                with GpuUtilization() as gpu:
                    result = measure.measure(base, workload)
                row = _row(workload, dict(result.metrics), prompt=kind, rate=rate)
                row["gpu_util_mean"] = gpu.mean
                sweep.append(row)
                print(f"[gpu-advice]   {json.dumps({k: row[k] for k in SHOWN})}", flush=True)
        chosen = _saturating_rate(sweep, args.rates)
        print(f"[gpu-advice] A/B rate: {chosen}/s", flush=True)
        workload = base_workload.override(
            {"doc": {"rate": chosen, "prompt_tokens": args.prompt_tokens, "text": True}}
        )
        plan = measure.Plan.resolve(
            "bench/gpu_advice.py::tokenization", workload, args.repeat, "cuda"
        )
        for name in args.candidates:
            candidate = pool.get(profiles.load(name, where), slot="main")
            outcome = measure.run_ab(plan, measure.Resident(base, candidate), print)
            outcomes.append(outcome)
            lines = _verdict_lines(outcome)
            ab.append({"candidate": name, "rate": chosen, "lines": lines})
    finally:
        pool.stop()
    return {
        "sweep": sweep,
        "ab_rate": chosen,
        "ab": ab,
        "report": document.to_json(outcomes),
    }


def _saturating_rate(sweep: Sequence[dict[str, Any]], rates: Sequence[float]) -> float:
    """The lowest rate where text's TTFT p50 is over twice ids' at the same rate."""
    by = {(r["prompt"], r["rate"]): r for r in sweep}
    for rate in rates:
        ids, txt = by[("ids", rate)]["ttft_p50_ms"], by[("text", rate)]["ttft_p50_ms"]
        if ids and txt and txt > 2 * ids:
            return rate
    return rates[-1]


def tokenization_markdown(data: dict[str, Any]) -> list[str]:
    cols = ["prompt", "rate", *SHOWN, "gpu_util_mean"]
    lines = ["## Sweep: one API server, ids against text", "", *_table(data["sweep"], cols)]
    lines += ["", f"## A/B at {data['ab_rate']}/s (text)", ""]
    for entry in data["ab"]:
        lines += [f"### {entry['candidate']}", "", "```", *entry["lines"], "```", ""]
    return lines


def _kv_workload(args: argparse.Namespace, name: str, capacity: int | None) -> Workload:
    """The kv_pressure load, sized on ``name``'s KV capacity unless ``--users`` fixes it."""
    if capacity is None and not args.users:
        raise SystemExit(f"{name}: cannot read the KV cache size to size the load")
    per_seq = args.prompt_tokens + args.output_tokens / 2
    users = args.users or math.ceil(args.fill * (capacity or 0) / per_seq)
    how = "fixed by --users" if args.users else f"sized on {name}"
    print(f"[gpu-advice] load: {users} users, {how}", flush=True)
    return workloads.named("kv_pressure").override(
        {
            "duration_s": args.duration,
            "ramp_s": args.ramp,
            # one request of the shape is enough warmup in eager mode, and one
            # 70B-shaped request decodes alone at ~27 tok/s on two H200s
            # (bench/results/h200/kv-70b-tp2/server-tp2-mem-0.94.log): 600 tokens take ~22 s
            "warmup_requests": 1,
            "seq": {
                "users": users,
                "prompt_tokens": args.prompt_tokens,
                "output_tokens": args.output_tokens,
            },
        }
    )


def _booted(pool: ServerPool, name: str, slot: str) -> tuple[ServerHandle, float, int | None]:
    where = profiles.search_path(ROOT / "bench" / "profiles")
    started = time.monotonic()
    handle = pool.get(profiles.load(name, where), slot=slot)
    boot_s = time.monotonic() - started
    return handle, boot_s, kv_capacity_tokens(handle, getattr(handle.server, "log_path", None))


def kv_ab(args: argparse.Namespace) -> dict[str, Any]:
    """Two profiles resident at once (each on its own share of the GPUs), passes
    alternated ABBA on one load, and the tool's paired verdict with 95% intervals:
    the form a claim needs when the question is "does this setting change anything"."""
    pool = _pool(args)
    try:
        base, base_boot, base_cap = _booted(pool, args.profiles[0], "base")
        cand, cand_boot, cand_cap = _booted(pool, args.profiles[1], "main")
        workload = _kv_workload(args, args.profiles[0], base_cap)
        plan = measure.Plan.resolve(
            "bench/gpu_advice.py::kv_pressure", workload, args.repeat, "cuda"
        )
        outcome = measure.run_ab(plan, measure.Resident(base, cand), print)
    finally:
        pool.stop()
    assert outcome.base is not None
    rows = [
        _row(workload, dict(m.metrics), profile=n, boot_s=round(b, 1), kv_capacity_tokens=c)
        for n, m, b, c in (
            (args.profiles[0], outcome.base, base_boot, base_cap),
            (args.profiles[1], outcome.result, cand_boot, cand_cap),
        )
    ]
    lines = _verdict_lines(outcome)
    return {"rows": rows, "ab": lines, "report": document.to_json([outcome])}


def kv(args: argparse.Namespace, emit: Emit) -> dict[str, Any]:
    """Each profile in turn; ``emit`` writes the results so far after each one, so that
    a run stopped at the session's GPU limit keeps the profiles it finished."""
    pool = _pool(args)
    rows: list[dict[str, Any]] = []
    outcomes: list[Outcome] = []
    workload: Workload | None = None
    try:
        for name in args.profiles:
            handle, boot_s, capacity = _booted(pool, name, "main")
            if workload is None:
                workload = _kv_workload(args, name, capacity)
            plan = measure.Plan.resolve(
                "bench/gpu_advice.py::kv_pressure", workload, args.repeat, "cuda"
            )
            mode = measure.SaveMode.SAVE if args.save else measure.SaveMode.COMPARE
            outcome = measure.run_test(plan, handle, Path(args.baseline_dir), mode, print)
            outcomes.append(outcome)
            row = _row(workload, dict(outcome.result.metrics), profile=name)
            row.update(boot_s=round(boot_s, 1), kv_capacity_tokens=capacity)
            rows.append(row)
            print(f"[gpu-advice] {name}: {json.dumps(_brief(row))}", flush=True)
            partial = {"rows": rows, "report": document.to_json(outcomes), "partial": True}
            emit(partial, kv_markdown(partial))
    finally:
        pool.stop()
    return {"rows": rows, "report": document.to_json(outcomes)}


KV_COLUMNS = (
    "profile",
    "kv_capacity_tokens",
    "preemptions",
    "ttft_p99_ms",
    "ttft_p50_ms",
    "output_throughput",
    "request_throughput",
    "kv_cache_usage_peak",
    "failed",
    "boot_s",
)


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in KV_COLUMNS}


def kv_markdown(data: dict[str, Any]) -> list[str]:
    lines = ["## KV pressure at each profile, one load", "", *_table(data["rows"], KV_COLUMNS)]
    if data.get("ab"):
        lines += ["", "## A/B verdict (passes alternated ABBA)", "", "```", *data["ab"], "```"]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("tokenization", "kv"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True, help="folder for NAME.json and .md")
        p.add_argument("--name", default=name)
        p.add_argument("--cache-dir", default=".vllm-perf-cache")
        p.add_argument("--boot-timeout", type=float, default=900.0)
        p.add_argument("--repeat", type=int, default=8)
        p.add_argument("--duration", type=float, default=8.0, help="seconds a pass")
    t = sub.choices["tokenization"]
    t.add_argument("--preset", default="llama-8b")
    t.add_argument("--profile", default="half-gpu")
    t.add_argument("--candidates", type=lambda s: s.split(","), default=["half-gpu-api-2"])
    t.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")],
                   default=[10.0, 20.0, 40.0, 80.0])  # fmt: skip
    t.add_argument("--prompt-tokens", type=int, default=8000)
    k = sub.choices["kv"]
    k.add_argument("--preset", default="llama-70b")
    k.add_argument("--profiles", type=lambda s: s.split(","), required=True)
    k.add_argument("--fill", type=float, default=1.15, help="load / KV capacity of the first")
    k.add_argument("--users", type=int, help="this many users instead of --fill's sizing")
    k.add_argument("--prompt-tokens", type=int, default=3000)
    k.add_argument("--output-tokens", type=int, default=1000)
    k.add_argument("--ramp", type=float, default=5.0)
    k.add_argument("--save", action="store_true", help="save each result as its baseline")
    k.add_argument("--ab", action="store_true", help="both profiles up, run A/B, with intervals")
    k.add_argument("--baseline-dir", default=".vllm-perf")
    args = parser.parse_args(argv)
    if args.command == "kv" and args.ab and (args.save or len(args.profiles) != 2):
        parser.error("kv --ab: --profiles names a base and a candidate, and saves no baseline")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    argv_shown = sys.argv[1:] if argv is None else list(argv)

    def emit(data: dict[str, Any], lines: list[str]) -> None:
        data["seconds"] = round(time.monotonic() - started, 1)
        data["argv"] = argv_shown
        atomic.write_text(args.out / f"{args.name}.json", json.dumps(data, indent=1) + "\n")
        header = [f"`python3 bench/gpu/gpu_advice.py {' '.join(argv_shown)}` ({data['seconds']} s)"]
        if data.get("partial"):
            header.append("(partial: the run was still going when this was written)")
        atomic.write_text(args.out / f"{args.name}.md", "\n".join([*header, "", *lines]) + "\n")

    if args.command == "tokenization":
        data = tokenization(args)
        lines = tokenization_markdown(data)
    else:
        data = kv_ab(args) if args.ab else kv(args, emit)
        lines = kv_markdown(data)
    emit(data, lines)
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
