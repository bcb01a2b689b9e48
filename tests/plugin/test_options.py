"""Options are parsed once at start-up: a bad value is a one-line usage error (exit 4)."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from pytest_vllm_perf.options import OPTIONS

BAD = [
    ("--vllm-boot-timeout=abc", "expected a number of seconds > 0, got 'abc'"),
    (
        "--vllm-model-preset=nosuch",
        "expected one of tiny, small, llama-8b, llama-70b, got 'nosuch'",
    ),
    ("--vllm-repeat=0", "expected a whole number of passes >= 1, got '0'"),
    ("--vllm-settle-passes=-1", "expected auto or a whole number of passes >= 0, got '-1'"),
    ("--vllm-platform=tpu", "expected one of auto, cpu, cuda, got 'tpu'"),
    ("--vllm-url=localhost:8000", "expected an http:// or https:// URL, got 'localhost:8000'"),
]


def test_a_url_with_v1_is_the_servers_root():
    """An OpenAI client's base URL (``.../v1``) failed as "does not answer /health"."""
    from pytest_vllm_perf.options import url

    for given in ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/", "http://h:1/"):
        assert url(given, "--vllm-url") in ("http://127.0.0.1:8000", "http://h:1")


@pytest.mark.parametrize(("arg", "message"), BAD)
def test_bad_option_is_a_one_line_usage_error(pytester, arg, message):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(arg)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == [f"ERROR: {arg.split('=')[0]}: {message}"]


def test_a_mistyped_profiles_folder_is_an_error_not_no_profiles(pytester):
    """It was silent (exit 0) when only shipped profiles were used. The default folder
    may be missing (a project without profiles of its own), a named one may not."""
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--vllm-profiles-dir=profilez")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == [f"ERROR: --vllm-profiles-dir: no such folder {pytester.path / 'profilez'}"]
    assert pytester.runpytest_subprocess().ret == pytest.ExitCode.OK  # no ./profiles: fine


def test_an_unwritable_baseline_folder_is_an_error_before_any_boot(pytester):
    """--vllm-save-baseline into a folder that cannot be made was reported after the
    whole run. A file where the folder should be fails as root too (permissions do not:
    root may write anywhere); a read-only folder is the same check (os.access). Broken
    on purpose (the check skipped), the run collects and exits 0."""
    pytester.makepyfile("def test_x():\n    pass\n")
    (pytester.path / "blob").write_text("not a folder")
    for flag in ("--vllm-save-baseline", "--vllm-add-boot"):
        result = pytester.runpytest_subprocess(flag, "--vllm-baseline-dir=blob/baselines")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, flag
        errors = [line for line in result.stderr.lines if line.strip()]
        assert errors == [
            f"ERROR: --vllm-baseline-dir: cannot write baselines to "
            f"{pytester.path / 'blob' / 'baselines'}: {pytester.path / 'blob'} is a file, "
            "not a folder"
        ], flag
    # comparing only reads: the same folder is no error then
    assert pytester.runpytest_subprocess("--vllm-baseline-dir=blob/baselines").ret == 0


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


BAD_MARKERS = """
import os
import sys

import pytest

@pytest.mark.vllm_perf(workload="interferense")
def test_workload(vllm_perf): pass

@pytest.mark.vllm_perf(workload="mixed", chat={"userz": 2})
def test_override(vllm_perf): pass

@pytest.mark.vllm_perf(workload="mixed", duraton_s=3)
def test_field(vllm_perf): pass

@pytest.mark.vllm_perf(thresholds={"ttft_p99": 100})
def test_thresholds(vllm_perf): pass

@pytest.mark.vllm_perf(tolerances={"itl_p99_msec": 0.1})
def test_tolerances(vllm_perf): pass

@pytest.mark.vllm_perf(gate=["tpot_mean"])
def test_gate(vllm_perf): pass

@pytest.mark.vllm_perf(repeat=0)
def test_repeat(vllm_perf): pass

@pytest.mark.vllm_perf(profile="chunkd")
def test_profile(vllm_perf): pass

@pytest.mark.vllm_perf(workload="decode", thresholds={"long.ttft_p99_ms": 500})
def test_classes(vllm_perf): pass

@pytest.mark.vllm_perf(workload="decode", thresholds={"ttft_p99_ms": 500})
def test_good(vllm_perf): pass
"""


