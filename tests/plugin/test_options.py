"""Options are parsed once at start-up: a bad value is a one-line usage error (exit 4)."""

from __future__ import annotations

import pytest

from pytest_vllm_perf.options import OPTIONS

BAD = [
    ("--vllm-boot-timeout=abc", "expected a number of seconds > 0, got 'abc'"),
    ("--vllm-model-preset=nosuch", "expected one of tiny, llama-8b, got 'nosuch'"),
    ("--vllm-repeat=0", "expected a whole number of passes >= 1, got '0'"),
    ("--vllm-platform=tpu", "expected one of auto, cpu, cuda, got 'tpu'"),
    ("--vllm-url=localhost:8000", "expected an http:// or https:// URL, got 'localhost:8000'"),
]


@pytest.mark.parametrize(("arg", "message"), BAD)
def test_bad_option_is_a_one_line_usage_error(pytester, arg, message):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(arg)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == [f"ERROR: {arg.split('=')[0]}: {message}"]


def test_ini_values_are_checked_the_same_way(pytester):
    pytester.makeini("[pytest]\nvllm_boot_timeout = -3\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini vllm_boot_timeout: expected a number of seconds > 0*"])


def test_every_option_has_a_default_written_once_and_shown_in_help(pytester):
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())  # help wraps lines
    for opt in OPTIONS:
        assert opt.flag in text and f"(ini: {opt.ini})" in text
        if opt.default is not None:
            assert f"[{opt.default}]" in text
