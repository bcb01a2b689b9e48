"""The report of a session as one typed document: what ``--vllm-json`` writes and reads
back, and what every view of a run reads (the summary table, the PASS/FAIL line, the
Markdown and job summary, the merge of workers and shards, the history, the
pytest-benchmark export, the HTML report).

Frozen records, each with ``to_json`` and a ``from_json`` that refuses a document of
another shape with ``BaselineError`` naming the key; ``Report.from_json(doc).to_json()``
is ``doc`` for every report this version writes (``tests/unit/test_report_doc.py``).
What no view reads field by field (a result's environment, workload, profile settings,
quantiles, a capacity search, the run's budgets) stays a JSON object.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias, cast, get_args

from pytest_vllm_perf.core.errors import BaselineError

__all__ = [
    "VERDICT_WORDS",
    "CheckEntry",
    "GateEntry",
    "Headline",
    "JsonObject",
    "Number",
    "PassEntry",
    "Report",
    "ResultEntry",
    "VerdictEntry",
    "VerdictWord",
]

# a figure as JSON holds it: null for NaN, a string for an infinity (registry.report_number)
Number: TypeAlias = float | str | None
JsonObject: TypeAlias = Mapping[str, object]
VerdictWord: TypeAlias = Literal["regressed", "improved", "unchanged", "inconclusive"]
VERDICT_WORDS: Final = frozenset(get_args(VerdictWord))


def _need(
    data: Mapping[str, object], key: str, kind: type | tuple[type, ...], where: str
) -> object:
    if key not in data:
        raise BaselineError(f"{where}: no {key!r}")
    value = data[key]
    if not isinstance(value, kind):
        raise BaselineError(f"{where}: {key!r} is {type(value).__name__}")
    return value


def _object(data: Mapping[str, object], key: str, where: str) -> JsonObject:
    return cast(JsonObject, _need(data, key, dict, where))


def _list(data: Mapping[str, object], key: str, where: str, optional: bool = False) -> list[object]:
    """A list under ``key``; ``optional``: [] when absent (a key older reports lack)."""
    if optional and key not in data:
        return []
    return cast("list[object]", _need(data, key, list, where))


def _optional(data: Mapping[str, object], key: str, where: str) -> JsonObject:
    """A JSON object under a key older reports lack ({} when absent)."""
    return _object(data, key, where) if data.get(key) is not None else {}


def _mapping(value: object, where: str) -> JsonObject:
    if not isinstance(value, dict):
        raise BaselineError(f"{where}: not a JSON object")
    return cast(JsonObject, value)


def _number(value: object, where: str) -> Number:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BaselineError(f"{where}: {value!r} is not a figure")
    return value  # an int stays one: the file reads as it was written


def _numbers(data: JsonObject, where: str) -> dict[str, Number]:
    return {key: _number(value, f"{where}.{key}") for key, value in data.items()}


def as_float(value: Number) -> float:
    """A JSON figure as a float: null is NaN, a string an infinity (or NaN if not one)."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


@dataclass(frozen=True)
class CheckEntry:
    """One threshold (an SLO) and what was measured against it."""

    key: str
    limit: float
    measured: Number
    passed: bool

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "limit": self.limit, "measured": self.measured,
                "passed": self.passed}  # fmt: skip

    @classmethod
    def from_json(cls, data: JsonObject, where: str) -> CheckEntry:
        return cls(
            str(_need(data, "key", str, where)),
            cast(float, _need(data, "limit", (int, float), where)),
            _number(data.get("measured"), f"{where}.measured"),
            bool(_need(data, "passed", bool, where)),
        )


# a verdict's figures, in the order the JSON has always listed them
_FIGURES: Final = ("baseline", "current", "ratio", "low", "high", "tolerance", "p_value",
                   "p_holm", "margin", "level")  # fmt: skip


