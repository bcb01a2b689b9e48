"""vLLM servers, booted lazily per profile and reused across tests.

Two servers under load on one accelerator corrupt each other's figures, so each
slot holds one server, and asking a slot for another profile stops its server
first. Normal runs use one slot. An A/B run (``--vllm-ab``) uses two, ``main``
for the candidate and ``base``, both up and only one loaded at a time
(``measure.run_ab``). On a GPU both sides must fit: with ``split_memory`` each side
whose profile asks for more than half the GPU (vLLM's default is 0.9) gets a little
under half (``split_fraction``: 0.9 -> 0.44, what the H200 A/A of
bench/results/h200/aa-chunked-tokenization ran at, x0.977..x1.021 on every metric A/B
gates), and its notes and provenance say so. A profile whose boot failed is
remembered, so its other tests fail at once instead of rebooting.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from pytest_vllm_perf.config import profiles
from pytest_vllm_perf.config.profiles import EngineSettings, Profile
from pytest_vllm_perf.core import atomic, redact
from pytest_vllm_perf.core.records import Platform, Progress, Provenance
from pytest_vllm_perf.serving import energy, engine_args, hardware, models
from pytest_vllm_perf.serving.server import (
    ExternalServer,
    ServerError,
    ServerSpec,
    VllmServer,
    stop_servers,
)

__all__ = [
    "SHARE_NOTE",
    "SPLIT_NOTE",
    "PoolConfig",
    "ServerHandle",
    "ServerPool",
    "served_model",
    "server_log",
    "split_fraction",
]

VLLM_DEFAULT_GPU_MEMORY: Final = 0.9  # vLLM's own gpu_memory_utilization
SPLIT_NOTE: Final = "A/B memory split"
SHARE_NOTE: Final = "GPU memory split"


def server_log(cache_dir: Path, profile: str, now: float, *, pid: int) -> Path:
    """The log of a server booted for ``profile`` at ``now`` (Unix time) by process ``pid``.

    The process id is in the name because pytest-xdist workers share the cache folder and
    boot the same profile in the same second: two servers then wrote one log file."""
    return cache_dir / "logs" / f"{profile}-{int(now)}-{pid}.log"


def split_fraction(asked: float, ways: int = 2) -> float | None:
    """The ``gpu_memory_utilization`` of one of ``ways`` servers resident on one GPU, or
    None when ``asked`` already leaves room for the others: its share, rounded down to a
    hundredth, less a hundredth for the processes' own CUDA contexts."""
    if asked <= 1 / ways:
        return None
    return (math.floor(asked * 100 / ways) - 1) / 100


def _quiet(_message: str) -> None:
    """The default progress sink: say nothing."""


@dataclass(frozen=True)
class PoolConfig:
    """Everything the pool needs to turn a profile into a running server."""

    cache_dir: Path
    model: str | None = None
    preset: str = "tiny"
    platform: Platform | None = None  # None: detect
    boot_timeout_s: float = 600.0
    external_url: str | None = None
    gpu_release_timeout_s: float = 120.0
    split_memory: bool = False  # two A/B sides resident on one GPU: halve each side's share
    gpu_share: int = 1  # pytest-xdist workers whose servers share this worker's GPU

    def resolved_platform(self) -> Platform:
        return self.platform or hardware.detect_platform()

    def gpus_held(self) -> float:
        """The GPUs this pool's servers hold, for GPU-seconds: its GPUs over the workers
        sharing them (two workers on one H200 hold half of it each: counted as one
        apiece, a merged report's GPU-seconds exceeded the session's wall time on its
        one GPU, ``bench/results/h200/cost-share/``); 0 on the CPU engine and on a
        server someone else started."""
        if self.external_url or self.resolved_platform() != "cuda":
            return 0.0
        return hardware.gpu_count() / self.gpu_share


@dataclass(frozen=True)
class ServerHandle:
    """What a test gets: where the server is, what it runs, and how it was started."""

    base_url: str
    model: str  # as sent in requests: a folder path or a model id
    platform: Platform
    provenance: Provenance
    server: VllmServer | ExternalServer
    embedded: bool = False  # an embedded dummy-weight model (serving.models)
    tokenizer: str = ""  # an embedded model's tokenizer kind: "word" (exact) or "bpe"
    energy: energy.EnergyMeter | None = None  # its GPUs' energy (None: provenance says why)

    @property
    def profile(self) -> str:
        return self.provenance.profile

    def check_alive(self) -> None:
        self.server.check_alive()


