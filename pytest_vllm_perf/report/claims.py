"""The tuning-claims table: each piece of advice beside what a committed result measured.

A claims file (YAML, ``claims:`` a list) names, for each piece of advice, the
committed ``--vllm-json`` report of an A/B run that tests it (the advised profile
as the candidate, the one it replaces as the base), the metrics the advice says
it improves (``claimed``) and the ones it may cost (``watched``). Every ratio and
interval is recomputed here from the report's passes, pass k of the candidate
against pass k of the base, each metric judged on its own (no correction over a
row), so the table cannot drift from the files it cites. The outcome word:

- ``holds``: some claimed metric ``improved`` and none ``regressed``, nor any watched one;
- ``trades``: a metric ``improved`` and another ``regressed``;
- ``fails``: a claimed metric ``regressed`` and none ``improved``;
- ``no change``: every metric ``unchanged``; ``inconclusive``: the rest;
- ``not measured``: no result yet (``result: null`` and a ``why``).

A claim can instead cite a ``sweep``: ``bench/gpu/gpu_advice.py kv`` results (files
with ``rows``, one pass per profile), and the ``profiles`` to show in order. The
rows must share one load (the check raises otherwise), and the cell lists each
metric across the profiles. One pass per profile gives no interval, so such a
row's outcome is ``one pass each``, never a verdict; its ``why`` says what the
figures show and what they do not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pytest_vllm_perf.core import yamlfile
from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.core.records import MetricVerdict, Verdict
from pytest_vllm_perf.core.registry import default_tolerances
from pytest_vllm_perf.core.report import Report, ResultEntry
from pytest_vllm_perf.store import reports
from pytest_vllm_perf.verdict import compare

__all__ = ["Claim", "ClaimRow", "evaluate", "load", "markdown", "render"]

KEYS: Final = frozenset(
    {
        "advice",
        "result",
        "test",
        "profile",
        "command",
        "claimed",
        "watched",
        "tolerances",
        "why",
        "sweep",
        "profiles",
    }
)
BLOCK: Final = re.compile(r"(<!-- claims -->\n)(?:.*?\n)?(<!-- /claims -->)", re.DOTALL)


@dataclass(frozen=True)
class Claim:
    """One piece of advice and where its test result is."""

    advice: str
    result: str | None = None  # a report, relative to the claims file's repository root
    test: str | None = None  # which test of the report (None: its only A/B result)
    profile: str | None = None  # the candidate profile (None: any)
    command: str = ""
    claimed: tuple[str, ...] = ()
    watched: tuple[str, ...] = ()
    tolerances: Mapping[str, float] | None = None
    why: str = ""
    sweep: tuple[str, ...] = ()  # bench/gpu/gpu_advice.py kv results, instead of ``result``
    profiles: tuple[str, ...] = ()  # the sweep's profiles to show, in this order


@dataclass(frozen=True)
class ClaimRow:
    claim: Claim
    outcome: str
    verdicts: tuple[MetricVerdict, ...] = ()
    base: str = ""
    candidate: str = ""
    figures: str = ""  # a sweep's cell: each metric across its profiles


def load(path: Path) -> list[Claim]:
    """The claims of a YAML file; a BaselineError names the file and the bad key."""
    data = yamlfile.load(path, BaselineError, "the claims file")
    entries = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise BaselineError(f"{path}: expected a mapping with a 'claims' list")
    claims = []
    for i, entry in enumerate(entries):
        unknown = sorted(set(entry) - KEYS) if isinstance(entry, dict) else ["(not a mapping)"]
        if unknown or "advice" not in entry:
            raise BaselineError(f"{path}: claims[{i}]: unknown key {unknown[:1]} or no 'advice'")
        if entry.get("sweep") and not entry.get("profiles"):
            raise BaselineError(f"{path}: claims[{i}]: a sweep needs its 'profiles'")
        if entry.get("sweep") and entry.get("result"):
            raise BaselineError(f"{path}: claims[{i}]: a 'result' or a 'sweep', not both")
        if entry.get("result") is None and not entry.get("sweep") and not entry.get("why"):
            raise BaselineError(f"{path}: claims[{i}]: a claim with no result needs a 'why'")
        claims.append(
            Claim(
                **{
                    **entry,
                    "claimed": tuple(entry.get("claimed", ())),
                    "watched": tuple(entry.get("watched", ())),
                    "sweep": tuple(entry.get("sweep", ())),
                    "profiles": tuple(entry.get("profiles", ())),
                }
            )
        )
    return claims


def _report_entry(claim: Claim, root: Path) -> ResultEntry:
    assert claim.result is not None
    path = root / claim.result
    data = _read(path)
    report = Report.from_json(data.get("report", data), str(path))  # gpu_advice nests it
    found = [
        r
        for r in report.results
        if r.base_passes is not None
        and (claim.test is None or r.test == claim.test)
        and (claim.profile is None or r.profile == claim.profile)
    ]
    if len(found) != 1:
        raise BaselineError(
            f"{path}: {len(found)} A/B results match test {claim.test!r}, "
            f"profile {claim.profile!r}: expected one"
        )
    return found[0]


def _read(path: Path) -> Mapping[str, Any]:
    try:
        data: Mapping[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{path}: cannot read the report: {exc}") from None
    return data


def _sweep(claim: Claim, root: Path) -> ClaimRow:
    """A sweep claim's cell: each claimed and watched metric across its profiles."""
    rows: dict[str, Mapping[str, Any]] = {}
    for name in claim.sweep:
        for row in _read(root / name).get("rows", []):
            rows[row["profile"]] = row
    missing = [p for p in claim.profiles if p not in rows]
    if missing:
        raise BaselineError(f"{claim.sweep}: no row for profile {missing[0]!r}")
    chosen = [rows[p] for p in claim.profiles]
    if any(r["workload"] != chosen[0]["workload"] for r in chosen):
        raise BaselineError(f"{claim.sweep}: the rows of {claim.profiles} ran different loads")
    keys = dict.fromkeys((*claim.claimed, *claim.watched))

    def fmt(value: Any) -> str:
        if not isinstance(value, float):
            return "-" if value is None else str(value)
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"

    figures = "; ".join(f"{k} " + " / ".join(fmt(r.get(k)) for r in chosen) for k in keys)
    head = " / ".join(claim.profiles) + " (one load, one pass each): "
    return ClaimRow(claim, "one pass each", figures=head + figures)


