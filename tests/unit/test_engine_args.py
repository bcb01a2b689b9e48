"""The check of engine settings before any boot, with a stand-in for the launcher's
``check`` (vLLM's own parser is the engine tier's: tests/engine/test_faults_boot.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from pytest_vllm_perf.config.profiles import Profile
from pytest_vllm_perf.serving import engine_args
from pytest_vllm_perf.serving.server import ServerSpec

# answers as the launcher does: a flag whose value is "four" is rejected; every
# command line it was asked about is appended to the file CALLS
STUB = """
import json, os, sys
lines = json.load(sys.stdin)
with open(os.environ["CALLS"], "a") as f:
    f.write(json.dumps(lines) + "\\n")
if os.environ.get("BROKEN"):
    print("ImportError: no parser", file=sys.stderr)
    sys.exit(1)
out = {}
for name, flags in lines.items():
    bad = [flags[i - 1] for i, v in enumerate(flags) if v == "four"]
    out[name] = f"argument {bad[0]}: invalid int value: 'four'" if bad else ""
print(json.dumps(out))
"""


def _candidate(tmp_path: Path, name: str, section: str, value: object) -> engine_args.Candidate:
    profile = Profile(name, tmp_path / f"{name}.yaml", **{section: {"max_num_seqs": value}})
    flags = ("--max-num-seqs", str(value))
    launcher = (str(tmp_path / "stub.py"),)
    spec = ServerSpec("m", flags, env={"CALLS": str(tmp_path / "calls")}, launcher=launcher)
    return engine_args.Candidate(profile, spec)


def test_a_rejected_value_names_the_file_and_key_and_an_accepted_one_is_not_asked_again(
    tmp_path,
):
    (tmp_path / "stub.py").write_text(STUB)
    said: list[str] = []
    good = _candidate(tmp_path, "good", "engine", 4)
    bad = _candidate(tmp_path, "bad", "cpu", "four")
    memo = tmp_path / "memo"
    problems = engine_args.reject_lines([good, bad], memo, said.append)
    assert problems == [
        f"{tmp_path / 'bad.yaml'}: cpu.max_num_seqs: vLLM's argument parser: "
        "argument --max-num-seqs: invalid int value: 'four'"
    ]
    # said before the check, which imports vLLM (silent for 83 s once)
    assert said == [
        "checking bad, good's engine settings with vLLM's own parser before any boot "
        "(it imports vLLM: up to a minute or two on a small machine)"
    ]
    # one process for both; the rerun asks only about the rejected one
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
    assert engine_args.reject_lines([good, bad], memo, said.append) == problems
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and "four" in calls[1] and '"4"' not in calls[1]


def test_a_check_that_cannot_run_is_said_and_leaves_the_boot_to_judge(tmp_path, monkeypatch):
    (tmp_path / "stub.py").write_text(STUB)
    monkeypatch.setenv("BROKEN", "1")
    said: list[str] = []
    bad = _candidate(tmp_path, "bad", "engine", "four")
    assert engine_args.reject_lines([bad], tmp_path / "memo", said.append) == []
    assert said[1:] == [
        f"engine settings not checked before the boot ({sys.executable}): exit 1: "
        "ImportError: no parser"
    ]
    assert not (tmp_path / "memo").exists()  # nothing remembered as accepted


def test_the_memo_lives_in_the_users_cache_and_one_that_cannot_be_written_is_skipped(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert engine_args.memo_dir() == tmp_path / "xdg/pytest-vllm-perf/engine-args-accepted"
    (tmp_path / "stub.py").write_text(STUB)
    (tmp_path / "taken").write_text("a file where the memo's folder would go\n")
    good = _candidate(tmp_path, "good", "engine", 4)
    assert engine_args.reject_lines([good], tmp_path / "taken", print) == []


def test_a_command_line_accepted_by_one_interpreter_is_asked_again_of_another(tmp_path):
    """An A/B run's base side on another venv (--vllm-ab=PROFILE@VENV) runs another vLLM,
    whose parser may reject what this one accepted: the memo is keyed by the interpreter
    too (seen failing without it: the second check was skipped)."""
    import dataclasses
    import os

    (tmp_path / "stub.py").write_text(STUB)
    memo = tmp_path / "memo"
    here = _candidate(tmp_path, "good", "engine", 4)
    assert engine_args.reject_lines([here], memo, print) == []
    other = tmp_path / "other-python"
    os.symlink(sys.executable, other)
    there = dataclasses.replace(here, spec=dataclasses.replace(here.spec, python=str(other)))
    assert engine_args.reject_lines([there], memo, print) == []
    assert len((tmp_path / "calls").read_text().splitlines()) == 2
    assert engine_args.reject_lines([here, there], memo, print) == []
    assert len((tmp_path / "calls").read_text().splitlines()) == 2  # both remembered