@dataclass
class ServerPool:
    config: PoolConfig
    progress: Progress = field(default=_quiet)
    _resident: dict[str, tuple[tuple[Profile, str | None], ServerHandle]] = field(
        default_factory=dict
    )
    _failed: dict[str, str] = field(default_factory=dict)
    _model: tuple[str, bool] | None = None
    booted_s: float = 0.0  # seconds spent booting servers (failed boots too)

    def model(self) -> tuple[str, bool]:
        """(model path or id, whether it is an embedded dummy-weight model)."""
        if self._model is None:
            if self.config.model:
                self._model = (self.config.model, False)
            else:
                preset = models.PRESETS[self.config.preset]
                self._model = (str(models.build(preset, self.config.cache_dir / "models")), True)
        return self._model

    def spec(
        self, profile: Profile, python: str | None = None
    ) -> tuple[ServerSpec, EngineSettings, Platform]:
        """The server spec a profile resolves to on this platform; ``python`` runs it
        from another environment (an A/B side with another vLLM release)."""
        platform = self.config.resolved_platform()
        model, embedded = self.model()
        settings = profiles.engine_settings(
            profile, platform=platform, model_max_len=models.max_context(model),
            native_bf16=not embedded or hardware.cpu_has_bf16(),
        )  # fmt: skip
        args = dict(settings.args)
        notes = settings.notes
        if embedded:
            args.setdefault("load_format", "dummy")
        share = self.config.gpu_share
        ways = (2 if self.config.split_memory else 1) * share
        if ways > 1 and platform == "cuda":
            value = args.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_MEMORY)
            asked = float(value) if isinstance(value, int | float | str) else 0.0
            part = split_fraction(asked, ways)
            if part is not None:
                args["gpu_memory_utilization"] = part
                why = ["both sides resident on one GPU"] if self.config.split_memory else []
                if share > 1:
                    why.append(f"the GPU shared by {share} pytest-xdist workers")
                name = SPLIT_NOTE if self.config.split_memory else SHARE_NOTE
                notes = (
                    *notes,
                    f"{name}: gpu_memory_utilization {asked:g} -> {part:g}, {' and '.join(why)}",
                )
        spec = ServerSpec(model, tuple(profiles.to_argv(args)), dict(profile.env))
        if python is not None:
            spec = replace(spec, python=python, launcher=(str(self._launcher()),))
        return spec, EngineSettings(args, notes), platform

    def check_engine_args(self, wanted: Sequence[tuple[Profile, str | None]]) -> list[str]:
        """What the serving vLLM's own parser rejects in each (profile, interpreter)'s
        flags, one line each, before any boot (module ``engine_args``); nothing for an
        external server, whose flags are not ours."""
        if self.config.external_url:
            return []
        unique = {(p.name, p.hash, python): (p, python) for p, python in wanted}
        candidates = [
            engine_args.Candidate(profile, self.spec(profile, python)[0])
            for profile, python in unique.values()
        ]
        return engine_args.reject_lines(candidates, engine_args.memo_dir(), self.progress)

    def _launcher(self) -> Path:
        """The launcher as a lone script, for another interpreter: that environment need
        not have the plugin, and must not see this one's packages (its own vLLM and torch
        come first). The launcher imports only the standard library (a contract)."""
        from pytest_vllm_perf.serving import launch

        target = self.config.cache_dir / "launcher" / "pytest_vllm_perf.serving.launch.py"
        source = Path(launch.__file__).read_text(encoding="utf-8")
        if not target.is_file() or target.read_text(encoding="utf-8") != source:
            atomic.write_text(target, source)
        return target

    def get(self, profile: Profile, slot: str = "main", python: str | None = None) -> ServerHandle:
        """A healthy server running ``profile`` in ``slot``, booting it (and stopping the
        slot's other server) if needed; ``python``: another environment's interpreter."""
        current = self._resident.get(slot)
        if current and current[0] == (profile, python):
            current[1].check_alive()
            return current[1]
        key = profile.name if python is None else f"{profile.name}@{python}"
        if key in self._failed:
            raise ServerError(f"profile {key!r} failed to boot earlier:\n{self._failed[key]}")
        self._stop_slot(slot)
        try:
            handle = self._start(profile, python)
        except ServerError as exc:
            self._failed[key] = str(exc)
            raise
        self._resident[slot] = ((profile, python), handle)
        return handle

    def _provenance(
        self,
        profile: Profile,
        platform: Platform,
        model_id: str,
        settings: EngineSettings,
        argv: list[str],
        boot_s: float | None,
        python: str | None = None,
        energy_note: str = "",
    ) -> Provenance:
        return Provenance(
            profile=profile.name,
            profile_settings=profile.to_dict(),
            profile_hash=profile.hash,
            engine_argv=tuple(redact.argv(argv)),
            engine_notes=settings.notes,
            environment=hardware.environment(
                platform, model_id, settings.args, python, self.config.gpu_share
            ),
            boot_s=boot_s,
            energy_note=energy_note,
        )

    def _start(self, profile: Profile, python: str | None = None) -> ServerHandle:
        if self.config.external_url:
            return self._attach(profile)
        spec, settings, platform = self.spec(profile, python)
        if python is not None:
            hardware.interpreter_versions(python)  # a broken environment fails before booting
        started = time.monotonic()
        try:
            # another worker's servers hold memory on a shared GPU: waiting for it to
            # be released would wait out the timeout before every boot
            if platform == "cuda" and not self._resident and self.config.gpu_share == 1:
                wait_for_gpu_memory(self.config.gpu_release_timeout_s, self.progress)
            log = server_log(self.config.cache_dir, profile.name, time.time(), pid=os.getpid())
            vllm = VllmServer(spec, log, self.config.boot_timeout_s)
            for note in settings.notes:
                self.progress(f"profile {profile.name}: {note}")
            with self._boot_turn(platform):
                self.progress(f"booting vLLM ({platform}) for profile {profile.name!r}, log: {log}")
                vllm.start(self.progress)
        finally:
            self.booted_s += time.monotonic() - started
        self.progress(f"profile {profile.name!r} ready at {vllm.base_url} in {vllm.boot_s:.0f}s")
        embedded = self.model()[1]
        # The model as recorded: an embedded folder's name (path-independent), else as given.
        model_id = Path(spec.model).name if embedded else spec.model
        meter, why = self._meter(platform)
        provenance = self._provenance(
            profile, platform, model_id, settings, spec.argv(vllm.port), vllm.boot_s, python,
            energy_note=why,
        )  # fmt: skip
        kind = models.PRESETS[self.config.preset].tokenizer if embedded else ""
        return ServerHandle(
            vllm.base_url,
            spec.model,
            platform,
            provenance,
            vllm,
            embedded,
            tokenizer=kind,
            energy=meter,
        )

    @contextlib.contextmanager
    def _boot_turn(self, platform: Platform) -> Iterator[None]:
        """On a GPU shared by pytest-xdist workers, one boot at a time: vLLM sizes its
        KV cache from the device memory in use before and after it profiles the model,
        so another server allocating meanwhile would be counted as its own."""
        if platform != "cuda" or self.config.gpu_share == 1:
            yield
            return
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "-")
        path = self.config.cache_dir / "locks" / f"boot-gpu-{gpus}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.progress("waiting for another worker's boot on this GPU to finish")
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _meter(self, platform: Platform) -> tuple[energy.EnergyMeter | None, str]:
        """The energy meter of a server this pool booted, or None and why there is none."""
        if platform != "cuda":
            return None, "no NVIDIA GPU (the CPU engine), so no NVML"
        if self.config.gpu_share > 1:
            return None, (
                f"the GPU is shared by {self.config.gpu_share} pytest-xdist workers under "
                "load at once: its energy is no one test's"
            )
        return energy.open_meter(os.environ.get("CUDA_VISIBLE_DEVICES"))

    def _attach(self, profile: Profile) -> ServerHandle:
        """Measure a server someone else started; its model is whatever it serves."""
        assert self.config.external_url is not None
        server = ExternalServer(self.config.external_url.rstrip("/"))
        server.check_alive()
        model = self.config.model or served_model(server.base_url)
        settings = EngineSettings({}, ("external server: engine settings are not managed",))
        platform = self.config.resolved_platform()
        if profile.engine or profile.cpu or profile.env:
            self.progress(
                f"--vllm-url: profile {profile.name!r}'s engine settings and env are not "
                "applied to a server you started; set them where it is started"
            )
        self.progress(
            f"--vllm-url: measuring {server.base_url} as it runs; its results are filed "
            f"under this machine's hardware class ({hardware.hardware_class(platform)})"
        )
        why = "an external server (--vllm-url): the GPUs it runs on are not known"
        provenance = self._provenance(profile, platform, model, settings, [], None, energy_note=why)
        return ServerHandle(server.base_url, model, platform, provenance, server)

    def _stop_slot(self, slot: str) -> None:
        current = self._resident.pop(slot, None)
        if current and isinstance(current[1].server, VllmServer):
            current[1].server.stop()

    def stop(self) -> None:
        """Stop every server this pool started, all at once (an A/B run's two sides)."""
        resident, self._resident = self._resident, {}
        stop_servers([h.server for _, h in resident.values() if isinstance(h.server, VllmServer)])


