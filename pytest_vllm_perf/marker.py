"""The ``vllm_perf`` marker: its keywords, and every problem in a perf test's marker,
its profiles and its stored baselines found at collection, before any server boots."""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pytest

from pytest_vllm_perf.config import workloads
from pytest_vllm_perf.core import trace
from pytest_vllm_perf.core.errors import VllmPerfError, WorkloadError
from pytest_vllm_perf.core.records import GateStatus
from pytest_vllm_perf.core.registry import threshold_target, validate_tolerances
from pytest_vllm_perf.core.workload import Workload, pass_count
from pytest_vllm_perf.serving import hardware, models
from pytest_vllm_perf.settings import Settings
from pytest_vllm_perf.store import baselines, capacities
from pytest_vllm_perf.verdict import eligibility
from pytest_vllm_perf.verdict.gate import SaveMode
from pytest_vllm_perf.verdict.thresholds import validate as validate_thresholds

__all__ = [
    "MARKER_DOCS",
    "MARKER_KEYS",
    "base_id",
    "check_classes",
    "marker_of",
    "preflight",
    "stored_baselines",
    "workload_of",
]

# Marker keywords with a meaning of their own; every other keyword overrides a workload field.
MARKER_DOCS: Final[Mapping[str, str]] = {
    "workload": "built-in name, a .yaml file beside the test, or a Workload [mixed]",
    "profile": "pin the test to this profile (or list), whatever --vllm-profile selects",
    "thresholds": "absolute limits, e.g. {ttft_p99_ms: 500, min_output_throughput: 100}",
    "tolerances": "regression tolerances per metric, e.g. {itl_p99_ms: 0.2}",
    "repeat": "passes of the workload [--vllm-repeat]",
    "gate": "metrics gated on top of the workload's own, e.g. [ttft_p99_ms]",
}
MARKER_KEYS: Final = frozenset(MARKER_DOCS)


def marker_of(node: pytest.Item) -> Mapping[str, Any]:
    mark = node.get_closest_marker("vllm_perf")
    if mark is None:
        return {}
    if mark.args:
        return {"workload": mark.args[0], **mark.kwargs}
    return dict(mark.kwargs)


def base_id(item: pytest.Item) -> str:
    """A test's id without its parameters (``t.py::test`` of ``t.py::test[p]``): what
    baselines, shards and the marker checks are keyed by."""
    return item.nodeid.split("[")[0]


def check_classes(
    workload: Workload,
    thresholds: Mapping[str, float],
    tolerances: Mapping[str, float],
    gate: Sequence[str],
) -> None:
    """ThresholdError for a class-qualified key naming a class the workload lacks."""
    workload.check_classes((threshold_target(k)[0] for k in thresholds), "threshold")
    workload.check_classes(tolerances, "tolerance")
    workload.check_classes(gate, "gate")


def workload_of(node: pytest.Item, marker: Mapping[str, Any]) -> Workload:
    spec = marker.get("workload") or "mixed"
    if not isinstance(spec, str | Workload):
        raise VllmPerfError(f"expected a workload name, YAML file or Workload, got {spec!r}")
    overrides = {k: v for k, v in marker.items() if k not in MARKER_KEYS}
    if isinstance(spec, str):
        if spec.endswith((".yaml", ".yml")):
            base = workloads.load_file(Path(node.path).parent / spec)
        else:
            base = workloads.named(spec)
    else:
        base = spec
    try:
        changed = base.override(overrides)
    except WorkloadError:
        for key in overrides:  # ``treshold=``: a marker keyword's typo, not a workload field
            close = difflib.get_close_matches(key, sorted(MARKER_KEYS), n=1, cutoff=0.8)
            if close:
                raise VllmPerfError(
                    f"unknown keyword {key!r} (did you mean {close[0]!r}?)"
                ) from None
        raise
    return _with_traces(changed, Path(node.path).parent)


def _with_traces(workload: Workload, folder: Path) -> Workload:
    """Trace paths resolved beside the test file, and each trace read: a malformed line
    is a WorkloadError naming the file and the line, found before any boot."""
    classes = []
    for cls in workload.classes:
        if cls.trace:
            path = Path(cls.trace) if Path(cls.trace).is_absolute() else folder / cls.trace
            trace.load(path)
            cls = dataclasses.replace(cls, trace=str(path))
        classes.append(cls)
    return dataclasses.replace(workload, classes=tuple(classes))


