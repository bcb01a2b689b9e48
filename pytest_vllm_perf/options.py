"""The plugin's options, parsed once into frozen settings by typed converters.

Each option is declared once in :data:`OPTIONS` with its ini twin, converter,
default and help; ``pytest --help``, the ini file and :class:`Settings` all come
from that table. The command line wins over the ini file. A bad value is a
one-line ``pytest.UsageError`` at start-up (exit code 4), before anything boots.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from pytest_vllm_perf.core.errors import WorkloadError
from pytest_vllm_perf.core.workload import pass_count
from pytest_vllm_perf.measure.modes import AB_MODES
from pytest_vllm_perf.serving.models import PRESETS

__all__ = [
    "FLAGS",
    "INCONCLUSIVE_EXIT",
    "OPTIONS",
    "ROOT_RELATIVE",
    "Option",
    "add_options",
    "repeat_count",
    "unwritable",
    "unwritable_file",
]

Converter = Callable[[str, str], Any]

# the exit status of a run with an undecided gated verdict under --vllm-inconclusive=exit:
# pytest's own statuses are 0-5
INCONCLUSIVE_EXIT: Final = 6


def text(value: str, _source: str) -> str:
    return value


def positive_float(value: str, source: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number > 0:
        raise pytest.UsageError(f"{source}: expected a number of seconds > 0, got {value!r}")
    return number


def repeat_count(value: str, source: str) -> int:
    """A pass count from the command line or ini."""
    try:
        return pass_count(value, source)
    except WorkloadError as exc:
        message = str(exc)
    raise pytest.UsageError(message)


def settle_count(value: str, source: str) -> int | None:
    """A number of unmeasured passes: a whole number >= 0, or ``auto`` (None)."""
    if value == "auto":
        return None
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise pytest.UsageError(
            f"{source}: expected auto or a whole number of passes >= 0, got {value!r}"
        )
    return count


def shard(value: str, source: str) -> tuple[int, int] | None:
    """``K/N``: this session runs the K-th of N shards (1-based); ``all`` (None): every
    test."""
    if value == "all":
        return None
    k, _, n = value.partition("/")
    try:
        found = (int(k), int(n))
    except ValueError:
        found = (0, 0)
    if not 1 <= found[0] <= found[1]:
        raise pytest.UsageError(f"{source}: expected K/N with 1 <= K <= N, or all, got {value!r}")
    return found


def unwritable(folder: Path) -> str:
    """Why files cannot be written under ``folder`` (its nearest existing ancestor is a
    file, or not writable), or "" when they can."""
    found = folder.absolute()
    while not found.exists() and found != found.parent:
        found = found.parent
    if not found.is_dir():
        return f"{found} is a file, not a folder"
    if not os.access(found, os.W_OK | os.X_OK):
        return f"{found} is not writable"
    return ""


def unwritable_file(path: Path) -> str:
    """Why a report cannot be written to ``path``, or ""."""
    if path.is_dir():
        return f"{path} is a folder"
    return unwritable(path.parent)


def whole_number(value: str, source: str) -> int:
    """A count >= 1."""
    try:
        found = int(value)
    except ValueError:
        found = 0
    if found < 1:
        raise pytest.UsageError(f"{source}: expected a whole number >= 1, got {value!r}")
    return found


def probability(value: str, source: str) -> float:
    """An error rate: a number strictly between 0 and 1."""
    try:
        found = float(value)
    except ValueError:
        found = -1.0
    if not 0 < found < 1:
        raise pytest.UsageError(f"{source}: {value!r} is not an error rate between 0 and 1")
    return found


def choice(*allowed: str) -> Converter:
    def convert(value: str, source: str) -> str:
        if value not in allowed:
            raise pytest.UsageError(
                f"{source}: expected one of {', '.join(allowed)}, got {value!r}"
            )
        return value

    return convert


def names(value: str, source: str) -> tuple[str, ...]:
    found = tuple(n.strip() for n in value.split(",") if n.strip())
    if not found:
        raise pytest.UsageError(f"{source}: expected profile names, got {value!r}")
    return found


def url(value: str, source: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise pytest.UsageError(f"{source}: expected an http:// or https:// URL, got {value!r}")
    root = value.rstrip("/")
    # an OpenAI client's base URL names /v1: it failed as "does not answer /health", since
    # /health, /metrics and /tokenize live at the server's root
    return root.removesuffix("/v1")


def path(value: str, _source: str) -> Path:
    return Path(value)


@dataclass(frozen=True)
class Option:
    """One option: its flag, ini twin, converter, default (a string, as typed) and help."""

    flag: str
    ini: str
    convert: Converter
    default: str | None
    help: str


OPTIONS: Final = (
    Option(
        "--vllm-profile", "vllm_profile", names, "default", "tuning profile(s), comma separated"
    ),
    Option(
        "--vllm-profiles-dir",
        "vllm_profiles_dir",
        path,
        "profiles",
        "profile YAML folder, relative to rootdir",
    ),
    Option(
        "--vllm-model", "vllm_model", text, None, "model id or folder [embedded dummy-weight model]"
    ),
    Option(
        "--vllm-model-preset",
        "vllm_model_preset",
        choice(*PRESETS),
        "tiny",
        f"embedded model: {' or '.join(PRESETS)}",
    ),
    Option(
        "--vllm-url",
        "vllm_url",
        url,
        None,
        "measure a running server instead of starting one: its root URL (a /v1 suffix is "
        "dropped), serving /health, /v1/models, /tokenize, /v1/completions (streamed) and "
        "/metrics, as vllm serve does; a profile's engine settings do not apply to it",
    ),
    Option(
        "--vllm-platform",
        "vllm_platform",
        choice("auto", "cpu", "cuda"),
        "auto",
        "auto, cpu or cuda",
    ),
    Option(
        "--vllm-boot-timeout",
        "vllm_boot_timeout",
        positive_float,
        "600",
        "seconds a server may take to boot",
    ),
    Option(
        "--vllm-cache-dir",
        "vllm_cache_dir",
        path,
        ".vllm-perf-cache",
        "models and server logs, relative to rootdir",
    ),
    Option(
        "--vllm-baseline-dir",
        "vllm_baseline_dir",
        path,
        ".vllm-perf",
        "baseline store, relative to rootdir",
    ),
    Option("--vllm-json", "vllm_json", path, None, "write all results as JSON to this path"),
    Option("--vllm-markdown", "vllm_markdown", path, None, "write a Markdown summary to this path"),
    Option(
        "--vllm-html",
        "vllm_html",
        path,
        None,
        "write a self-contained HTML report to this path (plots inline with matplotlib)",
    ),
    Option(
        "--vllm-plots",
        "vllm_plots",
        path,
        None,
        "write PNG plots into this folder (needs matplotlib)",
    ),
    Option(
        "--vllm-ab",
        "vllm_ab",
        text,
        None,
        "A/B: also run each perf test under this base profile, alternating passes, "
        "and judge the selected profile against it (no stored baseline); "
        "PROFILE@VENV runs the base side from another Python environment "
        "(a venv folder or its python), e.g. another vLLM release",
    ),
    Option(
        "--vllm-ab-rev",
        "vllm_ab_rev",
        text,
        None,
        "A/B against a git revision: judge each selected profile against the same "
        "profile as committed at REV (read with git, not checked out; a profile REV "
        "lacks is judged against default); REV@VENV runs the base side from another "
        "environment",
    ),
    Option(
        "--vllm-ab-mode",
        "vllm_ab_mode",
        choice(*AB_MODES),
        "resident",
        "A/B: resident keeps both sides up, each with a little under half the GPU's "
        "memory, passes alternated (ABBA); sequential boots one side at a time with the "
        "profile's own memory, in blocks of passes (CBBC): for tests of KV capacity or "
        "preemptions, which follow the memory",
    ),
    Option(
        "--vllm-repeat",
        "vllm_repeat",
        repeat_count,
        "8",
        "passes of each workload; verdicts compare passes",
    ),
    Option(
        "--vllm-settle-passes",
        "vllm_settle_passes",
        settle_count,
        "auto",
        "unmeasured passes at full load before each test's first measured pass on a server "
        "(each A/B side); auto: 1 on a GPU, where the first pass after a boot ran slower, "
        "0 on the CPU engine",
    ),
    Option(
        "--vllm-ab-max-pairs",
        "vllm_ab_max_pairs",
        repeat_count,
        "20",
        "A/B (resident): while a gated metric is undecided after --vllm-repeat pairs, run 4 "
        "more pairs a look, up to this many; --vllm-repeat or less: one look",
    ),
    Option(
        "--vllm-ab-run-alpha",
        "vllm_ab_run_alpha",
        probability,
        "0.05",
        "A/B: the false-alarm budget of the whole run, split over its A/B tests: each may "
        "falsely regress with probability at most min(0.01, this / the A/B tests selected)",
    ),
    Option(
        "--vllm-stored-run-alpha",
        "vllm_stored_run_alpha",
        probability,
        "0.05",
        "stored baselines: the false-alarm budget of the whole run, split over its tests "
        "judged against stored baselines: each may falsely regress with probability at "
        "most min(0.025, this / those tests)",
    ),
    Option(
        "--vllm-shard",
        "vllm_shard",
        shard,
        "all",
        "K/N: run the K-th of N shards of the perf tests (stable by test id, for a CI "
        "matrix; join the shards' --vllm-json reports with vllm-perf merge). The run "
        "budgets are split over the tests of every shard, so the merged run keeps them",
    ),
    Option(
        "--vllm-workers-per-gpu",
        "vllm_workers_per_gpu",
        whole_number,
        "1",
        "pytest -n N on fewer GPUs than workers: let up to this many workers share a GPU, "
        "each server taking its share of the GPU's memory; the workers load it at once, "
        "so their results are filed under a hardware class of their own (1x GPU, shared "
        "by K workers) and carry no energy figure",
    ),
    Option(
        "--vllm-inconclusive",
        "vllm_inconclusive",
        choice("pass", "exit"),
        "pass",
        "what a run whose tests all passed but left a gated verdict inconclusive (not "
        "decided at the pair budget) exits with: pass, status 0 (the PASS line names "
        f"them); exit, status {INCONCLUSIVE_EXIT}, so that a CI system or merge queue "
        "can tell 'could not decide' from 'decided unchanged'",
    ),
)
FLAGS: Final = (
    (
        "--vllm-save-baseline",
        "vllm_save_baseline",
        "store each result as the new baseline (one boot)",
    ),
    ("--vllm-add-boot", "vllm_add_boot", "add each result to its baseline as one more boot"),
    (
        "--vllm-require-baseline",
        "vllm_require_baseline",
        "fail, before any boot, perf tests whose baseline cannot gate them "
        "(missing, other hardware, workload, model or vLLM release)",
    ),
    (
        "--vllm-gate-other-release",
        "vllm_gate_other_release",
        "gate on baselines measured with another vLLM release (default: report only)",
    ),
    (
        "--vllm-verbose",
        "vllm_verbose",
        "verdict lines in full: the test, its p-values against the level, the decision's "
        "bounds and the tolerance (default: the two values, the ratio, its interval "
        "and the word; the JSON report has every figure)",
    ),
)
ROOT_RELATIVE: Final = frozenset({"vllm_profiles_dir", "vllm_cache_dir", "vllm_baseline_dir"})


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("vllm-perf", "vLLM serving performance gates")
    for opt in OPTIONS:
        shown = f" [{opt.default}]" if opt.default is not None else ""
        group.addoption(
            opt.flag, dest=opt.ini, default=None, help=f"{opt.help}{shown} (ini: {opt.ini})"
        )
        parser.addini(opt.ini, opt.help, default=opt.default)
    for flag, ini, help_text in FLAGS:
        group.addoption(
            flag, dest=ini, action="store_true", default=None, help=f"{help_text} (ini: {ini})"
        )
        parser.addini(ini, help_text, type="bool", default=False)
    parser.addini("vllm_tolerances", "regression tolerances, lines of METRIC=FRACTION", "linelist")
