"""Whether a ``--vllm-model`` hub id can be served here, found before any boot: an id
neither in the local Hugging Face cache nor reachable failed only after a boot, with a
30-line traceback from the engine."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Final
from urllib.parse import urlparse

__all__ = ["problem"]

_TRUE: Final = ("1", "true", "yes", "on")


def problem(model: str, timeout_s: float = 3.0) -> str | None:
    """Why ``model`` (a hub id such as ``org/name``) cannot be had, or None: it is a
    local folder, in the cache, or the hub answers (vLLM then downloads it). None also
    where ``huggingface_hub`` is not installed: the engine then judges."""
    if Path(model).expanduser().exists():
        return None
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(model, "config.json")
    except ValueError as exc:  # not a hub id at all (HFValidationError)
        return f"--vllm-model={model}: neither a folder nor a Hugging Face model id ({exc})"
    if isinstance(cached, str):
        return None
    where = f"not in the local Hugging Face cache ({constants.HF_HUB_CACHE})"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        return f"--vllm-model={model}: {where}, and HF_HUB_OFFLINE is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"--vllm-model={model}: {where}, and {host} cannot be reached ({exc})"
    return None
