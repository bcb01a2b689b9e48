"""Keep secrets out of stored baselines and reports."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# Whole name segments, so HF_TOKEN is secret and max_num_batched_tokens is not.
SECRET_SEGMENTS = frozenset(
    {
        "token",
        "secret",
        "password",
        "passwd",
        "apikey",
        "auth",
        "authorization",
        "credential",
        "credentials",
    }
)
SECRET_VALUE = re.compile(r"\b(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,}|Bearer\s+\S+)")
MASK = "***"


def is_secret_name(name: str) -> bool:
    segments = [s for s in re.split(r"[^a-z0-9]+", name.lower()) if s]
    joined = "".join(segments)
    return bool(SECRET_SEGMENTS.intersection(segments)) or "apikey" in joined


def value(text: str) -> str:
    """Mask token-shaped substrings wherever they appear."""
    return SECRET_VALUE.sub(MASK, text)


def mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with secret-named keys masked, recursively through dicts and lists."""
    out: dict[str, Any] = {}
    for key, item in values.items():
        if is_secret_name(str(key)) and isinstance(item, str):
            out[key] = MASK
        else:
            out[key] = _any(item)
    return out


def _any(item: Any) -> Any:
    if isinstance(item, Mapping):
        return mapping(item)
    if isinstance(item, list | tuple):
        return [_any(x) for x in item]
    if isinstance(item, str):
        return value(item)
    return item


def argv(args: Sequence[str]) -> list[str]:
    """A command line with the values of secret flags masked (``--api-key X``)."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(MASK)
            hide_next = False
        elif arg.startswith("--") and "=" in arg and is_secret_name(arg.split("=", 1)[0]):
            out.append(arg.split("=", 1)[0] + "=" + MASK)
        else:
            out.append(value(arg))
            hide_next = arg.startswith("--") and is_secret_name(arg)
    return out
