"""Stored capacity searches: beside a test's workload baselines, every pass's rate and
margin, so that the fit is read back exactly as it was made."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf.core import redact
from pytest_vllm_perf.core.capacity import Capacity, Search
from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.records import Provenance
from pytest_vllm_perf.store.baselines import json_number
from pytest_vllm_perf.store.naming import capacity_test, path_for
from pytest_vllm_perf.store.provenance import commit_info

__all__ = [
    "CAPACITY_SCHEMA",
    "capacity_document",
    "capacity_path",
    "load_capacity",
    "search_dict",
]


CAPACITY_SCHEMA: Final = 1


def capacity_path(root: Path, hardware_class: str, test_id: str, profile: str) -> Path:
    """Where a test's capacity search is stored: beside its workload baselines, in a
    folder of its own (a test may call ``run`` and ``capacity`` both)."""
    return path_for(root, hardware_class, capacity_test(test_id), profile)


def capacity_document(
    test_id: str,
    found: Search,
    slo: Mapping[str, float],
    workload_hash: str,
    provenance: Provenance,
) -> dict[str, Any]:
    """A capacity search as a stored baseline: every pass's rate and margin, so that the
    fit is read back exactly as it was made; secrets removed."""
    return redact.mapping(
        {
            "schema": CAPACITY_SCHEMA,
            "kind": "capacity",
            "test": test_id,
            "profile": dict(provenance.profile_settings),
            "workload_hash": workload_hash,
            "slo": dict(slo),
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": provenance.environment.to_dict(),
            "commit_info": commit_info(),
            "search": search_dict(found),
        }
    )


def search_dict(found: Search) -> dict[str, Any]:
    """A capacity search as plain data: every pass's rate and margin, and the fit; what
    a stored capacity baseline and a capacity test's report hold."""
    fit = found.capacity
    return {
        "rates": [json_number(r) for r in found.rates],
        "margins": [json_number(m) for m in found.margins],
        "converged": found.converged,
        "capacity": None
        if fit is None
        else {k: json_number(float(v)) for k, v in dataclasses.asdict(fit).items()},
    }


def load_capacity(path: Path) -> tuple[Search, Mapping[str, Any]] | None:
    """The stored capacity search at ``path`` and its document, None if there is none,
    BaselineError (naming the file, which is left as it is) if it is unreadable."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != CAPACITY_SCHEMA or data.get("kind") != "capacity":
            raise ValueError(f"schema {data.get('schema')!r}, expected {CAPACITY_SCHEMA}")
        stored = data["search"]
        fit = stored["capacity"]
        found = Search(
            None if fit is None else _stored_fit(fit),
            tuple(float(r) for r in stored["rates"]),
            tuple(float(m) for m in stored["margins"]),
            bool(stored["converged"]),
        )
        if len(found.rates) != len(found.margins):
            raise ValueError("rates and margins differ in length")
        return found, data
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise BaselineError(
            f"corrupt vLLM perf capacity baseline {path}: {type(exc).__name__}: {exc}. "
            "The file was left as it is; fix or delete it, or re-save with --vllm-save-baseline."
        ) from None


def _stored_fit(fit: Mapping[str, Any]) -> Capacity:
    return Capacity(
        rps=float(fit["rps"]),
        low=float(fit["low"]),
        high=float(fit["high"]),
        passes=int(fit["passes"]),
        slope=float(fit["slope"]),
        log_se=float(fit["log_se"]),
        df=int(fit["df"]),
    )