def served_model(base_url: str) -> str:
    """The first model id a running server lists under ``/v1/models``."""
    try:
        with urllib.request.urlopen(f"{base_url}/v1/models", timeout=10) as resp:  # noqa: S310
            return str(json.load(resp)["data"][0]["id"])
    except (OSError, KeyError, IndexError, ValueError) as exc:
        raise ServerError(f"{base_url}/v1/models names no model: {exc}") from exc


def wait_for_gpu_memory(timeout_s: float, progress: Progress, settle_mib: int = 2048) -> None:
    """Wait until this process's GPUs hold less than ``settle_mib`` MiB, so the next boot
    sees them free. Only the ``CUDA_VISIBLE_DEVICES`` ones: another job on the host's
    other GPU must not hold this one up."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if not smi:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run(  # noqa: S603 - fixed argv
            [smi, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        rows = [tuple(x.strip() for x in line.split(",")) for line in out.splitlines()]
        by_gpu = [(r[0], r[1]) for r in rows if len(r) == 2 and r[1].isdigit()]
        mine = hardware.visible(by_gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
        used = [int(x) for x in mine]
        if not used or max(used) < settle_mib or time.monotonic() > deadline:
            return
        progress(f"waiting for GPU memory to be released ({max(used)} MiB in use)")
        time.sleep(2)
