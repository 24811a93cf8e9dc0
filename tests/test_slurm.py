"""Slurm through submitit against a real single-node cluster started by scripts/slurm."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from .conftest import NO_SPIKES, read_jsonl, run_cli, sacct_states, unreadable_imagefolder

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SLURM = [
    "model.time_steps=2",
    "trainer.batch_size=8",
    "trainer.log_every_n_steps=1",
    "launcher=slurm",
    "launcher.mem_gb=4",
    "launcher.cpus_per_task=1",
    *NO_SPIKES,  # no test here reads spike figures
]
SMALL = ["data=synthetic", "data.train_size=256", "data.val_size=64", *SLURM]


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
