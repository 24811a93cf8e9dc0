"""Slurm where users meet it: a machine without Slurm, sbatch refusing a job, a cluster without
accounting, what a dry run says would be queued, and a plain command that is no sweep.

The cluster tests (marked slurm) use the session's real cluster (tests/conftest.py); the
others need no Slurm at all."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from .conftest import BIN, NO_SPIKES, run_cli, unreadable_imagefolder

# Slurm's client commands (Debian's slurm-client and slurm-wlm): a PATH without Slurm has none.
# fmt: off
SLURM_TOOLS = frozenset([
    "sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol",
    "scrontab", "scrun", "sdiag", "sh5util", "sinfo", "sjobexitmod", "sjstat", "smap", "sprio",
    "squeue", "sreport", "srun", "sshare", "sstat", "strigger", "sview",
])
# fmt: on
# What sacct says, on stderr with exit status 1, on a cluster without accounting (measured with
# scripts/slurm/cluster.sh and SLURM_TEST_ACCOUNTING=0).
NO_ACCOUNTING = "Slurm accounting storage is disabled"
TINY = [
    "data=synthetic",
    "trainer.max_steps=1",
    "model.time_steps=2",
    "launcher.mem_gb=1",
    *NO_SPIKES,  # no test here reads spike figures
]


def _written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _stand_ins(folder: Path, scripts: dict[str, str]) -> Path:
    """Shell scripts named after Slurm's commands, in `folder`."""
    folder.mkdir()
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


def _path_without_slurm(folder: Path) -> str:
    """This PATH as a machine without Slurm has it: every command on it linked into `folder`
    except Slurm's, after the console script's own folder (as a user's shell would have it)."""
    folder.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not Path(directory).is_dir():
            continue
        for entry in Path(directory).iterdir():
            link = folder / entry.name
            if entry.name in SLURM_TOOLS or os.path.lexists(link) or not entry.is_file():
                continue
            if os.access(entry, os.X_OK):
                link.symlink_to(entry)
    return f"{BIN}{os.pathsep}{folder}"


