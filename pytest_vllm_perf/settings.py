"""The options' values, read once from the command line and the ini file into frozen
:class:`Settings` (the table of options and their converters is ``options.py``). The
command line wins over the ini file; a bad value is a one-line ``pytest.UsageError``
at start-up (exit code 4), before anything boots.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_vllm_perf.config import revision
from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.config.profiles import load as read_profile
from pytest_vllm_perf.core.errors import ProfileError, ThresholdError
from pytest_vllm_perf.core.records import ABMode, Platform
from pytest_vllm_perf.core.registry import validate_tolerances
from pytest_vllm_perf.options import OPTIONS, ROOT_RELATIVE, unwritable, unwritable_file
from pytest_vllm_perf.report.formats import FORMATS
from pytest_vllm_perf.verdict.compare import STORED_ALPHA
from pytest_vllm_perf.verdict.gate import SaveMode
from pytest_vllm_perf.verdict.sequential import CALL_SHARE, DEFAULT_ALPHA

__all__ = ["Settings"]


def _raw(config: pytest.Config, ini: str) -> tuple[str | None, str]:
    """The command-line value, else the ini value, with where it came from."""
    value = config.getoption(ini)
    if value is not None:
        flag = next(o.flag for o in OPTIONS if o.ini == ini)
        return str(value), flag
    value = config.getini(ini)
    return (str(value) if value not in (None, "") else None), f"ini {ini}"


def _ab_side(value: str | None) -> dict[str, Any]:
    """``PROFILE`` or ``PROFILE@VENV``: the base side's profile and interpreter."""
    if value is None or "@" not in value:
        return {"ab_base": value, "ab_python": None}
    profile, _, where = value.partition("@")
    path = Path(where).expanduser()
    python = path / "bin" / "python" if path.is_dir() else path
    if not profile or not (python.is_file() and os.access(python, os.X_OK)):
        raise pytest.UsageError(
            f"--vllm-ab {value!r}: expected PROFILE@VENV, a venv folder with bin/python "
            f"or a Python interpreter; {python} is not an executable file"
        )
    return {"ab_base": profile, "ab_python": str(python.absolute())}


def _ab_rev(value: str | None, profiles_dir: Path) -> dict[str, Any]:
    """``REV`` or ``REV@VENV`` (split at the last ``@`` only where what follows names a
    Python environment, since revisions may hold one: ``HEAD@{1}``), resolved with git."""
    if value is None:
        return {}
    rev, python = value, None
    head, _, tail = value.rpartition("@")
    if head and tail:
        path = Path(tail).expanduser()
        found = path / "bin" / "python" if path.is_dir() else path
        if found.is_file() and os.access(found, os.X_OK):
            rev, python = head, str(found.absolute())
    try:
        return {"ab_revision": revision.resolve(rev, profiles_dir), "ab_python": python}
    except ProfileError as exc:
        raise pytest.UsageError(str(exc)) from None


def _flag(config: pytest.Config, ini: str) -> bool:
    value = config.getoption(ini)
    return bool(config.getini(ini) if value is None else value)


def _tolerances(config: pytest.Config) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in config.getini("vllm_tolerances"):
        key, sep, value = str(line).partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise pytest.UsageError(f"ini vllm_tolerances: expected METRIC=FRACTION, got {line!r}")
    try:
        validate_tolerances(out)
    except ThresholdError as exc:
        raise pytest.UsageError(f"ini vllm_tolerances: {exc}") from None
    return out