def evaluate(claim: Claim, root: Path) -> ClaimRow:
    """Judge one claim from its committed report (``root``: where its path starts)."""
    if claim.sweep:
        return _sweep(claim, root)
    if claim.result is None:
        return ClaimRow(claim, "not measured")
    entry = _report_entry(claim, root)
    platform = str(entry.environment.get("platform"))
    # an A/B report (base_passes): the A/B tolerances
    tolerances = {**default_tolerances(platform, ab=True), **(claim.tolerances or {})}
    keys = tuple(dict.fromkeys((*claim.claimed, *claim.watched)))
    verdicts = tuple(
        compare.compare(
            [reports.report_passes(entry.base_passes or ())],
            reports.report_passes(entry.passes),
            keys,
            tolerances,
            pair=True,
        )
    )
    side = entry.baseline.path if entry.baseline else "?"
    base = side.removeprefix("the A/B base side ")
    return ClaimRow(claim, _outcome(claim, verdicts), verdicts, base, repr(entry.profile))


def _outcome(claim: Claim, verdicts: Sequence[MetricVerdict]) -> str:
    by = {v.metric: v.verdict for v in verdicts}
    improved = [k for k, v in by.items() if v is Verdict.IMPROVED]
    regressed = [k for k, v in by.items() if v is Verdict.REGRESSED]
    if improved and regressed:
        return "trades"
    if improved and any(k in claim.claimed for k in improved):
        return "holds"
    if any(k in claim.claimed for k in regressed) and not improved:
        return "fails"
    if all(v is Verdict.UNCHANGED for v in by.values()):
        return "no change"
    return "inconclusive"


def markdown(rows: Sequence[ClaimRow]) -> str:
    """The claims table, one row per advice, one line per metric in its cells."""
    lines = [
        "| advice | outcome | measured (candidate against base, pass k against pass k) | result |",
        "|---|---|---|---|",
    ]
    for row in rows:
        c = row.claim
        figures = row.figures
        if row.verdicts:
            figures = f"{row.candidate} against {row.base}: " + "; ".join(
                f"{v.metric} x{v.ratio:.3f} (95% CI x{v.low:.3f}..x{v.high:.3f}) {v.verdict}"
                for v in row.verdicts
            )
        # the why says what the figures alone do not: the load, the cause, caveats
        measured = ". ".join(part for part in (figures, c.why) if part)
        cited = [f"`{r}`" for r in ([c.result] if c.result else c.sweep)]
        if cited and c.command:
            cited.append(f"`{c.command}`")
        where = ", ".join(cited) or "-"
        lines.append(f"| {c.advice} | **{row.outcome}** | {measured} | {where} |")
    return "\n".join(lines)


def render(text: str, table: str) -> str:
    """``text`` with its ``<!-- claims -->`` block replaced by ``table``."""
    if not BLOCK.search(text):
        raise BaselineError("no <!-- claims --> ... <!-- /claims --> block")
    return BLOCK.sub(lambda m: f"{m.group(1)}{table}\n{m.group(2)}", text)