def _dry_run_script(stdout: str) -> list[str]:
    """The sbatch script a dry run prints (the first plan's, for a sweep)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("it would execute:")) + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("    "))
    return [line.removeprefix("    ") for line in lines[start:end]]


@pytest.mark.slow
def test_without_slurm_on_path_one_line_exit_2_nothing_written(tmp_path: Path, figures) -> None:
    path = _path_without_slurm(tmp_path / "bin")
    assert shutil.which("sbatch", path=path) is None and shutil.which("srun", path=path) is None
    assert shutil.which("sh", path=path)  # the rest of the machine is still there
    work = tmp_path / "work"
    work.mkdir()
    started = time.monotonic()
    result = run_cli(["launcher=slurm", *TINY], cwd=work, env={"PATH": path})
    figures(seconds=round(time.monotonic() - started, 1))
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "sbatch and srun not found on PATH" in lines[0]
    assert "launcher=local or launcher=torchrun" in lines[0]
    assert _written(work) == []  # no outputs/, no sweep directory, no multirun.yaml


SUBMISSION_FAILED = "sbatch: error: Batch job submission failed: "
LAUNCHER = {
    "mem_gb": 100000,
    "cpus_per_task": 1000,
    "tasks_per_node": 1,
    "nodes": 1,
    "partition": "nope",
    "timeout_min": 60,
    "gpus_per_node": 0,
    "constraint": None,
}
CPUS = ["launcher.cpus_per_task=1000", "launcher.tasks_per_node=1", "launcher.nodes=1"]


@pytest.mark.parametrize(
    ("said", "reason", "keys"),
    [
        (  # what the test cluster's sbatch says to launcher.mem_gb=100000
            "sbatch: error: Memory specification can not be satisfied\n"
            f"{SUBMISSION_FAILED}Requested node configuration is not available",
            "Memory specification can not be satisfied; Requested node configuration is not "
            "available",
            ["launcher.mem_gb=100000"],
        ),
        (  # to launcher.cpus_per_task=1000
            f"{SUBMISSION_FAILED}Requested node configuration is not available",
            "Requested node configuration is not available",
            CPUS,
        ),
        (  # to launcher.tasks_per_node=100
            f"{SUBMISSION_FAILED}More processors requested than permitted",
            "More processors requested than permitted",
            CPUS,
        ),
        (  # to launcher.nodes=5 (2 nodes)
            f"{SUBMISSION_FAILED}Node count specification invalid",
            "Node count specification invalid",
            ["launcher.nodes=1"],
        ),
        (  # to launcher.partition=nope
            "sbatch: error: invalid partition specified: nope\n"
            f"{SUBMISSION_FAILED}Invalid partition name specified",
            "invalid partition specified: nope; Invalid partition name specified",
            ["launcher.partition=nope"],
        ),
        (  # a partition's MaxTime below launcher.timeout_min
            f"{SUBMISSION_FAILED}Requested time limit is invalid (missing or exceeds some limit)",
            "Requested time limit is invalid (missing or exceeds some limit)",
            ["launcher.timeout_min=60"],
        ),
        (  # to launcher.gpus_per_node=4 on CPU nodes
            "sbatch: error: Invalid generic resource (gres) specification",
            "Invalid generic resource (gres) specification",
            ["launcher.gpus_per_node=0"],
        ),
        (
            f"{SUBMISSION_FAILED}Invalid feature specification",
            "Invalid feature specification",
            ["launcher.constraint=None"],
        ),
        (  # not a resource: no key to change, not a config error
            f"{SUBMISSION_FAILED}Unable to contact slurm controller (connect failure)",
            "Unable to contact slurm controller (connect failure)",
            [],
        ),
    ],
)
def test_sbatch_refusal_is_one_line_with_slurms_reason_and_the_key(
    said: str, reason: str, keys: list[str]
) -> None:
    from experiments.launchers.slurm import refusal

    line, config_error = refusal(said, LAUNCHER)
    if keys:
        change = ", ".join(keys[:-1]) + " or " + keys[-1] if len(keys) > 1 else keys[0]
        expected = f"error: Slurm refused the job ({reason}): change {change}; nothing was queued"
    else:
        expected = f"error: Slurm refused the job: {reason}; nothing was queued"
    assert (line, config_error) == (expected, bool(keys))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "array"),
    [(["launcher=slurm"], None), (["-m", "launcher=slurm", "seed=1,2"], "0-1%2")],
    ids=["plain", "sweep"],
)
def test_dry_run_shows_the_script_submitit_gives_sbatch(
    args: list[str], array: str | None, tmp_path: Path
) -> None:
    """The same command, once as a dry run and once for real, with an sbatch that keeps the
    script it is given and refuses the job (so nothing runs): the two scripts are equal, so the
    dry run shows the real interpreter, sweep directory and, for a sweep, the job array."""
    record = tmp_path / "submitted.sh"
    refused = "sbatch: error: Batch job submission failed: Unable to contact slurm controller"
    bin_dir = _stand_ins(
        tmp_path / "bin",
        {"sbatch": f'cp "$1" {record}\necho "{refused}" >&2\nexit 1', "srun": "exit 1"},
    )
    env = {"PATH": f"{bin_dir}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    work = tmp_path / "work"
    work.mkdir()
    dry = run_cli([*args, *TINY, "dry_run=true"], cwd=work, env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert not record.exists() and _written(work) == []
    real = run_cli([*args, *TINY], cwd=work, env=env)
    assert real.returncode == 1, real.stderr[-2000:]  # an unknown reason: not a config error
    assert real.stderr.strip().splitlines() == [
        "error: Slurm refused the job: Unable to contact slurm controller; nothing was queued"
    ]
    # the one name made at submission: the code snapshot's folder (launchers/snapshot.py)
    named = r"\.snapshot/[^/\s\"]+"
    submitted = [
        re.sub(named, ".snapshot/SUBMISSION-TIME-PID", line)
        for line in record.read_text().splitlines()
    ]
    assert any(".snapshot/SUBMISSION-TIME-PID/site" in line for line in submitted)
    assert _dry_run_script(dry.stdout) == submitted
    command = submitted[-1].split()
    python = command[command.index("-u") - 1]
    assert Path(python).is_absolute() and Path(python).parent == BIN, command
    assert ("#SBATCH --array=" + str(array) in submitted) == bool(array)
    (sweep,) = (work / "outputs" / "multiruns").iterdir()
    assert all(str(sweep) in line for line in submitted if "--output" in line), submitted
    assert not (sweep / ".snapshot").exists()  # refused: no code copy left behind


@pytest.mark.slow
@pytest.mark.slurm
def test_sbatch_refusing_memory_is_one_line_naming_launcher_mem_gb(
    slurm_cluster, tmp_path: Path
) -> None:
    result = run_cli(
        ["launcher=slurm", *TINY, "launcher.mem_gb=100000", f"hydra.sweep.dir={tmp_path / 's'}"],
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: Slurm refused the job (Memory specification can not be ")
    assert "change launcher.mem_gb=100000; nothing was queued" in line


@pytest.mark.slow
@pytest.mark.slurm
def test_failed_plain_job_without_accounting_warns_once_and_is_no_sweep_point(
    slurm_cluster, tmp_path: Path
) -> None:
    """A plain launcher=slurm command whose job fails (its images are not images), on a
    cluster whose sacct fails as it does without accounting: submitit's failing polls are one
    warning, and nothing calls the run "sweep point 0"."""
    bin_dir = _stand_ins(tmp_path / "bin", {"sacct": f'echo "{NO_ACCOUNTING}" >&2\nexit 1'})
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            "launcher=slurm",
            *TINY,
            "data=imagefolder",
            f"data.root={unreadable_imagefolder(tmp_path / 'broken')}",
            "data.num_classes=10",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    assert result.returncode == 1, result.stderr[-3000:]
    said = result.stdout + result.stderr
    assert said.count("Bypassing sacct error") == 1, said[-4000:]
    assert said.count(NO_ACCOUNTING) == 1, said[-4000:]
    job_logs = [p.read_text() for p in (sweep / ".submitit").rglob("*_log.*")]
    job_logs += [p.read_text() for p in (sweep / "0").glob("*.log")]
    assert any("run failed: " in text for text in job_logs), job_logs
    for text in [said, *job_logs]:
        assert "sweep point" not in text, text[-3000:]