def test_every_bad_marker_value_is_one_usage_error_line_before_anything_boots(pytester):
    """All marker problems at once, exit 4, in seconds: no server was started to find them."""
    pytester.makepyfile(BAD_MARKERS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # found at collection: nothing booted (a clock bound failed on a busy machine)
    assert "booting vLLM" not in result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    expected = {
        "test_workload": "unknown workload 'interferense' (did you mean 'interference'?)",
        "test_override": "class 'chat': unknown field 'userz' (did you mean 'users'?)",
        "test_field": "unknown override 'duraton_s' (did you mean 'duration_s'?)",
        "test_thresholds": "marker thresholds: unknown threshold 'ttft_p99': unknown metric "
        "'ttft_p99'; did you mean 'ttft_p99_ms'?",
        "test_tolerances": "marker tolerances: unknown metric 'itl_p99_msec'; did you mean "
        "'itl_p99_ms'?",
        "test_gate": "marker gate: unknown metric 'tpot_mean'; did you mean 'tpot_mean_ms'?",
        "test_repeat": "marker repeat: repeat: expected a whole number of passes >= 1, got 0",
        "test_profile": "marker profile: unknown vLLM profile 'chunkd' (did you mean 'chunked'?)",
        # a class the workload lacks would only fail after a boot and a run
        "test_classes": "marker classes: threshold 'long.ttft_p99_ms': workload 'decode' has "
        "no class 'long' (classes: chat)",
    }
    lines = [line for line in err.splitlines() if "vllm_perf marker" in line]
    assert len(lines) == len(expected), err
    for test, text in expected.items():
        assert any(f"::{test}: vllm_perf" in line and text in line for line in lines), (test, err)
    assert "test_good" not in err
    assert "booting" not in result.stdout.str() + err


def test_a_misspelled_marker_is_a_usage_error_before_anything_boots(pytester):
    """``vllm_pref`` ran the default workload for 3 minutes and passed, with only
    pytest's generic warning after the run; a marker of another name is left alone."""
    pytester.makepyfile(
        """
import os
import sys

import pytest

@pytest.mark.vllm_pref(workload="decode")
def test_typo(vllm_perf): pass

@pytest.mark.slow
def test_other(vllm_perf): pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == [
        "ERROR: test_a_misspelled_marker_is_a_usage_error_before_anything_boots.py::test_typo: "
        "unknown marker 'vllm_pref': did you mean 'vllm_perf'?"
    ]


def test_cuda_on_a_machine_without_a_gpu_is_a_usage_error(pytester, monkeypatch):
    """``--vllm-platform=cuda`` with no GPU ran the CPU engine labelled cuda and
    passed. Here nvidia-smi is hidden (PATH without it), so no GPU is visible; a run
    with no perf test selected needs no GPU."""
    pytester.makepyfile("def test_perf(vllm_perf): pass\n\ndef test_x(): pass\n")
    bare = str(pytester.path / "bin")
    (pytester.path / "bin").mkdir()
    monkeypatch.setenv("PATH", bare + ":" + os.path.dirname(sys.executable))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--vllm-platform=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert errors == [
        "ERROR: --vllm-platform=cuda: no NVIDIA GPU is visible here (nvidia-smi lists none, "
        "or CUDA_VISIBLE_DEVICES hides them); use --vllm-platform=auto or cpu"
    ]
    assert pytester.runpytest_subprocess("--vllm-platform=cuda", "-k", "test_x").ret == 0


def test_plots_without_matplotlib_and_a_missing_model_folder_are_usage_errors(
    pytester, monkeypatch
):
    """Both were found only after the run (plots: reported with exit 0) or after a
    boot (the model: a 30-line traceback from the engine). matplotlib is hidden here
    as an interpreter without it has none (``sys.modules`` entry ``None``)."""
    pytester.makepyfile("def test_x():\n    pass\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = pytester.runpytest("--vllm-plots=plots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --vllm-plots: needs matplotlib: pip install matplotlib (into this environment; "
            "the plugin's extras are not on an index)"
        ]
    )
    monkeypatch.delitem(sys.modules, "matplotlib")
    (pytester.path / "empty").mkdir()
    for model, why in (("./nosuch", "no such folder"), ("./empty", "has no config.json")):
        result = pytester.runpytest_subprocess(f"--vllm-model={model}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, model
        errors = [line for line in result.stderr.lines if line.strip()]
        assert errors == [f"ERROR: --vllm-model: {model}: {why}"]
    # a hub id is the engine's to resolve
    assert pytester.runpytest_subprocess("--vllm-model=org/name").ret == 0


def test_a_hub_model_that_cannot_be_had_is_a_usage_error_before_any_boot(pytester, monkeypatch):
    """An uncached hub id failed only after a boot, with a 30-line traceback. Here the
    cache is empty and the hub is off (HF_HUB_OFFLINE), then unreachable (an endpoint on
    a closed local port). Seen failing with the check removed (the run booted)."""
    pytester.makepyfile("def test_perf(vllm_perf): pass\n")
    monkeypatch.setenv("HF_HOME", str(pytester.path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--vllm-model=org/nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1, errors
    assert errors[0].startswith("ERROR: --vllm-model=org/nosuch: not in the local Hugging Face")
    assert errors[0].endswith("and HF_HUB_OFFLINE is set"), errors
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--vllm-model=org/nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and "127.0.0.1 cannot be reached" in errors[0], errors
