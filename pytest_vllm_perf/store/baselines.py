"""The baseline store: one JSON file per hardware class, test and profile.

Files are meant to be committed and reviewed, so they are stable, sorted,
diff-friendly JSON, written atomically (temp file, fsync, rename): a crash or a
concurrent save never leaves a truncated file. Secrets never reach them.

A baseline holds what a verdict needs and no more: per pass, every metric of the
registry (for all requests and per class) and the server counters; per boot of
the server, its passes, environment and engine command line; and a compact
quantile summary of TTFT and ITL for tables and plots. Raw per-request samples
are not stored (a 5-pass baseline of the interference example was 4.9 MB with
them); ``--vllm-json`` reports keep every figure of a run. Several boots can be
kept (``--vllm-add-boot``), so the verdict learns how much boots differ.
Each boot records the machine (CPU, Python, OS) and the git commit it ran from.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf.core import atomic, redact
from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.records import Measurement, PassRecord, Provenance, RequestRecord
from pytest_vllm_perf.core.workload import from_dict as workload_from_dict
from pytest_vllm_perf.metrics import compute
from pytest_vllm_perf.metrics.passes import Floats, Passes
from pytest_vllm_perf.store.naming import slug, under_hardware
from pytest_vllm_perf.store.provenance import commit_info, machine_info, plugin_version

__all__ = [
    "MAX_BOOTS",
    "SCHEMA",
    "Baseline",
    "BaselineError",
    "add_boot",
    "boot_passes",
    "check_stored",
    "document",
    "find_other_hardware",
    "json_number",
    "load",
    "merge_boots",
    "of_hardware",
    "save",
]

SCHEMA: Final = 3  # 3: per-pass metrics grouped by boot; 2 (raw passes) and 1 are still read
READABLE: Final = (1, 2, 3)
# the newest boots a baseline keeps (``add_boot`` drops the oldest beyond it)
MAX_BOOTS: Final = 8
QUANTILES: Final = (0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100)


@dataclass(frozen=True)
class Baseline:
    """A stored result, as read back from disk: its boots of passes, ready to compare."""

    path: Path
    data: Mapping[str, Any]
    boots: tuple[Passes, ...]

    @property
    def metrics(self) -> Mapping[str, float]:
        """The newest boot's metrics over all its passes (what tables show)."""
        return {k: float(v) for k, v in self.data["metrics"].items()}

    @property
    def test(self) -> str:
        return str(self.data["test"])

    @property
    def profile(self) -> str:
        return str(self.data["profile"]["name"])

    @property
    def environment(self) -> Mapping[str, Any]:
        return dict(self.data["boots"][-1]["environment"]) if "boots" in self.data else {}


def find_other_hardware(root: Path, hardware_class: str, test_id: str, profile: str) -> list[str]:
    """Hardware classes that hold a baseline for this test and profile, other than ours."""
    mine = slug(hardware_class)
    hits = root.glob(f"*/{under_hardware(test_id, profile)}")
    return sorted(p.parent.parent.name for p in hits if p.parent.parent.name != mine)


