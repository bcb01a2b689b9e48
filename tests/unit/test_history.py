"""The run history and its change points (``vllm-perf history``): rows from
``--vllm-json`` reports, appended atomically and once, malformed files named and left
alone, and Apache Otava's analysis naming the first run after a planted step."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import uuid
from pathlib import Path

import pytest

from pytest_vllm_perf.core.report import Report
from pytest_vllm_perf.store import history as history_store
from pytest_vllm_perf.store import naming
from pytest_vllm_perf.tools import history
from tests import report_json

ROOT = Path(__file__).resolve().parents[2]
TEST = "examples/test_decode.py::test_decode"
# a PostgreSQL server, which .ci/run starts from the distribution's package
# (scripts/ci_postgres.sh); in CI its absence is a failure, not a skip
POSTGRES = os.environ.get("VLLM_PERF_TEST_POSTGRES", "")


@pytest.fixture
def postgres():
    """A fresh PostgreSQL database of its own, dropped after the test."""
    if not POSTGRES:
        if os.environ.get("CI"):
            pytest.fail("VLLM_PERF_TEST_POSTGRES is unset: .ci/run starts a PostgreSQL")
        pytest.skip("no PostgreSQL (VLLM_PERF_TEST_POSTGRES); make test starts one")
    import pg8000.native

    from pytest_vllm_perf.tools.history_pg import connect as _connect

    name = f"h_{uuid.uuid4().hex[:12]}"
    admin = _connect(POSTGRES)
    admin.run(f"CREATE DATABASE {name}")
    admin.close()
    yield POSTGRES.rsplit("/", 1)[0] + f"/{name}"
    admin = _connect(POSTGRES)
    with contextlib.suppress(pg8000.native.Error):
        admin.run(f"DROP DATABASE {name} WITH (FORCE)")
    admin.close()


@pytest.fixture(params=["csv", "postgresql"])
def store(request, tmp_path):
    """Where the history goes: a folder of CSV files, or a fresh PostgreSQL database."""
    if request.param == "csv":
        return str(tmp_path / "history")
    return request.getfixturevalue("postgres")


def report(level: float, rng: random.Random, passes: int = 8) -> dict:
    """A report of one decode result whose step is ``level`` times the base one: ITL
    p50 and TPOT scale with it, output throughput inversely (1-2% pass noise)."""
    rows = [
        {
            "metrics": {
                "median_itl_ms": 5.0 * level * math.exp(rng.gauss(0, 0.01)),
                "mean_tpot_ms": 5.5 * level * math.exp(rng.gauss(0, 0.015)),
                "output_throughput": 5000 / level * math.exp(rng.gauss(0, 0.02)),
            }
        }
        for _ in range(passes)
    ]
    env = {"hardware_class": "1x NVIDIA H200", "platform": "cuda", "vllm_version": "0.26.0",
           "model": "llama-3.1-8b-shaped"}  # fmt: skip
    return {"results": [report_json.result(
        test=TEST, profile="default", profile_hash="03187f49", environment=env,
        workload={"gate": ["itl_p50_ms"]}, passes=report_json.passes([r["metrics"] for r in rows]),
    )]}  # fmt: skip


def nightly(root: Path | str, tmp_path: Path, levels: list[float], seed: int = 0) -> None:
    """One report a night through the command, as the nightly workflow appends them."""
    rng = random.Random(seed)
    for night, level in enumerate(levels):
        path = tmp_path / f"night-{night}.json"
        path.write_text(json.dumps(report(level, rng)))
        time = f"2026-11-{night + 1:02d}T02:00:00+00:00"
        assert history.main(["append", str(path), "--to", str(root), "--time", time,
                             "--commit", f"c{night:02d}"]) == 0  # fmt: skip


def test_otava_names_the_first_run_after_a_planted_step(store, tmp_path, capsys):
    """20 nightly runs, the last 8 with the decode step x1.3: each gated figure's change
    point is run 13, commit c12, with the run before it named, and --fail-recent 8
    fails on it, in a CSV folder and in PostgreSQL alike. Broken on purpose (the run
    number printed 0-based), this fails."""
    root = store
    nightly(root, tmp_path, [1.0] * 12 + [1.3] * 8)
    capsys.readouterr()
    assert history.main(["analyze", str(root), "--fail-recent", "8"]) == 1
    out = capsys.readouterr().out
    series = "1x-nvidia-h200/examples-test_decode.py-test_decode/default"  # a file's or a table's
    for metric in ("itl_p50_ms", "tpot_mean_ms", "output_throughput"):
        assert f"{series} {metric}: regression beyond its tolerance" in out, out
    assert (
        out.count("at run 13 of 20 (2026-11-13T02:00:00+00:00, commit c12; the run before: c11)")
        == 3
    )
    assert "3 regression(s) in the last 8 runs" in out
    # the step is older than the last 5 runs: named, not failed
    assert history.main(["analyze", str(root), "--fail-recent", "5"]) == 0


def test_a_history_without_a_step_has_no_change_point(store, tmp_path, capsys):
    nightly(store, tmp_path, [1.0] * 20, seed=1)
    capsys.readouterr()
    assert history.main(["analyze", str(store), "--fail-recent", "8"]) == 0
    out = capsys.readouterr().out
    assert "0 change point(s); 0 regression(s) in the last 8 runs" in out, out


def test_the_same_run_appended_twice_to_postgresql_is_one_run(postgres, tmp_path, capsys):
    store = postgres
    path = tmp_path / "run.json"
    path.write_text(json.dumps(report(1.0, random.Random(4))))
    for appended in ("1 appended", "0 appended"):
        assert history.main(["append", str(path), "--to", store, "--time",
                             "2026-11-01T02:00:00+00:00", "--commit", "c00"]) == 0  # fmt: skip
        assert f"1 run(s), {appended}" in capsys.readouterr().out


def test_the_same_report_appended_twice_is_one_run(tmp_path):
    root = tmp_path / "history"
    doc = report(1.0, random.Random(2))
    rows = history.rows_of(Report.from_json(doc), "2026-11-01T02:00:00+00:00", "c00")
    assert history.append(root, rows)[0].endswith("1 run(s), 1 appended")
    again = history.rows_of(
        Report.from_json(doc), "2026-11-02T02:00:00+00:00", "c00"
    )  # another time, same run
    assert history.append(root, again)[0].endswith("1 run(s), 0 appended")
    (path,) = root.rglob("*.csv")
    assert path.read_text().count("\n") == 2  # the header and one row


def test_a_history_file_is_named_as_a_baseline_and_an_older_name_is_moved(tmp_path, capsys):
    """One naming rule: the history of a test sits at the path its baseline has, with
    ``.csv`` for ``.json``. A file at the name an older release gave it
    (``HW/TEST--PROFILE.csv``) is moved there by the next append, its rows kept.
    Broken on purpose (the legacy file left
    where it is), the old run is lost from the new file and this fails."""
    root = tmp_path / "history"
    first = history.rows_of(Report.from_json(report(1.0, random.Random(5))), "2026-11-01", "c00")
    hw, test, profile = first[0]["hardware_class"], first[0]["test"], first[0]["profile"]
    legacy = history_store.legacy_path(root, hw, test, profile)
    history.append(root, first)
    legacy.parent.mkdir(parents=True, exist_ok=True)
    history_store.path_for(root, hw, test, profile).rename(legacy)  # as an older release left it
    assert legacy.name == "examples_test_decode.py_test_decode--default.csv", legacy
    second = history.rows_of(Report.from_json(report(1.0, random.Random(6))), "2026-11-02", "c01")
    (line,) = history.append(root, second)
    path = naming.path_for(root, hw, test, profile, ".csv")
    assert line == f"{path}: 2 run(s), 1 appended (moved from {legacy})", line
    assert not legacy.exists()
    assert [p.relative_to(root).as_posix() for p in root.rglob("*.csv")] == [
        "1x-nvidia-h200/examples-test_decode.py-test_decode/default.csv"
    ]
    _, rows = history_store.read(path)
    assert [r["commit"] for r in rows] == ["c00", "c01"]


def test_a_malformed_history_is_named_by_file_and_line_and_never_rewritten(tmp_path, capsys):
    root = tmp_path / "history"
    rng = random.Random(3)
    nightly(root, tmp_path, [1.0, 1.0])
    (path,) = root.rglob("*.csv")
    lines = path.read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 2)[0]  # a row cut short: two fields lost
    path.write_text("\n".join(lines) + "\n")
    before = path.read_bytes()
    (tmp_path / "new.json").write_text(json.dumps(report(1.0, rng)))
    capsys.readouterr()
    assert history.main(["append", str(tmp_path / "new.json"), "--to", str(root)]) == 4
    err = capsys.readouterr().err
    assert f"{path}:3: " in err and "fields where the header has" in err, err
    assert path.read_bytes() == before
    assert history.main(["analyze", str(root)]) == 4
    assert f"{path}:3: " in capsys.readouterr().err
    cells = lines[1].split(",")
    cells[-1] = "fast"  # a metric cell that is not a number
    path.write_text("\n".join([lines[0], ",".join(cells)]) + "\n")
    assert history.main(["analyze", str(root)]) == 4
    assert f"{path}:2: output_throughput.spread: not a number: 'fast'" in capsys.readouterr().err
    (tmp_path / "nope.json").write_text("[]")
    assert history.main(["append", str(tmp_path / "nope.json"), "--to", str(root)]) == 4
    assert "nope.json: not a --vllm-json report" in capsys.readouterr().err


def test_a_real_report_gives_the_medians_of_its_passes(tmp_path):
    """The committed H200 A/A report: one row per result, each compared metric the
    median of its 8 passes, its spread the sd of their logs."""
    doc = json.loads((ROOT / "bench/results/h200/plant-warm/aa/ab.json").read_text())
    [row] = history.rows_of(Report.from_json(doc), "2026-12-04T21:00:00+00:00", "cf519d9")
    itl = sorted(p["metrics"]["median_itl_ms"] for p in doc["results"][0]["passes"])
    assert float(row["itl_p50_ms"]) == pytest.approx((itl[3] + itl[4]) / 2, rel=1e-5)
    logs = [math.log(v) for v in itl]
    mean = sum(logs) / 8
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 7)
    assert float(row["itl_p50_ms.spread"]) == pytest.approx(sd, rel=1e-3)
    assert row["hardware_class"] == "1x NVIDIA H200" and row["vllm_version"] == "0.26.0"
    assert row["passes"] == "8" and row["profile"] == "plant"


def test_failed_requests_are_counted_and_a_capacity_search_is_a_row(tmp_path):
    """A run with failures shows them in a ``failed`` column (the medians leave out the
    infinite TTFT of a failed request, so it showed only through its other figures);
    a capacity test's result is one row whose figure is ``capacity_rps``, and two
    searches with other passes are two runs (before, every capacity result had no
    passes, so each had the same run id and none after the first was kept). Broken on
    purpose (the search left out of the run id), the second search is not appended."""
    doc = report(1.0, random.Random(5))
    doc["results"][0]["passes"][3]["metrics"]["failed"] = 2
    for p in doc["results"][0]["passes"]:
        p["metrics"].setdefault("failed", 0)
    (row,) = history.rows_of(Report.from_json(doc), "2026-11-01T02:00:00+00:00", "c00")
    assert row["failed"] == "2"

    def searched(rates: list[float]) -> dict:
        result = report_json.result(
            test="t.py::test_capacity", environment={"hardware_class": "cpu"},
            metrics={"capacity_rps": 4.5},
            capacity={"class": "requests", "candidate": {"rates": rates}},
        )  # fmt: skip
        return Report.from_json({"results": [result]})

    root = tmp_path / "history"
    for night, rates in enumerate(([4.0, 8.0, 6.0], [4.0, 8.0, 5.0])):
        (row,) = history.rows_of(searched(rates), f"2026-11-0{night + 1}T02:00:00+00:00", "c")
        assert row["capacity_rps"] == "4.5" and "failed" not in row
        assert history.append(root, [row])[0].endswith(f"{night + 1} run(s), 1 appended")
