"""The code a Slurm submission's jobs run: a copy made at submission, not what is installed
when a job starts (what is copied and recorded: docs/launchers.md).

A job of a long sweep may wait hours in the queue; without a copy it imports whatever the
experiments package (and the user's project) are when it starts, so an edit or a reinstall made
meanwhile reaches part of the sweep. As submitit's RsyncSnapshot does for a git checkout, the
login copies the installed package and the checkout's tracked files into
`<sweep dir>/.snapshot/<when>/`, and the login's PYTHONPATH entries that lie in the checkout
point into the copy. One directory per submission: a continued sweep's new jobs take a new copy
and the waiting ones keep theirs. hydra_plugins (Hydra's plugin namespace) is not copied: the
launcher plugin only dispatches to experiments.launchers, which is.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from experiments.run.record import git, read_json, write_bytes_atomic, write_json_atomic

# The job's environment names its snapshot; the run records it in summary.json (job_record).
ENV = "EXPERIMENTS_SNAPSHOT"
FOLDER = ".snapshot"
RECORD = "snapshot.json"


def package_dir() -> Path:
    import experiments

    return Path(experiments.__file__).resolve().parent


def git_root(cwd: Path) -> Path | None:
    top = (git(cwd, "rev-parse", "--show-toplevel", timeout=30) or "").strip()
    return Path(top).resolve() if top else None


def _git(root: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    return out.stdout if out.returncode == 0 else ""


def _copy_project(root: Path, target: Path) -> dict[str, Any]:
    """The checkout's tracked files as they are on disk (as RsyncSnapshot copies them), its
    commit, and its uncommitted changes as a diff file next to the copy."""
    files = [name for name in _git(root, "ls-files", "-z").split("\0") if name]
    for name in files:
        source = root / name
        if source.is_file():  # (a tracked file deleted on disk is not copied)
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    commit = _git(root, "rev-parse", "HEAD").strip() or None
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no").strip())
    record: dict[str, Any] = {"root": str(root), "git_commit": commit, "dirty": dirty}
    record["files"] = len(files)
    if dirty:
        diff = target.parent / "project.diff"
        write_bytes_atomic(diff, _git(root, "diff", "HEAD").encode("utf-8"))
        record["diff"] = str(diff)
    return record


def _moved_entries(root: Path, project: Path) -> list[str]:
    """The login's PYTHONPATH entries inside the checkout, pointing into its copy."""
    moved = []
    for entry in filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)):
        path = Path(entry).resolve()
        if path == root or root in path.parents:
            moved.append(str(project / path.relative_to(root)))
    return moved


def _export_lines(folder: Path, pythonpath: list[str]) -> list[str]:
    path = os.pathsep.join(shlex.quote(p) for p in pythonpath)
    return [
        f"export {ENV}={shlex.quote(str(folder))}",
        f'export PYTHONPATH={path}"${{PYTHONPATH:+:$PYTHONPATH}}"',
    ]


def take(sweep_dir: Path, cwd: Path | None = None) -> Path:
    """Copy the code (see the module docstring) and return the snapshot's directory."""
    cwd = (cwd or Path.cwd()).resolve()
    folder = sweep_dir.absolute() / FOLDER / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    site = folder / "site"
    # (with its byte code: copy2 keeps the sources' mtimes, so the .pyc files stay valid and
    # the jobs do not compile the package again)
    shutil.copytree(package_dir(), site / "experiments", copy_function=shutil.copy2)
    record: dict[str, Any] = {
        "path": str(folder),
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "experiments_from": str(package_dir()),
        "pythonpath": [str(site)],
    }
    root = git_root(cwd)
    if root is not None:
        project = folder / "project"
        project.mkdir(parents=True)
        record["project"] = _copy_project(root, project)
        record["pythonpath"] += _moved_entries(root, project)
        record["git_commit"] = record["project"]["git_commit"]
        record["dirty"] = record["project"]["dirty"]
    write_json_atomic(folder / RECORD, record)
    return folder


def setup_lines(folder: Path) -> list[str]:
    """The sbatch script's lines that make its job import from the snapshot."""
    return _export_lines(folder, json.loads((folder / RECORD).read_text())["pythonpath"])


def preview_lines(sweep_dir: Path, cwd: Path | None = None) -> list[str]:
    """The same lines in a dry run, before the copy exists (its folder is named when it is
    made, at submission)."""
    folder = sweep_dir.absolute() / FOLDER / "SUBMISSION-TIME-PID"
    root = git_root((cwd or Path.cwd()).resolve())
    moved = _moved_entries(root, folder / "project") if root is not None else []
    return _export_lines(folder, [str(folder / "site"), *moved])


def recorded() -> dict[str, Any] | None:
    """In a job: its snapshot's record, and where experiments was really imported from."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    record = read_json(Path(folder) / RECORD)
    if record is None:
        record = {"path": folder, "problem": "snapshot record unreadable"}
    record["imported_from"] = str(package_dir())
    return record
