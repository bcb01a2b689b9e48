from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from pytest_vllm_perf.core.errors import BaselineError
from pytest_vllm_perf.store import baselines


def test_save_is_atomic_and_stable(tmp_path):
    path = tmp_path / "hw" / "t" / "p.json"
    baselines.save(path, {"b": 1, "a": [1.5, 2]})
    first = path.read_text()
    baselines.save(path, {"a": [1.5, 2], "b": 1})
    assert path.read_text() == first  # sorted keys: re-saving the same data is no diff
    assert list(path.parent.iterdir()) == [path]  # no temp files left behind


def test_load_rejects_corrupt_file_and_leaves_it(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(baselines.BaselineError, match=f"corrupt vLLM perf baseline {path}"):
        baselines.load(path)
    assert path.read_text() == "{not json"
    assert baselines.load(tmp_path / "absent.json") is None


def test_killed_writer_never_leaves_a_partial_file(tmp_path):
    """SIGKILL a process that keeps rewriting a large baseline: the file is always whole,
    the writer had saved (its generation is on disk), and the temp file a killed writer
    cannot remove is removed by the next save. Seen failing: with atomic.write_text
    writing straight into the file, a kill mid-write left JSON that did not parse."""
    path = tmp_path / "p.json"
    baselines.save(path, {"generation": -1, "pad": "x" * 10})
    writer = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from pytest_vllm_perf.store import baselines
        i = 0
        while True:
            baselines.save(Path({str(path)!r}), {{"generation": i, "pad": "x" * 4_000_000}})
            print(i, flush=True)
            i += 1
    """)
    # a save spends most of its time encoding, so one kill in a few lands inside the
    # write itself: twelve kills at seeded delays across a save's length
    rng = random.Random(0)
    for delay in [rng.uniform(0.0, 0.08) for _ in range(12)]:
        proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        saved = int(proc.stdout.readline())  # blocks until one save has completed
        time.sleep(delay)  # then kill it inside (most likely) a later save
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        data = json.loads(path.read_text())  # whole, whichever generation it is
        assert data["pad"] == "x" * 4_000_000 and data["generation"] >= saved
    baselines.save(path, {"generation": "final"})
    assert json.loads(path.read_text()) == {"generation": "final"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # no temp files left


def test_the_next_save_never_removes_a_live_writers_temp_file(tmp_path):
    path = tmp_path / "p.json"
    live = tmp_path / f".p.json.{os.getpid()}.abc.tmp"
    live.write_text("in progress")
    baselines.save(path, {"a": 1})
    assert live.exists()


def test_a_full_disk_while_saving_leaves_the_old_baseline_intact(tmp_path, monkeypatch):
    """ENOSPC on the temp file's fsync: the error names the file, the old one survives,
    and no temp file is left beside it."""
    path = tmp_path / "hw" / "test" / "default.json"
    baselines.save(path, {"schema": 3, "old": True})
    before = path.read_bytes()

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(BaselineError, match=f"cannot write baseline {path}: No space left"):
        baselines.save(path, {"schema": 3, "new": True, "pad": "x" * 100_000})
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["default.json"]


def test_a_baseline_folder_that_cannot_be_written_is_an_error_naming_it(tmp_path, monkeypatch):
    """Root ignores permission bits, so the refusal is simulated where the OS raises it."""

    def denied(*_args, **_kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    path = tmp_path / "store" / "hw" / "t" / "default.json"
    with pytest.raises(BaselineError, match=f"cannot write baseline {path}: Permission denied"):
        baselines.save(path, {"schema": 3})
    assert not path.exists()


def test_ctrl_c_during_a_save_leaves_the_old_baseline_and_no_temp_file(tmp_path, monkeypatch):
    """KeyboardInterrupt lands between the temp file's write and its rename."""
    path = tmp_path / "hw" / "test" / "default.json"
    baselines.save(path, {"schema": 3, "old": True})
    before = path.read_bytes()

    def interrupted(*_args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        baselines.save(path, {"schema": 3, "new": True})
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["default.json"]
