"""The code snapshot a Slurm submission takes (launchers/snapshot.py), without Slurm: what is
copied from a git checkout, what is recorded, and the lines the sbatch script gets.
test_slurm_walk_away.py shows the jobs importing from it while the installed package changes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from experiments.launchers import snapshot


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_dirty_checkout_is_copied_with_its_commit_and_diff(tmp_path: Path, monkeypatch) -> None:
    project = tmp_path / "project"
    (project / "src" / "mine").mkdir(parents=True)
    (project / "src" / "mine" / "builders.py").write_text("SIZE = 1\n")
    (project / "notes.txt").write_text("untracked\n")
    _git(project, "init", "-q")
    _git(project, "add", "src")
    _git(project, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    (project / "src" / "mine" / "builders.py").write_text("SIZE = 2\n")  # not committed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(project / "src"), "/elsewhere"]))

    folder = snapshot.take(tmp_path / "sweep", cwd=project / "src")
    record = json.loads((folder / "snapshot.json").read_text())
    assert folder.parent == tmp_path / "sweep" / ".snapshot"
    assert (folder / "site" / "experiments" / "__init__.py").is_file()
    copy = folder / "project"
    assert (copy / "src" / "mine" / "builders.py").read_text() == "SIZE = 2\n"  # as on disk
    assert not (copy / "notes.txt").exists()  # tracked files only
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True
    ).stdout.strip()
    assert record["git_commit"] == head and record["dirty"] is True
    assert "+SIZE = 2" in Path(record["project"]["diff"]).read_text()
    # the checkout's PYTHONPATH entry points into the copy; others stay where they are
    assert record["pythonpath"] == [str(folder / "site"), str(copy / "src")]
    lines = snapshot.setup_lines(folder)
    assert lines[0] == f"export {snapshot.ENV}={folder}"
    assert lines[1].startswith(f"export PYTHONPATH={folder / 'site'}:{copy / 'src'}")


def test_outside_a_checkout_only_the_package_is_copied(tmp_path: Path) -> None:
    folder = snapshot.take(tmp_path / "sweep", cwd=tmp_path)
    record = json.loads((folder / "snapshot.json").read_text())
    assert "project" not in record and record["pythonpath"] == [str(folder / "site")]
