"""The energy a server's GPUs used, from NVML's energy counters (``nvidia-ml-py``).

NVML keeps, per GPU, the energy used since the driver loaded, in millijoules
(``nvmlDeviceGetTotalEnergyConsumption``, Volta and later). The runner reads it at
every pass boundary beside the server's ``/metrics``, so each pass has its own
joules, over the same span as its counters (``PassRecord.counted_s``): the energy of
the GPUs the server runs on, whatever else runs there (in a resident A/B run, the
idle side's draw too, since both sides share the GPU; on a GPU shared by pytest-xdist
workers nobody's alone, so the pool measures none there).

A GPU the process may use is named by ``CUDA_VISIBLE_DEVICES`` as nvidia-smi indexes
them (NVML's order, the one ``hardware.visible`` assumes) or by UUID; unset, every GPU.
Where NVML is missing (no NVIDIA driver: the CPU engine; ``nvidia-ml-py`` not installed;
a GPU without the counter, MIG slices among them) :func:`open_meter` says why, and the
reports print it instead of the energy.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["MISSING_MODULE", "EnergyMeter", "open_meter"]

MISSING_MODULE: Final = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
_LOCK = threading.Lock()  # nvmlInit and the handles: read from the runner's threads


@dataclass(frozen=True)
class EnergyMeter:
    """Reads the total energy of some GPUs: ``read_j`` is their sum, in joules."""

    nvml: Any  # the pynvml module
    handles: tuple[Any, ...]
    devices: tuple[str, ...]  # as named: indices or UUIDs

    def read_j(self) -> float | None:
        """The GPUs' energy since the driver loaded, summed, in joules; None when a read
        failed (the pass's energy is then NaN, never a counter that did not move)."""
        try:
            with _LOCK:
                total_mj = sum(
                    int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles
                )
        except Exception:  # any NVML error is a failed read
            return None
        return total_mj / 1000.0


def _import_nvml() -> Any:
    return importlib.import_module("pynvml")


def open_meter(mask: str | None) -> tuple[EnergyMeter | None, str]:
    """A meter over the GPUs ``mask`` (a ``CUDA_VISIBLE_DEVICES`` value; None: every GPU)
    names, and "", or None and why energy cannot be read here (one clause, for a report).
    """
    try:
        nvml = _import_nvml()
    except ImportError:
        return None, MISSING_MODULE
    try:
        with _LOCK:
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
            wanted = _wanted(mask, count)
            handles = tuple(
                nvml.nvmlDeviceGetHandleByUUID(d)
                if d.startswith(("GPU-", "MIG-"))
                else nvml.nvmlDeviceGetHandleByIndex(int(d))
                for d in wanted
            )
    except Exception as exc:  # NVMLError and its driver-missing kinds
        return None, f"NVML unavailable: {_name(exc)}"
    if not handles:
        return None, "no GPU visible to NVML (CUDA_VISIBLE_DEVICES lists none)"
    meter = EnergyMeter(nvml, handles, wanted)
    if meter.read_j() is None:
        return None, "NVML has no energy counter for these GPUs (before Volta, or MIG slices)"
    return meter, ""


def _wanted(mask: str | None, count: int) -> tuple[str, ...]:
    if mask is None:
        return tuple(str(i) for i in range(count))
    return tuple(part.strip() for part in mask.split(",") if part.strip())


def _name(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