def preflight(node: pytest.Item, settings: Settings) -> list[str]:
    """Every problem in a test's ``vllm_perf`` marker, found before any server boots.

    One line each, naming the test and the keyword: a workload name, an override
    field, a threshold, tolerance or gate key, a pass count or a profile that would
    otherwise fail only after a boot (47-55 s on the CPU engine, minutes on a GPU).
    """
    where = base_id(node)
    misspelled = _misspelled_markers(node)
    if misspelled:
        # a misspelled marker is otherwise only pytest's generic warning after the run,
        # which then measured the default workload (3 minutes on the CPU engine) and passed
        return [
            f"{where}: unknown marker {name!r}: did you mean 'vllm_perf'?" for name in misspelled
        ]
    marker = marker_of(node)
    return _keyword_problems(node, marker, settings, where) if marker else []


def _keyword_problems(
    node: pytest.Item, marker: Mapping[str, Any], settings: Settings, where: str
) -> list[str]:
    """``preflight``'s checks of each keyword of a marker that has some."""
    problems: list[str] = []

    def check(keyword: str, action: Callable[[], object]) -> None:
        try:
            action()
        except (VllmPerfError, pytest.UsageError) as exc:
            problems.append(f"{where}: vllm_perf marker {keyword}: {exc}")
        except (TypeError, ValueError, AttributeError) as exc:
            problems.append(f"{where}: vllm_perf marker {keyword}: bad value ({exc})")

    def mapping(key: str) -> Mapping[str, float]:
        value = marker.get(key) or {}
        if not isinstance(value, Mapping):
            raise VllmPerfError(f"expected a mapping of metric names to numbers, got {value!r}")
        return value

    def gate() -> None:
        value = marker.get("gate", ())
        if isinstance(value, str) or not all(isinstance(k, str) for k in value):
            raise VllmPerfError(f"expected a list of metric names, got {value!r}")
        validate_tolerances(dict.fromkeys(value, 0.0))

    check("workload", lambda: workload_of(node, marker))
    check("thresholds", lambda: validate_thresholds(mapping("thresholds")))
    check("tolerances", lambda: validate_tolerances(mapping("tolerances")))
    check("gate", gate)
    if "workload" in marker and not problems:  # its classes are known before a boot
        classes = (mapping("thresholds"), mapping("tolerances"), marker.get("gate", ()))
        check("classes", lambda: check_classes(workload_of(node, marker), *classes))
    if "repeat" in marker:
        check("repeat", lambda: pass_count(marker["repeat"], "repeat"))
    pinned = marker.get("profile")
    if pinned:
        for name in [pinned] if isinstance(pinned, str) else list(pinned):
            check("profile", functools.partial(settings.load_profile, name))
    return problems


def _misspelled_markers(node: pytest.Item) -> list[str]:
    """Markers on a perf test whose names are near ``vllm_perf`` but not it
    (``vllm_pref``, ``vllmperf``, ``vllm_perf_``)."""
    names = {mark.name for mark in node.iter_markers()} - {"vllm_perf", "parametrize"}
    return sorted(n for n in names if difflib.get_close_matches(n, ["vllm_perf"], cutoff=0.75))


def stored_baselines(node: pytest.Item, settings: Settings) -> list[str]:
    """Problems with the baselines a perf test under one profile will read, found before
    any server boots (a corrupt file was found after 79 s of load on the CPU engine).

    Under ``--vllm-require-baseline``, a baseline that cannot gate this run (missing,
    other hardware, another model or vLLM release) is one too: otherwise every verdict
    would be "compared, not gated" and the run would pass. Another workload is found
    after the run (still a failure): a test body may override its marker's load, as
    the examples do, so the marker alone cannot tell (on the H200 every example was
    called "workload changed" at collection when it was judged from the marker)."""
    callspec = getattr(node, "callspec", None)
    profile = callspec.params.get("vllm_profile") if callspec else None
    if not profile or settings.save_mode is not SaveMode.COMPARE or settings.ab:
        return []
    test_id = base_id(node)
    problems = baselines.check_stored(settings.baseline_dir, test_id, profile)
    if problems or not settings.require_baseline:
        return problems
    platform = settings.platform or hardware.detect_platform()
    found = eligibility.precheck(
        settings.baseline_dir,
        hardware.hardware_class(platform),
        test_id,
        profile,
        None,  # the test body may override its marker's load: checked after the run
        _model_before_boot(settings),
        hardware.interpreter_versions(None)[0],
        settings.gate_other_release,
    )
    if found is None:
        return []
    hw = hardware.hardware_class(platform)
    if (
        found[0] is GateStatus.MISSING
        and capacities.capacity_path(settings.baseline_dir, hw, test_id, profile).exists()
    ):  # a capacity test: its search is gated after the run
        return []
    return [f"{node.nodeid}: --vllm-require-baseline ({found[0]}): {found[1]}"]


def _model_before_boot(settings: Settings) -> str | None:
    """The model a run will record, where it is known before the boot: an embedded
    preset's folder name, or ``--vllm-model``; None for a server someone else started."""
    if settings.model:
        return settings.model
    if settings.url:
        return None
    return models.folder_name(models.PRESETS[settings.preset])