@dataclass(frozen=True)
class VerdictEntry:
    """One metric's verdict: its figures (``_FIGURES``), one-sided bounds, the word,
    what it was based on, and whether it gated the test."""

    metric: str
    figures: Mapping[str, Number]
    bounds: tuple[Number, Number]
    verdict: VerdictWord
    basis: str
    gated: bool

    def figure(self, name: str) -> float:
        return as_float(self.figures.get(name))

    @property
    def ratio(self) -> float:
        return self.figure("ratio")

    def to_json(self) -> dict[str, object]:
        return {"metric": self.metric, **{k: self.figures.get(k) for k in _FIGURES},
                "bounds": list(self.bounds), "verdict": self.verdict, "basis": self.basis,
                "gated": self.gated}  # fmt: skip

    @classmethod
    def from_json(cls, data: JsonObject, where: str) -> VerdictEntry:
        word = str(_need(data, "verdict", str, where))
        if word not in VERDICT_WORDS:
            raise BaselineError(f"{where}: verdict {word!r} is none of {sorted(VERDICT_WORDS)}")
        bounds = _list(data, "bounds", where, optional=True) or [None, None]  # before bounds
        if len(bounds) != 2:
            raise BaselineError(f"{where}: 'bounds' has {len(bounds)} values, not 2")
        return cls(
            str(_need(data, "metric", str, where)),
            {k: _number(data.get(k), f"{where}.{k}") for k in _FIGURES},
            (_number(bounds[0], f"{where}.bounds"), _number(bounds[1], f"{where}.bounds")),
            cast(VerdictWord, word),
            str(data.get("basis", "")),
            bool(data.get("gated", True)),  # before reported-only metrics, all gated
        )


@dataclass(frozen=True)
class GateEntry:
    """What the gate made of a result: its status, the baseline's path (or the A/B
    base side), the one-word verdict, what changed, a note and each metric's verdict."""

    status: str
    path: str
    verdict: str
    changes: tuple[str, ...]
    note: str
    verdicts: tuple[VerdictEntry, ...]

    @property
    def regressions(self) -> list[VerdictEntry]:
        return [v for v in self.verdicts if v.gated and v.verdict == "regressed"]

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "path": self.path, "verdict": self.verdict,
                "changes": list(self.changes), "note": self.note,
                "verdicts": [v.to_json() for v in self.verdicts]}  # fmt: skip

    @classmethod
    def from_json(cls, data: JsonObject, where: str) -> GateEntry:
        verdicts = _list(data, "verdicts", where)
        return cls(
            str(_need(data, "status", str, where)),
            str(_need(data, "path", str, where)),
            str(_need(data, "verdict", str, where)),
            tuple(str(c) for c in _list(data, "changes", where, optional=True)),
            str(data.get("note") or ""),
            tuple(
                VerdictEntry.from_json(
                    _mapping(v, f"{where}.verdicts[{i}]"), f"{where}.verdicts[{i}]"
                )
                for i, v in enumerate(verdicts)
            ),
        )


# a pass's fields besides its metrics, as written (report.document)
_PASS_FIELDS: Final = ("index", "duration_s", "window_s", "ramp_s", "drain_s", "elapsed_s",
                       "overloaded", "client_lag_p99_ms", "started_unix")  # fmt: skip


@dataclass(frozen=True)
class PassEntry:
    """One measured pass: its schedule index, its timing fields and its metrics."""

    index: int
    metrics: Mapping[str, Number]
    fields: JsonObject = field(default_factory=dict)  # _PASS_FIELDS but the index

    @property
    def duration_s(self) -> float:
        found = self.fields.get("duration_s")
        return float(found) if isinstance(found, int | float) else math.nan

    @property
    def overloaded(self) -> bool:
        return bool(self.fields.get("overloaded", False))

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, **self.fields, "metrics": dict(self.metrics)}

    @classmethod
    def from_json(cls, data: JsonObject, where: str) -> PassEntry:
        fields = {k: data[k] for k in _PASS_FIELDS if k in data and k != "index"}
        index = _need(data, "index", int, where)
        return cls(cast(int, index), _numbers(_object(data, "metrics", where), where), fields)


def _passes(data: JsonObject, key: str, where: str) -> tuple[PassEntry, ...]:
    found = _list(data, key, where, optional=True)  # the first reports had no passes
    return tuple(
        PassEntry.from_json(_mapping(p, f"{where}.{key}[{i}]"), f"{where}.{key}[{i}]")
        for i, p in enumerate(found)
    )


