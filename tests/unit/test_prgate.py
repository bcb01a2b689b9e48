"""The pull-request gate's pieces that need no server: which profiles a change touches,
the GPUs a job claims, and the summary (the engine test runs the whole script)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pytest_vllm_perf.serving import hardware
from pytest_vllm_perf.tools import prgate
from tests.scratch_git import commit_all, git


def test_changed_profiles_are_those_whose_settings_differ_at_the_base(tmp_path):
    """A reworded description changes nothing; a changed setting, a new profile and a
    changed parent (``extends``) do. Broken on purpose (comparing whole profiles,
    description included, instead of their settings' hash), the reworded profile is
    listed and the last assertion fails."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "same.yaml").write_text("description: a\nengine: {max_num_seqs: 8}\n")
    (folder / "parent.yaml").write_text("engine: {max_model_len: 2048}\n")
    (folder / "child.yaml").write_text("extends: parent\nengine: {max_num_seqs: 4}\n")
    (folder / "tuned.yaml").write_text("engine: {max_num_seqs: 8}\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "base")
    assert prgate.changed_profiles("HEAD", folder) == []
    (folder / "same.yaml").write_text("description: reworded\nengine: {max_num_seqs: 8}\n")
    (folder / "parent.yaml").write_text("engine: {max_model_len: 4096}\n")
    (folder / "tuned.yaml").write_text("engine: {max_num_seqs: 16}\n")
    (folder / "new.yaml").write_text("engine: {max_num_seqs: 2}\n")
    assert prgate.changed_profiles("HEAD", folder) == ["child", "new", "parent", "tuned"]


def test_gpu_minutes_count_the_visible_gpus():
    four = [(str(i), "NVIDIA H200") for i in range(4)]
    assert hardware.gpu_count({"CUDA_VISIBLE_DEVICES": "0"}, four) == 1
    assert hardware.gpu_count({"CUDA_VISIBLE_DEVICES": "2,3"}, four) == 2
    # unset on a GPU host: every GPU it has (it read "no GPU (CPU engine)" on an H200)
    assert hardware.gpu_count({}, four[:1]) == 1
    assert hardware.gpu_count({"CUDA_VISIBLE_DEVICES": ""}, four) == 0
    assert hardware.gpu_count({}, ()) == 0  # no driver: the CPU engine
    steps = [
        prgate.Step("ab", ("py", "-m", "pytest", "examples"), 1, 600.0, "| table |"),
        prgate.Step("stored", ("py", "-m", "pytest", "x"), 0, 300.0, ""),
    ]
    text = prgate.summary(steps, 2, "origin/main")
    assert "Total: 15.0 min wall, 30.0 GPU minutes (2 GPU)." in text
    assert "| ab | 1 | 10.0 |" in text and "| table |" in text
    assert "(no report: the session ended before any result)" in text
    assert prgate.figures(steps, 2)["gpu_min"] == 30.0
    skipped = [prgate.Step("ab", (), None, 0.0, "", "no profile changed since main")]
    assert "| ab | skipped | 0.0 | no profile changed since main |" in prgate.summary(
        skipped, 0, "main"
    )


def test_the_gate_ends_with_one_pass_or_fail_line_naming_what_regressed():
    """prgate's last line was pytest's "1 passed" of its last step and the summary had no
    overall verdict. Broken on purpose (PASS whatever the statuses), the first check fails."""
    folder = Path(__file__).parents[2] / "bench/results/h200/plant/l34"
    report, data = (folder / "ab.md").read_text(), (folder / "ab.json").read_text()
    ab = prgate.Step("ab", ("python", "-m", "pytest"), 1, 60.0, report, "", data)
    stored = prgate.Step("stored", ("python", "-m", "pytest"), 0, 30.0, "")
    line = prgate.verdict([ab, stored])
    assert line.startswith("FAIL: ab a perf test failed; stored passed"), line
    # read from the JSON report, with the test's name (the Markdown's lines were
    # scanned, and two tests' output_throughput read the same); TPOT, thr: inconclusive
    assert line.endswith("regressed: test_decode[plant] itl_p50_ms x1.051"), line
    markdown_only = prgate.Step("ab", ("python",), 1, 60.0, report)
    assert "regressed:" not in prgate.verdict([markdown_only, stored])
    assert "**FAIL: ab a perf test failed" in prgate.summary([ab, stored], 0, "HEAD~1")
    skipped = prgate.Step("ab", (), None, 0.0, "", "no profile changed since HEAD~1")
    assert prgate.verdict([skipped, stored]) == (
        "PASS: stored passed; ab skipped (no profile changed since HEAD~1)"
    )
    cannot = prgate.Step("stored", ("python",), 4, 1.0, "")
    assert prgate.verdict([skipped, cannot]).startswith(
        "FAIL: stored usage error or a baseline that cannot gate"
    )


def test_the_gates_steps_share_one_false_alarm_budget(tmp_path, monkeypatch):
    """Each step was a session with its own 5% budget, so a true A/A pull request could
    fail 10% of the time over both. Now each step that runs gets its share of
    --run-alpha, and one given after -- still wins (it comes later in the argv)."""
    ran: list[tuple[str, ...]] = []

    def run(name: str, argv: list[str], out: Path) -> prgate.Step:
        ran.append(tuple(argv))
        return prgate.Step(name, tuple(argv), 0, 1.0, "")

    monkeypatch.setattr(prgate.sessions, "run", run)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    out = ["--out", str(tmp_path)]
    assert prgate.main(["--base", "HEAD", "--profiles", "chunked", *out]) == 0
    ab, stored = ran
    assert "--vllm-ab-run-alpha=0.025" in ab and "--vllm-ab-rev=HEAD" in ab
    assert "--vllm-stored-run-alpha=0.025" in stored and "--vllm-require-baseline" in stored
    ran.clear()
    assert prgate.main(["--base", "HEAD", "--profiles", "chunked", "--stored", "", *out]) == 0
    [alone] = ran
    assert "--vllm-ab-run-alpha=0.05" in alone
    ran.clear()
    mine = "--vllm-ab-run-alpha=0.01"
    prgate.main(["--base", "HEAD", "--profiles", "chunked", "--run-alpha", "0.1", *out, "--", mine])
    ab, given = ran[0], "--vllm-ab-run-alpha=0.05"
    assert given in ab and ab.index(mine) > ab.index(given)


def test_the_gate_exits_with_the_first_failing_steps_status(tmp_path, monkeypatch):
    """A pull request whose A/B step regressed and whose stored step passed must not exit
    0: CI reads the exit status. Seen failing with the last step's status taken."""
    cases = (((1, 0), 1), ((0, 1), 1), ((1, 4), 1), ((0, 4), 4), ((0, 0), 0), ((6, 0), 6))
    cases += (((6, 1), 1), ((0, 6), 6), ((6, 4), 4))
    for statuses, expected in cases:
        given = iter(statuses)

        def run(name: str, argv: list[str], out: Path, given=given) -> prgate.Step:
            return prgate.Step(name, tuple(argv), next(given), 1.0, "")

        monkeypatch.setattr(prgate.sessions, "run", run)
        monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
        args = ["--base", "HEAD", "--profiles", "chunked", "--out", str(tmp_path)]
        assert prgate.main(args) == expected, statuses


def test_an_undecided_step_makes_the_gate_inconclusive_not_failed():
    """A step that passed with a gated verdict undecided (exit 6 under
    --vllm-inconclusive=exit) is neither a pass nor a failure: the gate's outcome, its
    line and gate.json say inconclusive, and any real failure still wins. Seen failing
    with exit 6 counted as a failure (the line read FAIL)."""
    ok = prgate.Step("ab", ("python",), 0, 1.0, "")
    undecided = prgate.Step("stored", ("python",), 6, 1.0, "")
    failed = prgate.Step("upgrade", ("python",), 1, 1.0, "")
    assert prgate.outcome([ok]) == "pass"
    assert prgate.outcome([ok, undecided]) == "inconclusive"
    assert prgate.outcome([undecided, failed]) == "fail"
    line = prgate.verdict([ok, undecided])
    assert line.startswith("INCONCLUSIVE: ab passed; stored passed, a gated verdict undecided")
    assert prgate.figures([ok, undecided], 0)["outcome"] == "inconclusive"


def test_shipped_profiles_inside_the_repository_are_read_from_the_package(tmp_path, monkeypatch):
    """The usual layout: the plugin installed into a gitignored ``.venv`` inside the
    project, so the shipped profiles' folder lies under the repository's top level but
    no revision holds it. Only the user's changed profile is changed, and a profile that
    ``extends: default`` loads at the base. Broken on purpose (the shipped folder read
    from git at the base, as before), every shipped profile is listed as changed and
    the base has no ``default``."""
    shipped = tmp_path / ".venv" / "site" / "pytest_vllm_perf" / "profiles"
    shipped.mkdir(parents=True)
    for name in ("default", "chunked"):
        (shipped / f"{name}.yaml").write_text(f"description: {name}\nengine: {{}}\n")
    monkeypatch.setattr(prgate.profiles, "SHIPPED", shipped.resolve())
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "mine.yaml").write_text("extends: default\nengine: {max_num_seqs: 8}\n")
    (tmp_path / ".gitignore").write_text(".venv/\n")
    commit_all(tmp_path, "base")
    assert prgate.changed_profiles("HEAD", folder) == []
    (folder / "mine.yaml").write_text("extends: default\nengine: {max_num_seqs: 1}\n")
    assert prgate.changed_profiles("HEAD", folder) == ["mine"]
    at_base = prgate.revision.resolve("HEAD", folder, tmp_path / "rev")
    mine, note = at_base.load("mine")
    assert mine.name == "mine@HEAD" and mine.engine == {"max_num_seqs": 8} and not note


def test_revision_folders_are_removed(tmp_path, monkeypatch):
    """``changed_profiles`` leaves no ``vllm-perf-rev-*`` folder behind. Broken on
    purpose (the folder made with ``mkdtemp`` and never removed), one is left."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = tmp_path / "repo" / "profiles"
    folder.mkdir(parents=True)
    (folder / "p.yaml").write_text("engine: {max_num_seqs: 8}\n")
    commit_all(tmp_path / "repo", "base")
    assert prgate.changed_profiles("HEAD", folder) == []
    assert list((tmp_path / "tmp").iterdir()) == []


def test_every_hint_of_a_step_names_prgates_own_options():
    """A stored step's hint named the plugin's flag (``--vllm-add-boot``) where a
    prgate user gives ``--stored-mode add-boot``. Broken on purpose (the note shown as
    the session wrote it), the line names ``--vllm-add-boot``."""
    from pytest_vllm_perf.verdict import eligibility

    note = f"t.py::test[p]: --vllm-require-baseline (one boot): b.json: {eligibility.ONE_BOOT_NOTE}"
    stored = prgate.Step("stored", ("python",), 4, 1.0, "", note)
    skipped = prgate.Step("ab", (), None, 0.0, "", "no profile changed since HEAD")
    for text in (prgate.verdict([skipped, stored]), prgate.summary([skipped, stored], 0, "HEAD")):
        assert "--vllm-" not in text.replace("`", ""), text
        assert "add a boot (--stored-mode add-boot)" in text, text


def test_prgate_usage_errors_exit_4_as_the_plugins_do(tmp_path, capsys):
    """prgate's own usage errors exited 2, which the plugin and the gate's summary read
    as "interrupted". Broken on purpose (argparse's status left as it is), exit 2."""
    assert prgate.main(["--stored-mode", "nosuch", "--base", "HEAD"]) == 4
    assert prgate.main([]) == 4  # --base is required
    assert "--base" in capsys.readouterr().err
    folder = tmp_path / "profiles"
    folder.mkdir()
    git(tmp_path, "init", "-q")
    out = ["--out", str(tmp_path / "out"), "--profiles-dir", str(folder)]
    assert prgate.main(["--base", "no-such-rev", "--stored", "", *out]) == 4
    assert "not a commit" in capsys.readouterr().err
