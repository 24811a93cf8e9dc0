"""Slurm through submitit against a real single-node cluster started by scripts/slurm."""

from __future__ import annotations

import csv
import json
import statistics
import time
from pathlib import Path

import pytest

from .conftest import (
    CLI,
    cli_env,
    login_ended_well,
    read_jsonl,
    run_cli,
    sacct_field,
    start_now_when_pending,
    unreadable_imagefolder,
)
from .support import processes

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SLURM = [
    "model.time_steps=2",
    "trainer.batch_size=8",
    "trainer.log_every_n_steps=1",
    "launcher=slurm",
    "launcher.mem_gb=4",
    "launcher.cpus_per_task=1",
]
SMALL = ["data=synthetic", "data.train_size=256", "data.val_size=64", *SLURM]


def sacct_states(job_id: str) -> set[str]:
    """States sacct reports for a job (an array task's id lists the whole array)."""
    states: set[str] = set()
    for _ in range(20):  # accounting lags the job by about a second
        states = set(sacct_field(job_id, "State"))
        if states and not states & {"RUNNING", "PENDING", "COMPLETING"}:
            break
        time.sleep(0.5)
    return states


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_two_point_sweep_runs_as_slurm_jobs(slurm_cluster, tmp_path: Path) -> None:
    """Two seeds as one job array; the report groups them as replicates (issue 29 on Slurm)."""
    sweep = tmp_path / "sweep"
    result = run_cli(
        ["-m", *SMALL, "trainer.max_steps=2", "seed=1,2", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = set()
    finals = []
    for point, seed in (("0", 1), ("1", 2)):
        record = summary(sweep / point)
        assert record["status"] == "completed"
        jobs.add(record["slurm"]["array_job_id"])
        assert sacct_states(record["slurm"]["job_id"]) == {"COMPLETED"}
        # the seed the job's worker trained with (its checkpoint's recipe)
        (recipe,) = (sweep / point).glob("checkpoints/step_*/config.json")
        assert json.loads(recipe.read_text())["seed"] == seed, point
        finals.append(record["metrics"])
    assert len(jobs) == 1 and None not in jobs  # one job array
    assert "2 points (2 completed)" in result.stdout
    with open(sweep / "report_seeds.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))  # one configuration, two replicates
    assert (row["n"], row["n_completed"], row["n_failed"]) == ("2", "2", "0")
    values = [m["val_loss"] for m in finals]
    assert float(row["val_loss_mean"]) == pytest.approx(statistics.fmean(values))
    assert float(row["val_loss_std"]) == pytest.approx(statistics.stdev(values))


def test_two_tasks_train_ddp_across_slurm_tasks(slurm_cluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            *SMALL,
            "topology=ddp",
            "launcher.tasks_per_node=2",
            "trainer.max_steps=4",
            "trainer.check_replicas=true",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = summary(sweep / "0")
    assert (record["status"], record["world_size"], record["slurm"]["ntasks"]) == (
        "completed",
        2,
        2,
    )
    assert record["mesh"]["shape"] == [2, 1, 1] and record["backend"] == "gloo"
    steps = read_jsonl(sweep / "0" / "steps.jsonl")
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert all(s["replica_max_diff"] == 0.0 for s in steps)
    assert sorted(p.name for p in (sweep / "0").glob("train_rank*.log")) == [
        "train_rank0.log",
        "train_rank1.log",
    ]


def test_requeue_mid_training_resumes_and_loses_no_step(slurm_cluster, tmp_path: Path) -> None:
    """One run through the scheduler, requeued mid-training: the SIGTERM of the requeue is
    handled, the job resumes and completes on the trajectory of the same run uninterrupted.
    The same job shows what a plain run through the scheduler shows the user (what the job
    asks for, its end and its Slurm log, found from the run directory): an uninterrupted
    job, once a test of its own, ran the same path up to the requeue."""
    args = [*SMALL, "trainer.max_steps=24", "trainer.checkpoint_interval=5", "data.train_size=1024"]
    reference = tmp_path / "reference"  # the same run, uninterrupted, in this process's host
    local = run_cli(
        [*[a for a in args if not a.startswith("launcher")], f"hydra.run.dir={reference}"],
        cwd=tmp_path,
        # the job's task has one CPU (launcher.cpus_per_task=1), so one thread: so has this run
        env={"OMP_NUM_THREADS": "1"},
    )
    assert local.returncode == 0, local.stderr[-3000:]

    sweep = tmp_path / "sweep"
    log = tmp_path / "login.log"
    with open(log, "w") as output:  # a file: an unread pipe would fill up and block
        proc = processes.spawn(
            [CLI, *args, f"hydra.sweep.dir={sweep}"],
            cwd=tmp_path,
            env=cli_env(),
            stdout=output,
            stderr=output,
        )
    steps = sweep / "0" / "steps.jsonl"
    deadline = time.time() + 240
    while not (steps.exists() and len(steps.read_text().splitlines()) >= 8):
        assert time.time() < deadline and proc.poll() is None, (
            "the job did not start training: " + log.read_text()[-3000:]
        )
        time.sleep(0.2)
    job = summary(sweep / "0")["slurm"]["job_id"]
    requeue = processes.run(["scontrol", "requeue", job], timeout=30)
    assert requeue.returncode == 0, requeue.stderr
    start_now_when_pending(job, proc, time.time() + 120)  # not the test cluster's 20 s BeginTime
    login_ended_well(proc, 300, job, sweep, log)
    record = summary(sweep / "0")
    assert (record["status"], record["metrics"]["steps"], record["resumes"]) == ("completed", 24, 1)
    assert record["slurm"]["restart_count"] == 1
    assert sacct_states(job) == {"COMPLETED"}
    said = log.read_text()
    assert f"Slurm job {job} completed, {sweep / '0'}" in said
    # the submission says what the job asks for, and that an SNN job asking no GPU trains on CPUs
    assert "Slurm job: 1 node(s) x 1 task(s), no GPU (launcher.gpus_per_node=0)" in said
    assert "warning: launcher.gpus_per_node=0: the job asks Slurm for no GPU" in said
    assert Path(record["slurm"]["stdout"]).is_file()  # Slurm's log, found from the run dir
    assert (sweep / "0" / "checkpoints").is_dir() and (sweep / "0" / "metrics.jsonl").exists()
    # The SIGTERM of the requeue was handled: the ranks stopped and saved before being killed.
    assert "stopping at step" in (sweep / "0" / "train_rank0.log").read_text()
    losses = [s["loss"] for s in read_jsonl(steps)]
    expected = [s["loss"] for s in read_jsonl(reference / "steps.jsonl")]
    assert losses == pytest.approx(expected, rel=1e-6)  # each step once, same trajectory


def test_failed_job_is_reported_and_the_others_complete(
    slurm_cluster, tmp_path: Path, imagefolder_session: Path
) -> None:
    # the broken point passes validation and fails in its job: its images are not images
    good, broken = imagefolder_session, unreadable_imagefolder(tmp_path / "broken")
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            "-m",
            *SLURM,
            "data=imagefolder",
            "data.num_classes=10",
            "data.image_size=32",
            "trainer.max_steps=2",
            f"data.root={good},{broken}",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 1
    ok, failed = summary(sweep / "0"), summary(sweep / "1")
    assert ok["status"] == "completed"
    assert failed["status"] == "failed" and "cannot identify image file" in failed["error"]
    assert "FAILED point 1" in result.stdout and "Slurm log:" in result.stdout