@dataclass(frozen=True)
class ResultEntry:
    """One test on one profile: what ran, what it measured, its thresholds, what the
    gate made of it and what it cost."""

    test: str
    profile: str
    metrics: Mapping[str, Number]
    passes: tuple[PassEntry, ...]
    thresholds: tuple[CheckEntry, ...]
    baseline: GateEntry | None
    cost: JsonObject
    duration: float
    setup: JsonObject  # profile_settings, profile_hash, engine_argv and _notes, environment
    workload: JsonObject
    distribution: object = None
    base_passes: tuple[PassEntry, ...] | None = None  # an A/B run's base side
    capacity: JsonObject | None = None  # a capacity search's passes and fit

    @property
    def passed(self) -> bool:
        """Every threshold held (the SLO column)."""
        return all(c.passed for c in self.thresholds)

    @property
    def verdict(self) -> str:
        """The summary's verdict word ("-" with no baseline)."""
        return self.baseline.verdict if self.baseline else "-"

    @property
    def environment(self) -> JsonObject:
        return _mapping(self.setup.get("environment", {}), f"{self.test}: environment")

    def failures(self) -> list[str]:
        """Why this result failed, briefly: each regressed gated metric with its ratio
        (measured ones first: a rule's NaN ratio once led the line as ``xnan``), then
        each missed threshold; [] when it passed."""
        regressed = self.baseline.regressions if self.baseline else []
        measured = [v for v in regressed if math.isfinite(v.ratio)]
        why = [f"{v.metric} x{v.ratio:.3g}" for v in measured]
        why += [f"{v.metric} (by rule)" for v in regressed if v not in measured]
        return why + [f"{c.key} (SLO)" for c in self.thresholds if not c.passed]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "test": self.test,
            "profile": self.profile,
            **self.setup,
            "workload": dict(self.workload),
            "duration": self.duration,
            "metrics": dict(self.metrics),
            "distribution": self.distribution,
            "passes": [p.to_json() for p in self.passes],
            "cost": dict(self.cost),
            "thresholds": [c.to_json() for c in self.thresholds],
            "baseline": None if self.baseline is None else self.baseline.to_json(),
        }
        if self.base_passes is not None:
            out["base_passes"] = [p.to_json() for p in self.base_passes]
        if self.capacity is not None:
            out["capacity"] = dict(self.capacity)
        return out

    @classmethod
    def from_json(cls, data: JsonObject, where: str) -> ResultEntry:
        gate = data.get("baseline")
        setup_keys = ("profile_settings", "profile_hash", "engine_argv", "engine_notes",
                      "environment")  # fmt: skip
        return cls(
            test=str(_need(data, "test", str, where)),
            profile=str(_need(data, "profile", str, where)),
            metrics=_numbers(_object(data, "metrics", where), f"{where}.metrics"),
            passes=_passes(data, "passes", where),
            thresholds=tuple(
                CheckEntry.from_json(_mapping(c, f"{where}.thresholds"), f"{where}.thresholds")
                for c in _list(data, "thresholds", where, optional=True)
            ),
            baseline=None
            if gate is None
            else GateEntry.from_json(_mapping(gate, f"{where}.baseline"), f"{where}.baseline"),
            cost=_optional(data, "cost", where),
            duration=cast(float, data.get("duration", math.nan)),
            setup={k: data[k] for k in setup_keys if k in data},
            workload=_optional(data, "workload", where),
            distribution=data.get("distribution"),
            base_passes=_passes(data, "base_passes", where) if "base_passes" in data else None,
            capacity=_object(data, "capacity", where) if "capacity" in data else None,
        )


@dataclass(frozen=True)
class Report:
    """Every result of a session (or of several, merged) and what the run was: its
    shard and the budgets its tests were judged under (``run``)."""

    results: tuple[ResultEntry, ...]
    run: JsonObject | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"results": [r.to_json() for r in self.results]}
        return out | ({"run": dict(self.run)} if self.run else {})

    @classmethod
    def from_json(cls, data: object, where: str = "report") -> Report:
        doc = _mapping(data, where)
        results = _list(doc, "results", where)
        run = doc.get("run")
        return cls(
            tuple(
                ResultEntry.from_json(_mapping(r, f"{where}: result {i}"), f"{where}: result {i}")
                for i, r in enumerate(results)
            ),
            None if run is None else _mapping(run, f"{where}: run"),
        )


@dataclass(frozen=True)
class Headline:
    """The final line: whether the run failed, and the line itself."""

    failed: bool
    text: str
