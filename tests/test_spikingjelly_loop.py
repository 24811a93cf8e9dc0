"""SpikingJelly's own `train_classification` runs here, on CPU ranks over gloo, for every
topology, and through Slurm as through torchrun.

Every run goes through the installed CLI and real torchrun ranks, once per topology
(module-scoped; FSDP2 x TP is the session's shared run of test_multinode.py's config), and every
assertion reads those runs: the summary (engine, device, ranks), the library's own `step_N/`
DCP checkpoints, steps.jsonl and metrics.jsonl.

The config makes differences visible: SGD with momentum (a wrong gradient scale carries into
every later step), 36 training images in batches of 8 (a short last batch: an epoch mean
weighted by samples differs from a mean over steps), two epochs (the sampler's per-epoch
reshuffle and the epoch boundary), a checkpoint every 2 steps.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from .conftest import CLI, NO_SPIKES, REPO, SharedRuns, cli_env, read_jsonl, run_cli
from .support import processes
from .test_multinode import FSDP2_TP_ONE_NODE, FSDP2_TP_TWO_NODES

pytestmark = [pytest.mark.slow, pytest.mark.dist]

BASE = [
    "data=synthetic",
    "data.train_size=36",
    "data.val_size=32",
    "model.time_steps=2",
    "optimizer=sgd",
    "optimizer.lr=0.05",
    "trainer.batch_size=8",
    "trainer.epochs=2",
    "trainer.log_every_n_steps=1",
    "trainer.checkpoint_interval=2",
    "trainer.keep_checkpoints=2",
    "seed=3",
    # No assertion here reads spikes.json: the spike counters' cost (~2 s of CPU a 2-rank run,
    # measured 2026-12-07) is left to test_topologies.py and test_spikes.py, which check them.
    *NO_SPIKES,
]
TWO = ["launcher=torchrun", "launcher.nproc_per_node=2"]
TOPOLOGIES = {
    "single": [],
    "ddp": ["topology=ddp", *TWO, "trainer.check_replicas=true"],
    "fsdp2": ["topology=fsdp2", *TWO],
    "channel_tp": ["topology=channel_tp", *TWO],
    "pp": ["topology=pp", *TWO, "topology.pipeline_microbatches=1"],
}
# FSDP2 x channel TP on 4 ranks is the session's run of test_multinode.py's config
# (conftest.SharedRuns; test_topologies.py reads it too): 128 images, one epoch of 8 steps, a
# checkpoint every 4. A 4-rank run of this file's config would add ~30 CPU-s to the suite for
# what the 2-rank topologies above already show of the epochs and the short last batch.
SHARED = "fsdp2_tp"
# Same config, same data order, same reductions. Measured: parameters bit-identical after every
# topology's run, epoch metrics within 5.4e-8 (the epoch mean's summation order); asked: 1e-4.
REL = 1e-6


def python_path() -> str:
    """The repo (this test package: tests.spikingjelly_support) after whatever is set."""
    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)


class Runs:
    def __init__(self, root: Path, shared: SharedRuns) -> None:
        self.root = root
        self.shared = shared
        self.done: dict[str, Path] = {}

    def get(self, topology: str) -> Path:
        if topology == SHARED:
            return self.shared.get(SHARED, FSDP2_TP_ONE_NODE)
        if topology not in self.done:
            run_dir = self.root / topology
            result = run_cli(
                [*BASE, *TOPOLOGIES[topology], f"hydra.run.dir={run_dir}"],
                cwd=self.root,
                timeout=400,
                env={"PYTHONPATH": python_path()},
            )
            assert result.returncode == 0, f"{topology}:\n{result.stderr[-4000:]}"
            self.done[topology] = run_dir
        return self.done[topology]

    def summary(self, topology: str) -> dict:
        return json.loads((self.get(topology) / "summary.json").read_text())


@pytest.fixture(scope="module")
def runs(module_tmp: Callable[[str], Path], shared_runs: SharedRuns) -> Runs:
    return Runs(module_tmp("spikingjelly_loop"), shared_runs)


def sizes(run_dir: Path) -> tuple[int, int, int, int]:
    """(training images, batch a rank, epochs, checkpoint interval) from the run's own resolved
    config: this file's BASE for its topologies, test_multinode.py's for the shared FSDP2 x TP
    run, so that the step and checkpoint arithmetic below holds for both."""
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    trainer = config["trainer"]
    return (
        config["data"]["train_size"],
        trainer["batch_size"],
        trainer["epochs"],
        trainer["checkpoint_interval"],
    )


def newest(folder: Path) -> Path:
    return sorted(p for p in folder.iterdir() if p.name.startswith("step_"))[-1]


def same_trajectory(run: Path, reference: Path) -> float:
    """`run` took `reference`'s steps: the same loss at every step and, per epoch, the same
    train loss, val loss and accuracy (rel REL). Returns the largest relative difference."""
    worst = 0.0
    mine, theirs = read_jsonl(run / "steps.jsonl"), read_jsonl(reference / "steps.jsonl")
    assert [s["step"] for s in mine] == [s["step"] for s in theirs]
    for a, b in zip(mine, theirs, strict=True):
        worst = max(worst, abs(a["loss"] - b["loss"]) / abs(b["loss"]))
        assert a["loss"] == pytest.approx(b["loss"], rel=REL), (run, a["step"])
    mine, theirs = read_jsonl(run / "metrics.jsonl"), read_jsonl(reference / "metrics.jsonl")
    assert [(e["epoch"], e["step"]) for e in mine] == [(e["epoch"], e["step"]) for e in theirs]
    for a, b in zip(mine, theirs, strict=True):
        for key in ("train_loss", "val_loss", "val_accuracy"):
            worst = max(worst, abs(a[key] - b[key]) / max(abs(b[key]), 1e-12))
            assert a[key] == pytest.approx(b[key], rel=REL), (run, a["epoch"], key)
    return worst


@pytest.mark.parametrize("topology", [*TOPOLOGIES, SHARED])
def test_spikingjellys_loop_runs_each_topology_on_cpu_ranks(
    runs: Runs, topology: str, figures
) -> None:
    summary = runs.summary(topology)
    world = summary["world_size"]
    assert summary["status"] == "completed", summary.get("error")
    assert (summary["engine"], summary["device"], summary["backend"]) == (
        "spikingjelly",
        "cpu",
        "gloo",
    )
    plan = json.loads((runs.get(topology) / "plan.json").read_text())
    assert (plan["engine"], plan["device"]) == ("spikingjelly", "cpu")
    metrics = summary["metrics"]
    dp = summary["mesh"]["shape"][0]
    _, pipeline, tensor = summary["mesh"]["shape"]
    images, batch, epochs, interval = sizes(runs.get(topology))
    # PP drops the last, short batch
    steps_per_epoch = -(-images // dp // batch) if pipeline == 1 else images // batch
    assert metrics["steps"] == epochs * steps_per_epoch
    assert metrics["train_loss_kind"] == "last epoch mean"
    # Each rank ran, where the mesh says, holding what its topology gives it.
    ranks = summary["ranks"]
    assert [r["rank"] for r in ranks] == list(range(world))
    for placement in ranks:
        assert placement["parameters_local"] > 0
        if summary["topology"] == "fsdp2":
            assert placement["dtensor_parameters"] > 0
            assert placement["parameters_local"] < placement["parameters_global"]
        if tensor > 1 or pipeline > 1:  # a shard or a stage, not the whole model
            assert placement["parameters_local"] < summary["parameters"]
    # The library's own checkpoints: complete (.metadata in every (pp, tp) folder), the last
    # step saved, only the newest keep_checkpoints=2 left.
    folders = sorted((runs.get(topology) / "checkpoints").iterdir())
    assert [f.name for f in folders] == [
        f"step_{step:08d}" for step in (metrics["steps"] - interval, metrics["steps"])
    ] or [f.name for f in folders] == [
        f"step_{step:08d}" for step in (metrics["steps"] - 1, metrics["steps"])
    ]
    for folder in folders:
        shards = sorted(p.name for p in folder.glob("pp_*_tp_*"))
        assert shards == [f"pp_{p:04d}_tp_{t:04d}" for p in range(pipeline) for t in range(tensor)]
        assert all((folder / shard / ".metadata").is_file() for shard in shards)
    steps = read_jsonl(runs.get(topology) / "steps.jsonl")
    assert [s["step"] for s in steps] == list(range(1, metrics["steps"] + 1))
    if topology == "ddp":  # check_replicas, through the step hook
        assert all(s["replica_max_diff"] == 0.0 for s in steps)
    figures(wall_s=summary["wall_time_s"], images_per_second=round(metrics["images_per_second"], 1))


def test_a_killed_rank_restarts_and_resumes_from_the_librarys_checkpoint(
    runs: Runs, figures
) -> None:
    """torchrun max_restarts=1: rank 1 is SIGKILLed at the start of step 5 (its 27th training
    sample: 18 in epoch 1, 8 in step 4) in the first attempt. Every rank restarts, rank 0
    picks the newest complete `step_N/` (step 4, or step 2 if step 4's writer was killed
    before `.metadata`: skipped with one line) and the run ends on the uninterrupted run's
    trajectory: the same loss at each step, once, and the same validation."""
    reference = runs.get("ddp")
    run_dir = runs.root / "spikingjelly-ddp-killed"
    result = run_cli(
        [
            *BASE,
            *TOPOLOGIES["ddp"],
            "launcher.max_restarts=1",
            "data.builder=tests.spikingjelly_support.build_killing_datasets",
            "+data.kill_rank=1",
            "+data.kill_at_fetch=27",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=runs.root,
        timeout=400,
        env={"PYTHONPATH": python_path()},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert (summary["restarts"], summary["resumes"]) == (1, 1)
    resumed = Path(summary["resumed_from"]).name
    assert resumed in ("step_00000004", "step_00000002"), resumed
    # Each step once with the uninterrupted run's loss, and each epoch's record its train
    # loss, val loss and accuracy: the resumed checkpoint is mid-epoch either way (step 4 of
    # epoch 2, or step 2 of epoch 1), so that epoch's mean holds the loss before the resume,
    # carried once over both data-parallel ranks.
    same_trajectory(run_dir, reference)
    assert summary["metrics"]["train_loss"] == pytest.approx(
        runs.summary("ddp")["metrics"]["train_loss"], rel=REL
    )
    figures(resumed_from=resumed, wall_s=summary["wall_time_s"])


# --- the same loop through Slurm ------------------------------------------------------------

SLURM = ["launcher=slurm", "launcher.mem_gb=2", "launcher.cpus_per_task=1"]
SWEPT = ("ddp", "fsdp2", "channel_tp", "pp")  # points 0-3 of one array, two tasks each


@pytest.mark.slurm
def test_spikingjellys_loop_through_slurm_follows_its_torchrun_runs(
    slurm_cluster, runs: Runs, shared_runs: SharedRuns, tmp_path: Path, figures
) -> None:
    """Every topology's Slurm job on SpikingJelly's loop: one `-m` array of ddp, fsdp2,
    channel_tp and pp (two tasks each) and, while it runs, fsdp2 x channel_tp over two Slurm
    nodes (dp=2 across, tp=2 within). Each point's steps, epochs and summary equal the torchrun
    run of the same config (rank i is Slurm task i, nothing else differs), and the sweep report
    reads the library loop's points. The two-node job and its torchrun run are the session's
    (conftest.SharedRuns), test_multinode.py's config: one job of 4 ranks over two nodes is
    trained once a session, for both files."""
    env = cli_env({"PYTHONPATH": python_path()})
    sweep, log = tmp_path / "sweep", tmp_path / "sweep.log"
    command = [
        CLI,
        "-m",
        *BASE,
        *SLURM,
        "launcher.tasks_per_node=2",
        f"topology={','.join(SWEPT)}",
        "topology.pipeline_microbatches=1",
        f"hydra.sweep.dir={sweep}",
    ]
    with open(log, "w") as stderr:
        login = processes.spawn(command, cwd=tmp_path, env=env, stderr=stderr)
    pair = shared_runs.get("fsdp2_tp_two_nodes", FSDP2_TP_TWO_NODES, sweep=True)
    pair_reference = runs.get(SHARED)
    try:
        code = login.wait(timeout=400)
    except subprocess.TimeoutExpired:
        login.kill()
        raise AssertionError(log.read_text()[-3000:]) from None
    assert code == 0, log.read_text()[-3000:]

    worst = 0.0
    points = {topology: sweep / str(i) for i, topology in enumerate(SWEPT)}
    points["fsdp2_tp"] = pair
    references = {topology: runs.get(topology) for topology in SWEPT}
    references["fsdp2_tp"] = pair_reference
    for topology, point in points.items():
        record = json.loads((point / "summary.json").read_text())
        reference = json.loads((references[topology] / "summary.json").read_text())
        assert record["status"] == "completed", (topology, record.get("error"))
        assert (record["engine"], record["device"], record["backend"]) == (
            "spikingjelly",
            "cpu",
            "gloo",
        )
        assert (record["world_size"], record["mesh"]["shape"]) == (
            reference["world_size"],
            reference["mesh"]["shape"],
        )
        assert record["slurm"]["job_id"] and [r["rank"] for r in record["ranks"]] == list(
            range(record["world_size"])
        )
        worst = max(worst, same_trajectory(point, references[topology]))
    nodes = {r["node"] for r in json.loads((pair / "summary.json").read_text())["ranks"]}
    assert len(nodes) == 2, nodes  # the fsdp2 x tp job really spans two Slurm nodes

    with open(sweep / "report.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [(row["point"], row["topology"], row["status"]) for row in table] == [
        (str(i), topology, "completed") for i, topology in enumerate(SWEPT)
    ]
    for row in table:
        record = json.loads((sweep / row["point"] / "summary.json").read_text())
        assert float(row["val_accuracy"]) == pytest.approx(record["metrics"]["val_accuracy"])
    markdown = (sweep / "report.md").read_text()
    assert "4 completed" in markdown and "(learning_curves.png)" in markdown
    assert (sweep / "learning_curves.png").stat().st_size > 10_000
    figures(max_rel_diff_from_torchrun=f"{worst:.2e}")
