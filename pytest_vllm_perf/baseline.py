"""The baseline store: one JSON file per hardware class, test and profile.

Files are meant to be committed and reviewed, so they are stable, sorted,
diff-friendly JSON, written atomically (temp file, fsync, rename): a crash or a
concurrent save never leaves a truncated file. Secrets never reach them.
pytest-benchmark supplies the machine and commit info; its FileStorage layout
(one file per run, all tests together) does not fit per-test baselines.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllm_perf import atomic, redact
from pytest_vllm_perf.hardware import Environment
from pytest_vllm_perf.records import Repetition, RequestRecord

SCHEMA = 2  # 2: samples grouped by pass; 1 (one pass) is still read
READABLE = (1, 2)
PLUGIN_VERSION = "0.1.0"


class BaselineError(RuntimeError):
    """A baseline file that cannot be read; it is left untouched."""


@dataclass(frozen=True)
class Baseline:
    """A stored result, as read back from disk."""

    path: Path
    data: Mapping[str, Any]

    @functools.cached_property
    def repetitions(self) -> tuple[Repetition, ...]:
        """The stored passes, parsed once (load() parses them to validate the file)."""
        samples = self.data["samples"]
        if self.data["schema"] == 1:
            passes = [{"records": samples["records"], "duration_s": self.data["duration_s"]}]
        else:
            passes = samples["passes"]
        return tuple(
            Repetition(
                tuple(RequestRecord.from_dict(r) for r in p["records"]),
                float(p["duration_s"]),
                float(p.get("start_s", 0.0)),
            )
            for p in passes
        )

    @property
    def metrics(self) -> Mapping[str, float]:
        return {k: _unjson(v) for k, v in self.data["metrics"].items()}


def slug(text: str) -> str:
    """A file-name-safe form of a test id or hardware class."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "unnamed"


def path_for(root: Path, hardware_class: str, test_id: str, profile: str) -> Path:
    return root / slug(hardware_class) / slug(test_id) / f"{slug(profile)}.json"


def find_other_hardware(root: Path, hardware_class: str, test_id: str, profile: str) -> list[str]:
    """Hardware classes that hold a baseline for this test and profile, other than ours."""
    mine = slug(hardware_class)
    hits = root.glob(f"*/{slug(test_id)}/{slug(profile)}.json")
    return sorted(p.parent.parent.name for p in hits if p.parent.parent.name != mine)


def load(path: Path) -> Baseline | None:
    """The baseline at ``path``, None if there is none, BaselineError if it is unreadable."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") not in READABLE:
            raise BaselineError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA}")
        stored = Baseline(path, data)
        stored.repetitions  # noqa: B018 - validate the samples now, not mid-compare
        return stored
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BaselineError(
            f"corrupt vLLM perf baseline {path}: {type(exc).__name__}: {exc}. "
            "The file was left as it is; fix or delete it, or re-save with --vllm-save-baseline."
        ) from exc


def _json(value: float) -> float | str:
    """JSON has no infinities or NaN: store them as strings, round the rest."""
    if math.isinf(value) or math.isnan(value):
        return str(value)
    return round(value, 6)


def _unjson(value: float | str) -> float:
    return float(value)


def document(
    *,
    test_id: str,
    profile: Mapping[str, Any],
    profile_hash: str,
    workload: Mapping[str, Any],
    workload_hash: str,
    environment: Environment,
    model: str,
    placement: Mapping[str, Any],
    engine_argv: list[str],
    engine_notes: list[str],
    repetitions: tuple[Repetition, ...],
    metrics: Mapping[str, float],
) -> dict[str, Any]:
    """The JSON document of one result, secrets removed."""
    return redact.mapping(
        {
            "schema": SCHEMA,
            "test": test_id,
            "profile": dict(profile),
            "profile_hash": profile_hash,
            "workload": dict(workload),
            "workload_hash": workload_hash,
            "environment": {**environment.to_dict(), "model": model, **placement},
            "engine": {"argv": redact.argv(engine_argv), "notes": list(engine_notes)},
            "machine_info": _machine_info(),
            "commit_info": _commit_info(),
            "plugin_version": PLUGIN_VERSION,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "duration_s": round(sum(p.duration_s for p in repetitions), 6),
            "metrics": {k: _json(v) for k, v in sorted(metrics.items())},
            "samples": {"passes": [_pass(p) for p in repetitions]},
        }
    )


def _pass(rep: Repetition) -> dict[str, Any]:
    return {
        "duration_s": round(rep.duration_s, 6),
        "start_s": round(rep.start_s, 6),
        "records": [_record(r) for r in rep.records],
    }


def _record(record: RequestRecord) -> dict[str, Any]:
    data = record.to_dict()
    data["itl"] = [round(x, 6) for x in record.itl]
    for key in ("start", "ttft", "e2el"):
        if data[key] is not None:
            data[key] = round(data[key], 6)
    return data


def _machine_info() -> dict[str, Any]:
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info

    info = dict(pytest_benchmark_generate_machine_info())  # type: ignore[no-untyped-call]
    cpu = info.get("cpu", {})
    info["cpu"] = {k: cpu.get(k) for k in ("brand_raw", "count", "arch", "hz_advertised_friendly")}
    info.pop("node", None)  # the host name says nothing about performance
    return info


def _commit_info() -> dict[str, Any]:
    from pytest_benchmark.utils import get_commit_info

    info = dict(get_commit_info())  # type: ignore[no-untyped-call]
    return {k: info.get(k) for k in ("id", "branch", "dirty", "time")}


def save(path: Path, doc: Mapping[str, Any]) -> None:
    """Write atomically: readers see the old baseline or the new one, never a partial one."""
    atomic.write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
