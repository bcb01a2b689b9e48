"""The pull-request gate's pieces that need no server: which profiles a change touches,
the GPUs a job claims, and the summary (the engine test runs the whole script)."""

from __future__ import annotations

from pytest_vllm_perf import prgate
from tests.scratch_git import git


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
    assert prgate.gpu_count({"CUDA_VISIBLE_DEVICES": "0"}) == 1
    assert prgate.gpu_count({"CUDA_VISIBLE_DEVICES": "2,3"}) == 2
    assert prgate.gpu_count({}) == 0
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