@dataclass(frozen=True)
class Settings:
    """Every option's value, converted and validated once."""

    profiles: tuple[str, ...]
    profiles_dir: Path
    model: str | None
    preset: str
    url: str | None
    platform: Platform | None
    boot_timeout_s: float
    cache_dir: Path
    baseline_dir: Path
    report_paths: Mapping[str, Path | None]  # a report format's option -> its file
    plots_dir: Path | None
    repeat: int
    settle_passes: int | None = None  # None: auto (``settle_for``)
    save_mode: SaveMode = SaveMode.COMPARE
    require_baseline: bool = False
    tolerances: Mapping[str, float] = field(default_factory=dict)
    profile_given: bool = False
    gate_other_release: bool = False
    verbose: bool = False  # --vllm-verbose: verdict lines in full
    ab_base: str | None = None
    ab_python: str | None = None  # the base side's interpreter (PROFILE@VENV), else this one
    ab_revision: revision.Revision | None = None  # --vllm-ab-rev: profiles at a revision
    ab_mode: ABMode = "resident"
    ab_max_pairs: int = 20
    ab_run_alpha: float = 0.05
    ab_tests: int = 0  # the A/B tests selected (set at collection): they share ab_run_alpha
    stored_run_alpha: float = 0.05
    stored_tests: int = 0  # the other perf tests selected (set at collection)
    shard: tuple[int, int] | None = None  # --vllm-shard K/N; None: every test
    workers_per_gpu: int = 1  # pytest-xdist workers that may share one GPU
    # "exit": a run that passed with an undecided gated verdict exits INCONCLUSIVE_EXIT
    inconclusive: str = "pass"

    @property
    def _share(self) -> float:
        """Each perf test's share of the run's budget: in an A/B run every perf test, A/B
        or pinned to a profile and judged stored, shares --vllm-ab-run-alpha (a pinned
        test once spent a second 5% of its own); otherwise --vllm-stored-run-alpha."""
        tests = max(1, self.ab_tests + self.stored_tests)
        return (self.ab_run_alpha if self.ab else self.stored_run_alpha) / tests

    @property
    def ab_alpha(self) -> float:
        """One A/B test's false-alarm rate: 1%, or its share of the run's budget."""
        return min(DEFAULT_ALPHA, self._share)

    @property
    def stored_alpha(self) -> float:
        """One stored-baseline test's false-alarm rate (one-sided): 2.5%, one side of the
        two-sided 5% of ``compare``, or its share of the run's budget."""
        return min(STORED_ALPHA, self._share)

    @staticmethod
    def call_alpha(test_alpha: float, earlier_calls: int) -> float:
        """A test's budget over its ``vllm_perf.run``/``capacity`` calls: each spends
        ``CALL_SHARE`` of what its earlier calls left, so that a test calling twice is not
        two chances of a false alarm (each call once spent the whole)."""
        return test_alpha * CALL_SHARE * (1 - CALL_SHARE) ** earlier_calls

    def settle_for(self, platform: str) -> int:
        """The settle passes on ``platform``: as given, or auto's 1 on a GPU, 0 on the CPU.

        On the H200 the first pass after the boots read ITL p50 2.5-4% slower than the
        server's later passes in each planted A/B run (bench/results/h200/plant/*/ab.json);
        on the CPU engine no such effect was measured, and a pass there costs CI seconds."""
        if self.settle_passes is not None:
            return self.settle_passes
        return 0 if platform == "cpu" else 1

    @property
    def ab(self) -> bool:
        """Whether this is an A/B run (``--vllm-ab`` or ``--vllm-ab-rev``)."""
        return self.ab_base is not None or self.ab_revision is not None

    def base_profile(self, candidate: str) -> tuple[Profile, str]:
        """The base side's profile for a candidate profile, and a note for the verdict."""
        if self.ab_revision is not None:
            try:
                return self.ab_revision.load(candidate)
            except ProfileError as exc:
                raise pytest.UsageError(str(exc)) from None
        assert self.ab_base is not None
        return self.load_profile(self.ab_base), ""

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        values = _values(config)
        save, add = _flag(config, "vllm_save_baseline"), _flag(config, "vllm_add_boot")
        if save and add:
            raise pytest.UsageError("--vllm-save-baseline and --vllm-add-boot exclude each other")
        mode = SaveMode.SAVE if save else SaveMode.ADD_BOOT if add else SaveMode.COMPARE
        platform = values["vllm_platform"]
        settings = cls(
            profiles=values["vllm_profile"],
            profiles_dir=values["vllm_profiles_dir"],
            model=values["vllm_model"],
            preset=values["vllm_model_preset"],
            url=values["vllm_url"],
            platform=None if platform == "auto" else platform,
            boot_timeout_s=values["vllm_boot_timeout"],
            cache_dir=values["vllm_cache_dir"],
            baseline_dir=values["vllm_baseline_dir"],
            report_paths={name: values[name] for name in FORMATS},
            plots_dir=values["vllm_plots"],
            repeat=values["vllm_repeat"],
            settle_passes=values["vllm_settle_passes"],
            save_mode=mode,
            require_baseline=_flag(config, "vllm_require_baseline"),
            tolerances=_tolerances(config),
            profile_given=_raw(config, "vllm_profile")[0] not in (None, "default"),
            gate_other_release=_flag(config, "vllm_gate_other_release"),
            verbose=_flag(config, "vllm_verbose"),
            ab_mode=values["vllm_ab_mode"],
            ab_max_pairs=values["vllm_ab_max_pairs"],
            ab_run_alpha=values["vllm_ab_run_alpha"],
            stored_run_alpha=values["vllm_stored_run_alpha"],
            shard=values["vllm_shard"],
            workers_per_gpu=values["vllm_workers_per_gpu"],
            inconclusive=values["vllm_inconclusive"],
            **_ab_side(values["vllm_ab"]),
        )
        if mode is not SaveMode.COMPARE and (why := unwritable(settings.baseline_dir)):
            # found before any boot: it was reported after the whole run
            source = _raw(config, "vllm_baseline_dir")[1]
            raise pytest.UsageError(
                f"{source}: cannot write baselines to {settings.baseline_dir}: {why}"
            )
        _check_outputs(config, settings)
        _check_extras(config, settings)
        raw_dir, dir_source = _raw(config, "vllm_profiles_dir")
        named = config.getoption("vllm_profiles_dir") is not None or raw_dir != "profiles"
        if named and not settings.profiles_dir.is_dir():  # a typo is not "no profiles"
            raise pytest.UsageError(f"{dir_source}: no such folder {settings.profiles_dir}")
        if values["vllm_ab_rev"] is not None:
            if settings.ab_base is not None:
                raise pytest.UsageError("--vllm-ab and --vllm-ab-rev exclude each other")
            found = _ab_rev(values["vllm_ab_rev"], settings.profiles_dir)
            settings = dataclasses.replace(settings, **found)
        settings.check_profiles()
        return settings

    def check_profiles(self) -> None:
        """Every profile a run will boot, and an A/B run's sides, read before any boot."""
        if self.ab:
            if self.url is not None:
                raise pytest.UsageError(
                    "--vllm-url measures one server you started, and one server cannot be "
                    "both sides of an A/B run: drop --vllm-url, and each side boots its profile"
                )
            if self.save_mode is not SaveMode.COMPARE:
                raise pytest.UsageError(
                    "--vllm-ab compares two live sides and stores nothing: "
                    "drop --vllm-save-baseline / --vllm-add-boot"
                )
            if self.ab_base is not None:
                try:
                    read_profile(self.ab_base, self.profiles_dir)
                except ProfileError as exc:  # say which option named it
                    raise pytest.UsageError(f"--vllm-ab: {exc}") from None
            else:
                for name in self.profiles:
                    self.base_profile(name)  # fail before anything boots
        if self.profile_given:
            for name in self.profiles:
                self.load_profile(name)  # fail before anything boots

    def load_profile(self, name: str) -> Profile:
        try:
            return read_profile(name, self.profiles_dir)
        except ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None


