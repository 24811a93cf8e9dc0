"""End to end through the installed CLI: resume, reruns, dry runs (the run-directory contract
is read on the main job's run: tests/test_main_job.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import FAST_SINGLE, NO_SPIKES, SharedRuns, read_jsonl, run_cli, run_cli_in_process
from .support import processes

# 16 steps an epoch of batch 8 (128 synthetic images), a small validation set: resume tests
# that stop mid-epoch, at a quarter of the default batch's compute.
SMALL_EPOCHS = [
    "data=synthetic",
    "data.train_size=128",
    "data.val_size=32",
    "model.time_steps=2",
    "trainer.batch_size=8",
    "trainer.log_every_n_steps=1",
    *NO_SPIKES,  # no test here reads spike figures
]


# Two epochs of 16 steps asked, a checkpoint every 4 steps.
MID_EPOCH = [*SMALL_EPOCHS, "trainer.epochs=2", "trainer.checkpoint_interval=4"]


@pytest.fixture(scope="module")
def nine_steps(module_tmp: Callable[[str], Path]) -> Path:
    """MID_EPOCH stopped by max_steps=9 (mid-epoch; the checkpoints of steps 8 and 9 kept): the
    uninterrupted trajectory a resumed run must follow, and (a copy) the run resume=null
    starts over in."""
    root = module_tmp("nine_steps")
    run_dir = root / "run"
    result = run_cli([*MID_EPOCH, "trainer.max_steps=9", f"hydra.run.dir={run_dir}"], cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture
def fast_run(shared_runs: SharedRuns) -> Path:
    """The session's FAST_SINGLE run (its last step, 4, checkpointed), which each test below
    reruns in a copy."""
    return shared_runs.get("fast_single", FAST_SINGLE)


def _copy_of(run_dir: Path, tmp_path: Path) -> Path:
    return SharedRuns.copy(run_dir, tmp_path / "run")


@pytest.mark.slow
def test_rerun_in_a_completed_run_directory_does_not_retrain(
    fast_run: Path, tmp_path: Path
) -> None:
    run_dir = _copy_of(fast_run, tmp_path)
    before = (run_dir / "summary.json").read_text()
    again = run_cli([*FAST_SINGLE, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert again.returncode == 0
    assert "already completed" in again.stdout
    assert (run_dir / "summary.json").read_text() == before


def _mark_interrupted(run_dir: Path) -> None:
    """What a killed run leaves: checkpoints, and a record that is not "completed"."""
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["status"] = "failed"
    summary_path.write_text(json.dumps(summary))


@pytest.mark.slow
def test_resume_from_a_mid_epoch_final_checkpoint_continues_the_trajectory(
    nine_steps: Path, tmp_path: Path
) -> None:
    """max_steps=6 stops mid-epoch (16 steps per epoch); the final checkpoint (not on the
    interval of 4) must record that position, so a longer run continues with the same data."""
    common = MID_EPOCH
    reference = nine_steps
    run_dir = tmp_path / "run"
    first = run_cli([*common, "trainer.max_steps=6", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    _mark_interrupted(run_dir)
    second = run_cli([*common, "trainer.max_steps=9", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["status"] == "completed" and resumed["resumes"] == 1
    assert resumed["resumed_from"].endswith("step_00000006")
    assert resumed["metrics"]["steps"] == 9
    losses = [r["loss"] for r in read_jsonl(run_dir / "steps.jsonl")]
    assert losses == pytest.approx(
        [r["loss"] for r in read_jsonl(reference / "steps.jsonl")], rel=1e-6
    )
    # The epoch's mean training loss is the whole epoch's, the 6 steps before the resume
    # too (their sum carried in the checkpoint), as the uninterrupted run reports it: not
    # the mean of the 3 steps since the resume.
    uninterrupted = json.loads((reference / "summary.json").read_text())["metrics"]
    assert resumed["metrics"]["train_loss"] == pytest.approx(uninterrupted["train_loss"], rel=1e-9)


@pytest.mark.slow
def test_resume_at_the_last_step_still_reports_real_metrics(fast_run: Path, tmp_path: Path) -> None:
    run_dir = _copy_of(fast_run, tmp_path)
    args = [*FAST_SINGLE, f"hydra.run.dir={run_dir}"]
    trained = json.loads((run_dir / "summary.json").read_text())["metrics"]
    _mark_interrupted(run_dir)  # as if killed during the final evaluation
    second = run_cli(args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["resumes"]) == ("completed", 1)
    assert summary["resumed_from"].endswith("step_00000004")
    metrics = summary["metrics"]
    assert metrics["steps"] == 4
    # Nothing left to train: the resumed run evaluates the step-4 weights, the same weights
    # the first run evaluated, so the same figures (not NaN, not zeros).
    assert metrics["val_accuracy"] == pytest.approx(trained["val_accuracy"], abs=1e-6)
    assert metrics["val_loss"] == pytest.approx(trained["val_loss"], rel=1e-5)


@pytest.mark.slow
def test_resume_null_starts_over_and_drops_the_old_checkpoints(
    nine_steps: Path, tmp_path: Path
) -> None:
    run_dir = _copy_of(nine_steps, tmp_path)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step_00000008",
        "step_00000009",
    ]
    long_losses = [r["loss"] for r in read_jsonl(run_dir / "steps.jsonl")]
    short = [*MID_EPOCH, "trainer.max_steps=3", "trainer.checkpoint_interval=2", "resume=null"]
    result = run_cli([*short, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step_00000002",
        "step_00000003",
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["steps"] == 3 and summary.get("resumed_from") is None
    # Started over from step 1: the first steps of the same seed, one record a step.
    records = read_jsonl(run_dir / "steps.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [r["loss"] for r in records] == pytest.approx(long_losses[:3], rel=1e-6)


@pytest.mark.slow
def test_python_dash_m_entry_point_and_dry_run_write_nothing(tmp_path: Path) -> None:
    import sys

    proc = processes.run(
        [sys.executable, "-m", "experiments.train", "dry_run=true"], cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "Run plan" in proc.stdout and "11.18 M parameters" in proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "expect_in_command"),
    [
        (
            ["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"],
            ["torchrun", "--nproc-per-node=2", "--standalone", "-m", "experiments.train"],
        ),
        (
            [
                "topology=fsdp2",
                "launcher=torchrun",
                "launcher.nproc_per_node=4",
                "launcher.nnodes=2",
                "launcher.rdzv_endpoint=node001:29400",
                "topology.tensor_parallel_size=2",
            ],
            ["--nnodes=2", "--rdzv-endpoint=node001:29400"],
        ),
        (
            [
                "model=sew_resnet34",
                "topology=pp",
                "launcher=slurm",
                "launcher.tasks_per_node=2",
                "launcher.partition=gpu",
                "launcher.gpus_per_node=2",
                "trainer.precision=bf16",
            ],
            ["#SBATCH --ntasks-per-node=2", "#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=2"],
        ),
    ],
)
def test_dry_run_json_for_topologies_this_machine_cannot_run(
    tmp_path: Path, args: list[str], expect_in_command: list[str]
) -> None:
    result = run_cli_in_process([*args, "dry_run=json"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    command = "\n".join(plan["command"])
    for fragment in expect_in_command:
        assert fragment in command
    library = plan["library_config"]
    assert library["_target_"].endswith("TrainingConfig")
    dp, pp, tp = plan["mesh"]["shape"]
    assert (library["pipeline_parallel_size"], library["tensor_parallel_size"]) == (pp, tp)
    assert dp * pp * tp == plan["world_size"]
    assert plan["batch"]["global"] == plan["batch"]["per_rank"] * dp
    assert list(tmp_path.iterdir()) == []


def test_cuda_path_dry_run_shows_the_exact_library_config_and_sbatch(tmp_path: Path) -> None:
    """This machine has no GPU; the CUDA path is covered by what it would hand over:
    SpikingJelly's train_classification gets this TrainingConfig on 8 GPU ranks."""
    from spikingjelly.activation_based.distributed.vision import TrainingConfig

    args = [
        "model=sew_resnet34",
        "topology=fsdp2",
        "topology.tensor_parallel_size=2",
        "launcher=slurm",
        "launcher.nodes=2",
        "launcher.tasks_per_node=4",
        "launcher.gpus_per_node=4",
        "launcher.partition=gpu",
        "trainer.precision=bf16",
        "data.image_size=32",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",  # launcher=slurm submits as a one-point sweep
        "dry_run=json",
    ]
    result = run_cli_in_process(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["engine"], plan["device"], plan["backend"]) == ("spikingjelly", "cuda", "nccl")
    assert plan["world_size"] == 8 and plan["mesh"]["shape"] == [4, 1, 2]
    config = TrainingConfig.from_dict(plan["library_config"])  # SpikingJelly accepts it as is
    assert config.data_parallel == "fsdp2" and config.tensor_parallel_size == 2
    assert config.precision.mode == "bf16"
    assert config.model.image_size == 32 and config.model.num_classes == 10
    assert config.dataset_builder == "experiments.data.digits.build_digits_datasets"
    assert str(config.checkpoint_dir) == str(tmp_path / "sweep" / "0" / "checkpoints")
    sbatch = "\n".join(plan["command"])
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=60",
    ):
        assert line in sbatch
    assert list(tmp_path.iterdir()) == []  # nothing queued, nothing written


def test_digits_are_sklearns_to_the_last_value_without_importing_sklearn() -> None:
    """Every SNN rank builds the digits split; reading sklearn's bundled file directly saves
    each process scikit-learn's import (~1.1 s idle, ~2 s under load), and must give exactly
    what `load_digits()` gives."""
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from experiments.data.digits import DIGITS_TOTAL, load_digits_arrays

    images, targets = load_digits_arrays()
    reference = load_digits()
    assert images.shape == (DIGITS_TOTAL, 8, 8) and images.dtype == reference.images.dtype
    assert np.array_equal(images, reference.images)
    assert targets.dtype == reference.target.dtype and np.array_equal(targets, reference.target)
    probe = (
        "import sys\n"
        "from experiments.data.digits import build_digits_datasets\n"
        "train, validation = build_digits_datasets()\n"
        f"assert len(train) + len(validation) == {DIGITS_TOTAL}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))\n"
    )
    result = processes.run([sys.executable, "-c", probe], timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"  # neither scikit-learn nor scipy was imported