def load(path: Path) -> Baseline | None:
    """The baseline at ``path``, None if there is none, BaselineError if it is unreadable."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        schema = data.get("schema")
        if schema not in READABLE:
            raise BaselineError(f"{path}: schema {schema!r}, expected one of {READABLE}")
        if schema != SCHEMA:
            data = _upgrade(data)
        boots = tuple(boot_passes(b) for b in data["boots"])
        if not boots or not all(b.metrics for b in boots):
            raise ValueError("no passes")
        return Baseline(path, data, boots)
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise BaselineError(
            f"corrupt vLLM perf baseline {path}: {type(exc).__name__}: {exc}. "
            "The file was left as it is; fix or delete it, or re-save with --vllm-save-baseline."
        ) from None


def of_hardware(root: Path, hardware_class: str) -> list[Baseline]:
    """Every readable workload baseline of one hardware class (for the drift they share);
    an unreadable one (or a capacity search's) is left to the test that owns it."""
    found = []
    for path in sorted((root / slug(hardware_class)).glob("*/*.json")):
        try:
            stored = load(path)
        except BaselineError:
            continue
        if stored is not None:
            found.append(stored)
    return found


def check_stored(root: Path, test_id: str, profile: str) -> list[str]:
    """Problems with the stored baselines of one test and profile, on any hardware class:
    read before anything boots, so that a corrupt file is not found after the load."""
    problems = []
    if root.is_dir():
        for hardware in sorted(p for p in root.iterdir() if p.is_dir()):
            try:
                load(hardware / under_hardware(test_id, profile))
            except BaselineError as exc:
                problems.append(str(exc))
    return problems


def boot_passes(boot: Mapping[str, Any]) -> Passes:
    passes = boot["passes"]
    records = tuple(_raw_pass(p) for p in passes) if all("records" in p for p in passes) else ()
    return Passes(
        metrics=tuple({k: float(v) for k, v in p["metrics"].items()} for p in passes),
        indices=tuple(int(p.get("index", i)) for i, p in enumerate(passes)),
        durations=tuple(float(p["duration_s"]) for p in passes),
        records=records,
    )


def _raw_pass(p: Mapping[str, Any]) -> PassRecord:
    return PassRecord(
        tuple(RequestRecord.from_dict(r) for r in p["records"]),
        float(p["duration_s"]),
        float(p.get("start_s", 0.0)),
        int(p.get("index", 0)),
    )


def _upgrade(data: Mapping[str, Any]) -> dict[str, Any]:
    """A schema 1 or 2 file (raw records) as schema 3: per-pass metrics computed from them.

    Their records stay in memory, so the single-pass bootstrap still works on them.
    """
    workload = workload_from_dict(data["workload"], str(data.get("test")))
    samples = data["samples"]
    if data["schema"] == 1:
        raw = [{"records": samples["records"], "duration_s": data["duration_s"]}]
    else:
        raw = samples["passes"]
    passes = []
    for i, p in enumerate(raw):
        record = _raw_pass({**p, "index": i})
        passes.append({**_pass_entry(compute.pass_metrics(workload, record)), **p, "index": i})
    boot = {
        "environment": data.get("environment", {}),
        "engine": data.get("engine", {}),
        "saved_at": data.get("saved_at"),
        "passes": passes,
    }
    return {**data, "schema": SCHEMA, "boots": [boot]}


def _pass_entry(metrics: Mapping[str, float]) -> dict[str, Any]:
    return {"metrics": {k: json_number(v) for k, v in sorted(metrics.items())}}


def json_number(value: float) -> float | str:
    """JSON has no infinities or NaN: store them as strings, round the rest."""
    if math.isinf(value) or math.isnan(value):
        return str(value)
    return round(value, 6)


def _quantiles(values: Sequence[float] | Floats) -> list[float | str] | None:
    if not len(values):
        return None
    return [json_number(compute.percentile(values, q) * 1000) for q in QUANTILES]


def distribution(result: Measurement) -> dict[str, Any]:
    """Quantiles (ms) of TTFT and ITL, for all requests and per class: for tables and plots."""
    groups: dict[str, list[RequestRecord]] = {"all": list(result.records)}
    for cls in result.workload.classes:
        groups[cls.name] = [r for r in result.records if r.cls == cls.name]
    out: dict[str, Any] = {"quantiles": list(QUANTILES)}
    for name, records in groups.items():
        arrays = compute.samples(records)
        out[name] = {"ttft_ms": _quantiles(arrays["ttft"]), "itl_ms": _quantiles(arrays["itl"])}
    return out


def _boot_entry(result: Measurement, provenance: Provenance) -> dict[str, Any]:
    passes = []
    for p, metrics in zip(result.passes, result.pass_metrics, strict=True):
        passes.append(
            {
                "index": p.index,
                "duration_s": round(p.duration_s, 6),
                "start_s": round(p.start_s, 6),
                "ramp_s": p.ramp_s,
                "ramp_requests": p.ramp_requests,
                "drain_s": round(p.drain_s, 6),
                "elapsed_s": round(p.counted_s, 6),
                "overloaded": p.overloaded,
                "counters": {k: json_number(v) for k, v in p.counters.items()},
                **_pass_entry(metrics),
            }
        )
    return {
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": provenance.environment.to_dict(),
        "engine": {"argv": list(provenance.engine_argv), "notes": list(provenance.engine_notes)},
        "machine_info": machine_info(),
        "commit_info": commit_info(),
        "plugin_version": plugin_version(),
        "passes": passes,
    }


def document(test_id: str, result: Measurement, provenance: Provenance) -> dict[str, Any]:
    """The JSON document of one result as a one-boot baseline, secrets removed."""
    return redact.mapping(
        {
            "schema": SCHEMA,
            "test": test_id,
            "profile": dict(provenance.profile_settings),
            "profile_hash": provenance.profile_hash,
            "workload": result.workload.to_dict(),
            "workload_hash": result.workload.hash,
            "metrics": {k: json_number(v) for k, v in sorted(result.metrics.items())},
            "distribution": distribution(result),
            "boots": [_boot_entry(result, provenance)],
        }
    )


def add_boot(
    stored: Baseline, test_id: str, result: Measurement, provenance: Provenance
) -> dict[str, Any]:
    """The stored baseline plus this run as one more boot; the oldest beyond MAX_BOOTS go.

    An upgraded schema-2 file still has its raw records: they are not written back.
    """
    return merge_boots(stored.data, document(test_id, result, provenance), stored.path)


def merge_boots(stored: Mapping[str, Any], fresh: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """``fresh`` (one boot) after the boots of ``stored``, if they measured the same thing."""
    for key, what in (("workload_hash", "workload"), ("profile_hash", "profile's settings")):
        if stored.get(key) != fresh.get(key):
            raise BaselineError(
                f"{path}: cannot add a boot: the {what} differs from the baseline's; "
                "re-save it with --vllm-save-baseline"
            )
    old = [
        {**b, "passes": [{k: v for k, v in p.items() if k != "records"} for p in b["passes"]]}
        for b in stored["boots"]
    ]
    return {**fresh, "boots": (old + list(fresh["boots"]))[-MAX_BOOTS:]}


def save(path: Path, doc: Mapping[str, Any]) -> None:
    """Write atomically: readers see the old baseline or the new one, never a partial one."""
    try:
        atomic.write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        raise BaselineError(f"cannot write baseline {path}: {exc.strerror or exc}") from None
