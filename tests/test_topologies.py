"""The topologies are real: real torchrun processes on gloo, compared with a single process.

Every run goes through the installed CLI (`launcher=torchrun` spawns torchrun, which starts the
ranks). Runs are cached per module so each is trained once and asserted on by several tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from .conftest import read_jsonl, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.dist]

# fp32, 16x16 synthetic images, SEW-ResNet18 with T=2: ~0.3 s per step per rank.
BASE = [
    "data=synthetic",
    "data.train_size=256",
    "data.val_size=64",
    "model.time_steps=2",
    "trainer.log_every_n_steps=1",
    "seed=3",
]
# Equivalence runs use SGD: Adam divides by sqrt(v), which turns float reduction-order noise in
# near-zero gradients into lr-sized parameter differences (seen: 16 of 11 M weights off by up
# to 1.5e-4 after 4 steps, with losses still equal to 1e-4). SGD keeps noise at noise level.
COMMON = [
    *BASE,
    "optimizer=sgd",
    "optimizer.lr=0.05",
    "trainer.batch_size=8",
    "trainer.epochs=1",
    "trainer.max_steps=4",
    "trainer.checkpoint_interval=2",
]
TORCHRUN = ["launcher=torchrun", "launcher.nproc_per_node=2"]
RUNS = {
    "single": [],
    "tp": ["topology=channel_tp", *TORCHRUN],
    "ddp": ["topology=ddp", *TORCHRUN, "trainer.check_replicas=true"],
    "fsdp2": ["topology=fsdp2", *TORCHRUN],
    "pp1": ["topology=pp", *TORCHRUN, "topology.pipeline_microbatches=1"],
    "fsdp2_tp": [
        "topology=fsdp2",
        "launcher=torchrun",
        "launcher.nproc_per_node=4",
        "topology.tensor_parallel_size=2",
    ],
}


class Runs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[str, Path] = {}

    def get(self, name: str, args: list[str] | None = None) -> Path:
        if name not in self.done:
            run_dir = self.root / name
            overrides = args if args is not None else [*COMMON, *RUNS[name]]
            result = run_cli([*overrides, f"hydra.run.dir={run_dir}"], cwd=self.root, timeout=900)
            assert result.returncode == 0, f"{name}:\n{result.stderr[-4000:]}"
            self.done[name] = run_dir
        return self.done[name]

    def losses(self, name: str, args: list[str] | None = None) -> list[float]:
        return [r["loss"] for r in read_jsonl(self.get(name, args) / "steps.jsonl")]

    def summary(self, name: str) -> dict:
        return json.loads((self.get(name) / "summary.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("topologies"))


def assert_close(actual: list[float], expected: list[float], rel: float) -> None:
    assert len(actual) == len(expected)
    for step, (a, e) in enumerate(zip(actual, expected, strict=True), start=1):
        assert abs(a - e) <= rel * abs(e), f"step {step}: {a} vs {e} (rel tol {rel})"


def test_summary_records_engine_backend_world_size_and_mesh(runs: Runs) -> None:
    summary = runs.summary("fsdp2_tp")
    assert summary["status"] == "completed"
    assert (summary["engine"], summary["backend"], summary["world_size"]) == ("cpu", "gloo", 4)
    assert summary["mesh"]["shape"] == [2, 1, 2]
    assert summary["mesh"]["data_parallel"] == "fsdp2"
    # One run directory for all ranks: one record, a log per rank, no per-rank Hydra dirs.
    run_dir = runs.get("fsdp2_tp")
    assert sorted(p.name for p in run_dir.glob("train_rank*.log")) == [
        f"train_rank{r}.log" for r in range(4)
    ]
    assert not list(runs.root.glob("outputs"))
    assert len(read_jsonl(run_dir / "steps.jsonl")) == 4  # rank 0 alone writes


def test_channel_tp_matches_single_process_losses_and_merged_parameters(runs: Runs) -> None:
    assert_close(runs.losses("tp"), runs.losses("single"), rel=1e-4)
    from experiments.models.sew_resnet import SEWResNetBuilder, SEWResNetConfig

    def shard(name: str, file: str) -> dict[str, torch.Tensor]:
        path = runs.get(name) / "checkpoints" / "step_00000004" / file
        return torch.load(path, weights_only=True)["model"]

    builder = SEWResNetBuilder(
        SEWResNetConfig(depth=18, num_classes=10, image_size=16, time_steps=2)
    )
    merged = builder.merge_state_dicts(
        [(0, 0, shard("tp", "pp_0000_tp_0000.pt")), (0, 1, shard("tp", "pp_0000_tp_0001.pt"))],
        pipeline_size=1,
        tensor_size=2,
    )
    single = shard("single", "pp_0000_tp_0000.pt")
    assert set(merged) == set(single)
    sharded = [
        n for n, t in shard("tp", "pp_0000_tp_0000.pt").items() if t.shape != single[n].shape
    ]
    assert sharded, "TP must actually shard some tensors"
    for name, tensor in single.items():
        torch.testing.assert_close(merged[name], tensor, rtol=1e-5, atol=1e-6, msg=name)


def test_fsdp2_matches_ddp_at_the_same_data_parallel_size(runs: Runs) -> None:
    assert_close(runs.losses("fsdp2"), runs.losses("ddp"), rel=1e-5)


def test_fsdp2_times_tp_on_four_ranks_matches_fsdp2(runs: Runs) -> None:
    assert_close(runs.losses("fsdp2_tp"), runs.losses("fsdp2"), rel=1e-4)


def test_pipeline_with_one_microbatch_matches_single_process(runs: Runs) -> None:
    assert_close(runs.losses("pp1"), runs.losses("single"), rel=1e-4)


def test_pipeline_with_microbatches_trains(runs: Runs) -> None:
    args = [
        *BASE,
        "topology=pp",
        *TORCHRUN,
        "topology.pipeline_microbatches=2",
        "trainer.batch_size=16",
        "optimizer.lr=3e-3",
        "trainer.max_steps=30",
        "trainer.epochs=2",
    ]
    losses = runs.losses("pp2", args)
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3


def test_ddp_replicas_identical_after_every_step(runs: Runs) -> None:
    """DDP is not compared with the single process: each rank normalises with its own
    BatchNorm statistics (8 images, not 16), so the losses legitimately differ."""
    records = read_jsonl(runs.get("ddp") / "steps.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(r["replica_max_diff"] == 0.0 for r in records)


@pytest.mark.parametrize("name", ["ddp", "fsdp2", "tp", "pp1"])
def test_resumed_run_continues_exactly(runs: Runs, name: str) -> None:
    """Resume from step 2 of the uninterrupted run: same step count, same later losses
    (model, optimizer and data order restored)."""
    start = runs.get(name) / "checkpoints" / "step_00000002"
    losses = runs.losses(f"{name}_resumed", [*COMMON, *RUNS[name], f"resume={start}"])
    summary = json.loads((runs.get(f"{name}_resumed") / "summary.json").read_text())
    assert summary["metrics"]["steps"] == 4
    assert summary["resumes"] == 1
    assert_close(losses, runs.losses(name)[2:], rel=1e-5)


def test_two_rank_ddp_on_digits_reaches_the_main_job_band(runs: Runs, figures) -> None:
    run_dir = runs.get(
        "ddp_digits",
        [*TORCHRUN, "topology=ddp", "trainer.check_replicas=true", "trainer.log_every_n_steps=20"],
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    figures(
        val_accuracy=round(summary["metrics"]["val_accuracy"], 4),
        images_per_second=round(summary["metrics"]["images_per_second"], 1),
        wall_s=summary["wall_time_s"],
        peak_memory_mb_per_rank=metrics[-1]["peak_memory_mb_per_rank"],
    )
    assert summary["metrics"]["val_accuracy"] >= 0.85
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]
    assert len(metrics[-1]["peak_memory_mb_per_rank"]) == 2
    assert all(r["replica_max_diff"] == 0.0 for r in read_jsonl(run_dir / "steps.jsonl"))


def test_multirun_with_torchrun_launches_each_point_once(runs: Runs) -> None:
    """Each sweep point becomes one torchrun job in its own directory; the workers run that
    point only (they get the point's overrides, not the sweep)."""
    sweep_dir = runs.root / "sweep"
    result = run_cli(
        [
            "-m",
            *COMMON,
            "trainer.max_steps=2",
            "topology=ddp",
            *TORCHRUN,
            "optimizer.lr=1e-3,2e-3",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        cwd=runs.root,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]
    for number, lr in (("0", 1e-3), ("1", 2e-3)):
        summary = json.loads((sweep_dir / number / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["world_size"] == 2
        assert f"optimizer.lr={lr}" in summary["overrides"]
        assert not [p for p in (sweep_dir / number).iterdir() if p.is_dir() and p.name.isdigit()]
