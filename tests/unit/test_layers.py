"""The tree's one-way data flow, as the README's commands meet it."""

from __future__ import annotations

import subprocess
import sys


def imported_by(statement: str) -> list[str]:
    code = (
        f"import sys; {statement}; "
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('pytest_vllm_perf'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_cli_imports_nothing_that_serves_or_loads():
    """`vllm-perf table` reads JSON: no server, load or pytest module."""
    modules = imported_by("import pytest_vllm_perf.tools.store")
    assert "pytest_vllm_perf.tools.store" in modules
    assert "pytest_vllm_perf.store.baselines" in modules
    for layer in ("serving", "load", "measure", "fixture", "plugin", "options"):
        assert not [m for m in modules if m.startswith(f"pytest_vllm_perf.{layer}")], layer


def test_the_store_imports_no_verdict():
    """The baselines, capacity searches, reports and history are files read and written:
    reading them imports nothing that infers."""
    modules = imported_by(
        "import pytest_vllm_perf.store.baselines, pytest_vllm_perf.store.capacities, "
        "pytest_vllm_perf.store.reports, pytest_vllm_perf.store.history"
    )
    assert "pytest_vllm_perf.store.history" in modules
    assert not [m for m in modules if m.startswith("pytest_vllm_perf.verdict")], modules


def test_public_surface_is_light_until_the_fixture_is_asked_for():
    modules = imported_by("import pytest_vllm_perf")
    assert not [m for m in modules if m.startswith("pytest_vllm_perf.serving")]
    import pytest_vllm_perf

    assert pytest_vllm_perf.PerfFixture.__name__ == "PerfFixture"
    assert set(pytest_vllm_perf.__all__) <= set(dir(pytest_vllm_perf)) | {"PerfFixture"}


def test_import_linter_contracts_hold():
    """The same check as `make lint`, so that a plain `pytest tests` sees a broken layer too."""
    from importlinter.cli import lint_imports

    assert lint_imports() == 0


def test_the_command_table_imports_a_command_only_when_it_runs():
    """``python -m pytest_vllm_perf table`` imports what ``cli`` does and nothing that serves:
    the table names modules, and imports one when its command runs."""
    modules = imported_by(
        "from pytest_vllm_perf import __main__ as m; import contextlib, io; "
        "f = io.StringIO(); r = contextlib.redirect_stdout(f); r.__enter__(); "
        "m.main(['table', '/nonexistent-store']); r.__exit__(None, None, None)"
    )
    assert "pytest_vllm_perf.tools.store" in modules
    for layer in ("serving", "load", "measure", "fixture", "plugin", "options", "bisect"):
        assert not [m for m in modules if m.startswith(f"pytest_vllm_perf.{layer}")], layer


def test_the_command_table_runs_each_command_and_refuses_an_unknown_one():
    from pytest_vllm_perf import __main__ as table

    for name in table.COMMANDS:
        out = subprocess.run(
            [sys.executable, "-m", "pytest_vllm_perf", name, "--help"],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0 and "usage:" in out.stdout, (name, out.stderr[-500:])
    bad = subprocess.run(
        [sys.executable, "-m", "pytest_vllm_perf", "tabel"], capture_output=True, text=True
    )
    assert bad.returncode == 4 and "unknown command 'tabel'" in bad.stderr