def _values(config: pytest.Config) -> dict[str, Any]:
    """Every option's value, converted by its table row (``options.OPTIONS``); the ones
    named relative to the rootdir made absolute."""
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        raw, source = _raw(config, opt.ini)
        if raw is None:
            values[opt.ini] = None
            continue
        value = opt.convert(raw, source)
        if opt.ini in ROOT_RELATIVE:
            value = Path(config.rootpath, value)
        values[opt.ini] = value
    return values


def _check_outputs(config: pytest.Config, settings: Settings) -> None:
    """Every report file and the plots folder writable, found before any boot: an
    unwritable --vllm-json was a traceback after the whole run."""
    for name, path in settings.report_paths.items():
        if path is not None and (why := unwritable_file(path)):
            raise pytest.UsageError(f"{_raw(config, name)[1]}: cannot write {path}: {why}")
    if settings.plots_dir is not None and (why := unwritable(settings.plots_dir)):
        source = _raw(config, "vllm_plots")[1]
        raise pytest.UsageError(f"{source}: cannot write plots to {settings.plots_dir}: {why}")


def _check_extras(config: pytest.Config, settings: Settings) -> None:
    """What would otherwise be found only after the boots and the run: plots without
    matplotlib (reported after the run, with exit 0) and a model folder that is not
    there (a 30-line traceback from the engine after its start). A hub id (no path
    prefix) is the engine's to find."""
    if settings.plots_dir is not None and importlib.util.find_spec("matplotlib") is None:
        source = _raw(config, "vllm_plots")[1]
        raise pytest.UsageError(
            f"{source}: needs matplotlib: pip install matplotlib (into this environment; "
            "the plugin's extras are not on an index)"
        )
    model = settings.model
    if model and model.startswith(("/", "./", "../", "~")):
        folder = Path(model).expanduser()
        if not (folder / "config.json").is_file():
            source = _raw(config, "vllm_model")[1]
            why = "has no config.json" if folder.is_dir() else "no such folder"
            raise pytest.UsageError(f"{source}: {model}: {why}")
