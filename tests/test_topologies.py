"""The topologies are real: real torchrun processes on gloo, compared with a single process.

Every run goes through the installed CLI (`launcher=torchrun` spawns torchrun, which starts the
ranks). Runs are cached per module so each is trained once and asserted on by several tests.

What proves a topology, not just a few losses:
- 8 steps of SGD with momentum (AdamW's per-parameter normalisation hides a wrong gradient
  scale; momentum carries any error into every later step);
- every loss AND every tensor of the final checkpoint compared with the reference topology;
- the topology really happened: each rank's placement in summary.json (FSDP2 parameters are
  DTensors holding about 1/dp of the model, TP and PP ranks hold less than the model), the TP
  shards' shapes, the PP stages' disjoint parameter sets.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from experiments.snn.engines.spikingjelly_checkpoints import read_shard

from .conftest import NO_SPIKES, REPO, SharedRuns, on_python_path, read_jsonl, run_cli
from .recorded_data import read_indices

pytestmark = [pytest.mark.slow, pytest.mark.dist]

STEPS = 8
# fp32, 16x16 synthetic images, SEW-ResNet18 with T=2: ~0.3 s per step per rank.
BASE = [
    "data=synthetic",
    "data.train_size=128",
    "data.val_size=64",
    "model.time_steps=2",
    "trainer.log_every_n_steps=1",
    "seed=3",
]
# SGD (conf/optimizer/sgd.yaml: momentum 0.9, weight decay 1e-4). With 8 images a rank, a
# 2-rank data-parallel epoch is exactly 8 steps (128 images), which the sharding test reads.
COMMON = [
    *BASE,
    "optimizer=sgd",
    "optimizer.lr=0.05",
    "trainer.batch_size=8",
    "trainer.epochs=1",
    f"trainer.max_steps={STEPS}",
    "trainer.checkpoint_interval=4",
]
TWO = ["launcher=torchrun", "launcher.nproc_per_node=2"]
FOUR = ["launcher=torchrun", "launcher.nproc_per_node=4"]
RECORDED = ["data.builder=tests.recorded_data.build_recorded_datasets"]
# The runs no test reads spike figures of, nor continues by the same command, measure none (a
# run's final evaluation counts spikes on 32 images, ~2 CPU-s a 2-rank run).
RUNS = {
    "single": [],
    "tp": ["topology=channel_tp", *TWO],
    "ddp": ["topology=ddp", *TWO, "trainer.check_replicas=true"],
    "fsdp2": ["topology=fsdp2", *TWO],
    "pp1": ["topology=pp", *TWO, "topology.pipeline_microbatches=1"],
    "fsdp2_tp": ["topology=fsdp2", *FOUR, "topology.tensor_parallel_size=2", *NO_SPIKES],
    "ddp_tp": ["topology=ddp", *FOUR, "topology.tensor_parallel_size=2", *NO_SPIKES],
    # trainer.global_batch_size=16 on 4 ranks: 4 a rank, the global batch of the 2-rank runs
    "ddp4": ["topology=ddp", *FOUR, "trainer.global_batch_size=16"],
    "ddp_pp": [
        "topology=ddp",
        *FOUR,
        "topology.pipeline_parallel_size=2",
        "topology.pipeline_microbatches=1",
        *NO_SPIKES,
    ],
}
# Runs whose ranks record each training sample index they read (tests/recorded_data.py).
RECORD_DIRS = {"ddp_tp": "indices", "ddp4": "indices_ddp4"}
MODEL_DIMS = {"depth": 18, "num_classes": 10, "image_size": 16, "time_steps": 2}
# The DDP run is point 0 of a torchrun sweep over the seed alone (COMMON's seed first), which
# test_multirun_... reads: the sweep adds one torchrun job to the suite, not two (a job costs
# ~15 s of start-up on 2 cores, its 8 steps ~2 s).
SWEPT = "ddp"
# The runs others are compared with, several times each (Runs.state keeps their states).
REFERENCES = {"single", "ddp", "fsdp2", "tp", "pp1"}
# Runs another file reads too, trained once a session by whichever asks first
# (conftest.SharedRuns): test_multinode.py compares its two-node FSDP2 x TP Slurm job with
# this run, of the same config on one node.
SHARED = {"fsdp2_tp"}
SWEEP_SEEDS = (3, 4)


# The 4-rank TP x DDP run takes its learning rate from a user's own experiment in a
# `--config-dir` folder (docs/configuration.md): every torchrun rank must be handed the flag
# (a rank without it cannot compose `experiment=mine`), and without the file's lr the run
# would train at conf/optimizer/sgd.yaml's 0.1, off the DDP run it is compared with.
USER_EXPERIMENT = """\
# @package _global_
optimizer:
  lr: 0.05
"""
FROM_CONFIG_DIR = {"ddp_tp"}


class Runs:
    def __init__(self, root: Path, shared: SharedRuns) -> None:
        self.root = root
        self.shared = shared
        self.done: dict[str, Path] = {}
        self.stdout: dict[str, str] = {}
        self.states: dict[tuple[str, int], dict[str, torch.Tensor]] = {}
        self.config_dir = root / "myconf"
        (self.config_dir / "experiment").mkdir(parents=True, exist_ok=True)
        (self.config_dir / "experiment" / "mine.yaml").write_text(USER_EXPERIMENT)

    def get(self, name: str, args: list[str] | None = None) -> Path:
        if name == SWEPT and args is None:
            self.sweep()
        if name not in self.done:
            run_dir = self.root / name
            overrides = args if args is not None else [*COMMON, *RUNS[name]]
            if args is None and name in FROM_CONFIG_DIR:
                overrides = [a for a in overrides if not a.startswith("optimizer.lr=")]
                overrides = ["--config-dir", str(self.config_dir), "experiment=mine", *overrides]
            if name in RECORD_DIRS:  # the same data, with each rank's sample indices recorded
                overrides = [*overrides, *self.recorded(name)]
            if args is None and name in SHARED:
                self.done[name] = self.shared.get(name, overrides)
                return self.done[name]
            result = run_cli(
                [*overrides, f"hydra.run.dir={run_dir}"],
                cwd=self.root,
                timeout=400,
                env={"PYTHONPATH": on_python_path(str(REPO))},
            )
            assert result.returncode == 0, f"{name}:\n{result.stderr[-4000:]}"
            self.done[name] = run_dir
            self.stdout[name] = result.stdout
        return self.done[name]

    def sweep(self) -> Path:
        """The DDP run made as point 0 of a `-m` sweep over seeds (see SWEEP_SEEDS)."""
        sweep_dir = self.root / "sweep"
        if SWEPT not in self.done:
            overrides = [a for a in COMMON if not a.startswith("seed=")]
            seeds = ",".join(map(str, SWEEP_SEEDS))
            result = run_cli(
                ["-m", *overrides, *RUNS[SWEPT], f"seed={seeds}", f"hydra.sweep.dir={sweep_dir}"],
                cwd=self.root,
                timeout=400,
                env={"PYTHONPATH": on_python_path(str(REPO))},
            )
            assert result.returncode == 0, f"sweep:\n{result.stderr[-4000:]}"
            self.done[SWEPT] = sweep_dir / "0"
            self.stdout[SWEPT] = result.stdout
        return sweep_dir

    def recorded(self, name: str) -> list[str]:
        return [*RECORDED, f"+data.record_dir={self.root / RECORD_DIRS[name]}"]

    def losses(self, name: str, args: list[str] | None = None) -> list[float]:
        return [r["loss"] for r in read_jsonl(self.get(name, args) / "steps.jsonl")]

    def summary(self, name: str, args: list[str] | None = None) -> dict:
        return json.loads((self.get(name, args) / "summary.json").read_text())

    def state(self, name: str, step: int = STEPS) -> dict[str, torch.Tensor]:
        """The run's final model state, merged from its PP/TP shards into the canonical names
        by SpikingJelly's own merge (which refuses shards that overlap or leave a gap). The
        references' states are kept: each is compared with up to 5 runs, and a read takes ~1 s
        (~45 MB a state)."""
        if (name, step) not in self.states:
            merged = self._merged_state(name, step)
            if name not in REFERENCES:
                return merged
            self.states[name, step] = merged
        return self.states[name, step]

    def _merged_state(self, name: str, step: int) -> dict[str, torch.Tensor]:
        folder = self.get(name) / "checkpoints" / f"step_{step:08d}"
        _, pipeline, tensor = self.summary(name)["mesh"]["shape"]
        shards = [
            (pp, tp, self.shard(name, pp, tp, step))
            for pp in range(pipeline)
            for tp in range(tensor)
        ]
        assert len(list(folder.glob("pp_*_tp_*"))) == len(shards), folder
        return builder().merge_state_dicts(shards, pipeline_size=pipeline, tensor_size=tensor)

    def shard(self, name: str, pp: int, tp: int, step: int = STEPS) -> dict[str, torch.Tensor]:
        """One (pp, tp) folder of SpikingJelly's DCP checkpoint: its model state."""
        folder = self.get(name) / "checkpoints" / f"step_{step:08d}"
        return read_shard(folder / f"pp_{pp:04d}_tp_{tp:04d}")["model"]


def builder():
    from experiments.snn.models.sew_resnet import SEWResNetBuilder, SEWResNetConfig

    return SEWResNetBuilder(SEWResNetConfig(**MODEL_DIMS))


@pytest.fixture(scope="module")
def runs(module_tmp: Callable[[str], Path], shared_runs: SharedRuns) -> Runs:
    return Runs(module_tmp("topologies"), shared_runs)


def assert_close(actual: list[float], expected: list[float], rel: float) -> None:
    assert len(actual) == len(expected)
    for step, (a, e) in enumerate(zip(actual, expected, strict=True), start=1):
        assert abs(a - e) <= rel * abs(e), f"step {step}: {a} vs {e} (rel tol {rel})"


def assert_same_state(
    actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], rtol: float, atol: float
) -> None:
    assert set(actual) == set(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=rtol, atol=atol, msg=name)


def assert_equivalent(runs: Runs, name: str, reference: str, rel: float, atol: float) -> None:
    losses = runs.losses(name)
    assert len(losses) == STEPS
    assert_close(losses, runs.losses(reference), rel=rel)
    assert_same_state(runs.state(name), runs.state(reference), rtol=rel, atol=atol)


def placements(runs: Runs, name: str) -> list[dict]:
    summary = runs.summary(name)
    ranks = summary["ranks"]
    assert [r["rank"] for r in ranks] == list(range(summary["world_size"]))
    return ranks


# --- what every run records ---------------------------------------------------------------


def test_summary_records_engine_backend_world_size_mesh_and_placement(runs: Runs) -> None:
    summary = runs.summary("fsdp2_tp")
    assert summary["status"] == "completed"
    assert (summary["engine"], summary["backend"], summary["world_size"]) == (
        "spikingjelly",
        "gloo",
        4,
    )
    assert summary["mesh"]["shape"] == [2, 1, 2]
    assert summary["mesh"]["data_parallel"] == "fsdp2"
    # SpikingJelly's rank layout: tp varies fastest, then pp, then dp.
    assert [r["coordinates"] for r in summary["ranks"]] == [
        {"dp": dp, "pp": 0, "tp": tp} for dp in (0, 1) for tp in (0, 1)
    ]
    assert [r["local_rank"] for r in summary["ranks"]] == [0, 1, 2, 3]
    assert all(r["node"] for r in summary["ranks"])
    # One run directory for all ranks: one record, a log per rank, no per-rank Hydra dirs.
    run_dir = runs.get("fsdp2_tp")
    assert sorted(p.name for p in run_dir.glob("train_rank*.log")) == [
        f"train_rank{r}.log" for r in range(4)
    ]
    assert not list(run_dir.parent.glob("outputs"))  # the folder the run started in
    assert len(read_jsonl(run_dir / "steps.jsonl")) == STEPS  # rank 0 alone writes


# --- equivalence: every loss and the final parameters -------------------------------------


def test_channel_tp_matches_single_process_and_really_shards(runs: Runs) -> None:
    assert_equivalent(runs, "tp", "single", rel=1e-4, atol=1e-5)
    single = runs.state("single")
    total = sum(t.numel() for t in single.values())
    sharded = 0
    for tp in (0, 1):
        for name, tensor in runs.shard("tp", 0, tp).items():
            full = single[name].shape
            if tensor.shape == full:
                continue
            # exactly one dimension holds 1/tp of the channels
            halved = [d for d in range(tensor.ndim) if tensor.shape[d] * 2 == full[d]]
            assert len(halved) == 1, f"{name}: {tuple(tensor.shape)} vs {tuple(full)}"
            assert all(tensor.shape[d] == full[d] for d in range(tensor.ndim) if d != halved[0])
            sharded += tensor.numel()
    assert sharded / total > 0.9, f"only {sharded / total:.0%} of the model is TP-sharded"
    full_count = runs.summary("tp")["parameters"]
    for rank in placements(runs, "tp"):
        assert rank["parameters_local"] < 0.6 * full_count, rank


def test_an_experiment_in_a_config_dir_reaches_every_rank_without_a_reinstall(runs: Runs) -> None:
    """The 4 ranks of the TP x DDP run composed `experiment=mine` from the user's folder (its
    lr held: test_tp_times_ddp... compares the run with DDP at 0.05), the record keeps the
    flag, and the command printed to resume the run repeats it."""
    summary = runs.summary("ddp_tp")
    assert (summary["status"], summary["world_size"]) == ("completed", 4)
    config = yaml.safe_load((runs.get("ddp_tp") / ".hydra" / "config.yaml").read_text())
    assert config["optimizer"]["lr"] == 0.05  # the user's, not sgd.yaml's 0.1
    flag = f"--config-dir {runs.config_dir} experiment=mine"
    assert flag in summary["resume_command"], summary["resume_command"]
    assert f"--config-dir {runs.config_dir}" in runs.stdout["ddp_tp"].splitlines()[0]


def test_fsdp2_matches_ddp_and_shards_parameters_over_dp(runs: Runs) -> None:
    assert_equivalent(runs, "fsdp2", "ddp", rel=1e-5, atol=1e-6)
    full_count = runs.summary("fsdp2")["parameters"]
    for rank in placements(runs, "fsdp2"):
        assert rank["dtensor_parameters"] > 0, f"rank {rank['rank']}: no DTensor parameters"
        assert rank["parameters_global"] == full_count
        assert rank["parameters_local"] < 0.6 * full_count, rank
    for rank in placements(runs, "ddp"):  # the reference holds whole replicas
        assert rank["dtensor_parameters"] == 0
        assert rank["parameters_local"] == full_count


def test_fsdp2_times_tp_on_four_ranks_matches_fsdp2(runs: Runs) -> None:
    assert_equivalent(runs, "fsdp2_tp", "fsdp2", rel=1e-4, atol=1e-5)
    full_count = runs.summary("fsdp2_tp")["parameters"]
    for rank in placements(runs, "fsdp2_tp"):
        assert rank["dtensor_parameters"] > 0
        assert rank["parameters_local"] < 0.35 * full_count, rank  # ~1/4: dp=2 x tp=2


def test_tp_times_ddp_on_four_ranks_matches_ddp(runs: Runs) -> None:
    assert_equivalent(runs, "ddp_tp", "ddp", rel=1e-4, atol=1e-5)
    full_count = runs.summary("ddp_tp")["parameters"]
    for rank in placements(runs, "ddp_tp"):
        assert rank["parameters_local"] < 0.6 * full_count, rank


def test_pipeline_with_one_microbatch_matches_single_process_on_disjoint_stages(
    runs: Runs,
) -> None:
    assert_equivalent(runs, "pp1", "single", rel=1e-4, atol=1e-5)
    _assert_disjoint_stages(runs, "pp1")


def test_pipeline_times_ddp_on_four_ranks_matches_ddp(runs: Runs) -> None:
    """The pipeline step's own gradient all-reduce over dp (DDP does not wrap stages)."""
    assert_equivalent(runs, "ddp_pp", "ddp", rel=1e-4, atol=1e-5)
    _assert_disjoint_stages(runs, "ddp_pp")


def _assert_disjoint_stages(runs: Runs, name: str) -> None:
    """Each stage holds part of the model; together exactly the model (the merge above already
    refused overlapping or missing keys)."""
    full_count = runs.summary(name)["parameters"]
    ranks = placements(runs, name)
    for dp in {r["coordinates"]["dp"] for r in ranks}:
        stages = [r for r in ranks if r["coordinates"]["dp"] == dp]
        assert sorted(r["coordinates"]["pp"] for r in stages) == [0, 1]
        assert all(0 < r["parameters_local"] < full_count for r in stages), stages
        assert sum(r["parameters_local"] for r in stages) == full_count
    keys = [set(runs.shard(name, pp, 0)) for pp in (0, 1)]
    assert keys[0] and keys[1]
    assert not keys[0] & keys[1], sorted(keys[0] & keys[1])[:5]  # no tensor held by both


def test_ddp_replicas_identical_after_every_step(runs: Runs) -> None:
    """DDP is not compared with the single process: each rank normalises with its own
    BatchNorm statistics (8 images, not 16), so the losses legitimately differ."""
    records = read_jsonl(runs.get("ddp") / "steps.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert all(r["replica_max_diff"] == 0.0 for r in records)


def test_data_parallel_ranks_read_disjoint_halves_of_the_epoch(runs: Runs) -> None:
    """dp=2 x tp=2: 2 data-parallel groups x 8 steps x 8 images = one epoch of the 128
    training images; the two TP peers of a group read the same samples in the same order."""
    ranks = placements(runs, "ddp_tp")
    indices = read_indices(runs.root / "indices")
    assert sorted(indices) == [0, 1, 2, 3]
    by_dp: dict[int, list[int]] = {}
    for rank in ranks:
        seen = indices[rank["rank"]]
        assert len(seen) == STEPS * 8
        by_dp.setdefault(rank["coordinates"]["dp"], seen)
        assert seen == by_dp[rank["coordinates"]["dp"]], "TP peers must read the same batch"
    first, second = by_dp[0], by_dp[1]
    assert not set(first) & set(second)
    assert sorted(first + second) == list(range(128))


# --- spikes and energy: the single process's figures on any topology ----------------------


def _spikes(runs: Runs, name: str) -> dict[str, Any]:
    """The run's spike and energy measurement at its final evaluation (step 8)."""
    evaluation = json.loads((runs.get(name) / "spikes.json").read_text())["evaluations"][-1]
    assert evaluation["step"] == STEPS
    return evaluation


def test_spike_and_energy_figures_are_the_single_processes_on_every_topology(runs: Runs) -> None:
    """At the same step, channel TP x2 and PP x2 give the single process's figures (their
    weights are its weights to 1e-4: test_channel_tp_..., test_pipeline_...): each rank
    counts what it holds, rank 0 combines. Measured equal: every layer's firing rate, silent
    and saturated fractions and size, the synaptic operations and MACs; the ACs (element-wise
    work, which each layout does a little differently) within 0.1 %. Data-parallel runs
    count the 32-image slice once (each rank measures its half), and FSDP2's figures are
    DDP's (the same weights to 1e-5)."""
    single = _spikes(runs, "single")
    assert single["images"] == 32 and len(single["layers"]) == 20
    for name in ("tp", "pp1"):
        other = _spikes(runs, name)
        assert other["images"] == 32
        assert other["layers"] == single["layers"], name
        assert (other["firing_rate"], other["synops_per_image"], other["macs_per_image"]) == (
            single["firing_rate"],
            single["synops_per_image"],
            single["macs_per_image"],
        ), name
        # element-wise work each layout (and batch: the single process measures its slice in
        # one forward, a pipeline in its batches) counts a little differently: 0.15 % measured
        assert other["acs_per_image"] == pytest.approx(single["acs_per_image"], rel=5e-3)
        assert other["energy_per_image_mj"] == pytest.approx(
            single["energy_per_image_mj"], rel=5e-3
        )
    ddp, fsdp2 = _spikes(runs, "ddp"), _spikes(runs, "fsdp2")
    assert ddp["images"] == fsdp2["images"] == 32  # 16 a rank, summed: not 64
    assert ddp["macs_per_image"] == single["macs_per_image"]  # per image, the same network
    for key in ("firing_rate", "synops_per_image", "energy_per_image_mj"):
        # thresholds turn FSDP2's 1e-5 weight differences into a few flipped spikes: measured
        # 0.23 % apart in firing rate (2026-12-06); a wrong share would be 50 % or 100 %
        assert fsdp2[key] == pytest.approx(ddp[key], rel=1e-2), key


# --- pipeline micro-batches and gradient accumulation scale exactly -----------------------


def test_pipeline_microbatches_equal_a_single_process_accumulating_the_same_two(
    runs: Runs,
) -> None:
    """One PP step over 2 micro-batches of 4 equals one single-process step that accumulates
    the same two micro-batches (trainer.global_batch_size=8 in forwards of 4: each loss / 2,
    DDP-free): the same recorded loss and the same parameters to 1e-5. Two mechanisms, one
    result: the pipeline schedule's micro-batches, and our accumulation inside SpikingJelly's
    training step (engines/accumulation.py). BatchNorm normalises each micro-batch on its own
    in both."""
    one_step = [*COMMON, "trainer.max_steps=1", "trainer.checkpoint_interval=1", *NO_SPIKES]
    pp2 = [*one_step, "topology=pp", *TWO, "topology.pipeline_microbatches=2"]
    accumulated = [*one_step, "trainer.global_batch_size=8", "trainer.batch_size=4"]
    runs.get("pp2", pp2)
    runs.get("accumulated", accumulated)
    summary = runs.summary("accumulated", accumulated)
    assert summary["metrics"]["global_batch"] == 8
    plan = json.loads((runs.get("accumulated") / "plan.json").read_text())
    assert (plan["batch"]["accumulation_steps"], plan["batch"]["per_rank"]) == (2, 8)
    assert runs.losses("pp2") == pytest.approx(runs.losses("accumulated"), rel=1e-5)
    assert_same_state(
        runs.state("pp2", step=1), runs.state("accumulated", step=1), rtol=1e-5, atol=1e-6
    )


# --- resume --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ddp", "fsdp2", "tp", "pp1"])
def test_resumed_run_continues_exactly(runs: Runs, name: str) -> None:
    """Resume from step 4 of the uninterrupted run: same step count, same later losses and the
    same final parameters (model, optimizer momentum and data order restored)."""
    start = runs.get(name) / "checkpoints" / "step_00000004"
    args = [*COMMON, *RUNS[name], f"resume={start}"]
    resumed = f"{name}_resumed"
    losses = runs.losses(resumed, args)
    summary = runs.summary(resumed, args)
    assert summary["metrics"]["steps"] == STEPS
    assert summary["resumes"] == 1
    assert summary["resumed_from"] == str(start)
    assert len(losses) == STEPS - 4
    assert_close(losses, runs.losses(name)[4:], rel=1e-5)
    assert_same_state(runs.state(resumed), runs.state(name), rtol=1e-5, atol=1e-6)


# --- resume under another topology (issue 28) ---------------------------------------------


def _stopped_at_step_4(runs: Runs, name: str, root: Path) -> Path:
    """A copy of run `name` as it would be had it stopped after its step-4 checkpoint (a
    requeue, a preemption): its newer checkpoint gone, its summary `interrupted`."""
    run_dir = root / f"{name}_stopped"
    shutil.copytree(runs.get(name), run_dir)
    shutil.rmtree(run_dir / "checkpoints" / f"step_{STEPS:08d}")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["status"] = "interrupted"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def _continue(runs: Runs, name: str, run_dir: Path, args: list[str]) -> dict:
    result = run_cli(
        [*args, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        env={"PYTHONPATH": on_python_path(str(REPO))},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs.done[name] = run_dir
    return json.loads((run_dir / "summary.json").read_text())


def test_an_fsdp2_run_continued_under_ddp_is_the_uninterrupted_run(runs: Runs) -> None:
    """The same command with topology=ddp on the stopped FSDP2 run's directory: accepted as
    an extension, its step-4 checkpoint (full state over dp) loaded into DDP replicas, and
    the continued trajectory and final parameters are the uninterrupted DDP run's."""
    run_dir = _stopped_at_step_4(runs, "fsdp2", runs.root)
    summary = _continue(runs, "fsdp2_then_ddp", run_dir, [*COMMON, "topology=ddp", *TWO])
    assert "topology.data_parallel: fsdp2 -> ddp" in summary["extensions"]
    assert summary["status"] == "completed" and summary["resumes"] == 1
    assert summary["resumed_from"].endswith("step_00000004")
    assert summary["mesh"]["data_parallel"] == "ddp"
    assert all(rank["dtensor_parameters"] == 0 for rank in summary["ranks"])  # DDP replicas
    assert_equivalent(runs, "fsdp2_then_ddp", "ddp", rel=1e-5, atol=1e-6)


def test_a_ddp_run_continued_on_one_process_keeps_its_global_batch(runs: Runs) -> None:
    """DDP x2 (8 a rank) continued on one process at 16: the global batch kept, the same
    samples in the same order (DistributedSampler's one permutation), resumed from step 4.
    What differs is BatchNorm: two ranks normalise 8 images each with their own statistics,
    one process 16 with one, and a spiking network turns that into other spikes. Measured
    (2026-12-02, 2-core CPU): the first continued step's loss (the same model on the same 16
    images) 2.7 % from the uninterrupted run's, the next three within 3.3 %; the trained
    parameters then differ by up to 22 % of a tensor's norm (fc.weight) after 4 steps, so
    they are not compared here (the exact reshard checks are the FSDP2 -> DDP, TP and PP
    continuations)."""
    run_dir = _stopped_at_step_4(runs, "ddp", runs.root)
    args = [a for a in COMMON if not a.startswith("trainer.batch_size=")]
    args.append("trainer.batch_size=16")
    summary = _continue(runs, "ddp_then_single", run_dir, [*args, "trainer.check_replicas=true"])
    assert "trainer.batch_size: 8 -> 16" in summary["extensions"]
    assert summary["resumes"] == 1 and summary["resumed_from"].endswith("step_00000004")
    assert summary["world_size"] == 1 and summary["metrics"]["global_batch"] == 16
    assert summary["metrics"]["steps"] == STEPS
    losses = runs.losses("ddp_then_single")
    reference = runs.losses("ddp")
    assert losses[:4] == reference[:4]  # the records before the stop, kept
    assert_close(losses[4:], reference[4:], rel=0.05)


def test_a_ddp_x4_run_continued_on_two_ranks_trains_on_the_same_global_batches(
    runs: Runs,
) -> None:
    """DDP x4 (trainer.global_batch_size=16: 4 a rank) stopped after step 4 and continued by
    the same command on 2 ranks (8 a rank): the global batch kept, and each continued step
    trains on the 16 samples the uninterrupted 4-rank run trained on at that step (one
    DistributedSampler permutation, dealt to 2 ranks instead of 4), each rank loading only the
    batches it trains (the resumed epoch starts past the trained ones). What differs is
    BatchNorm: 4 ranks normalise 4 images each, 2 ranks 8, and spikes follow. Measured
    (2026-12-02, 2-core CPU): the first continued step (the same parameters on the same 16
    images) 4.7 % from the uninterrupted run's loss, the next three 0.3 %, 3.2 % and 7.1 %;
    asserted within 10 %. The exact reshard checks: FSDP2 -> DDP, TP and PP -> single."""
    run_dir = _stopped_at_step_4(runs, "ddp4", runs.root)
    record = runs.root / RECORD_DIRS["ddp4"]
    before = read_indices(record)  # the uninterrupted run's: 4 ranks x 8 steps x 4 samples
    assert sorted(before) == [0, 1, 2, 3] and all(len(v) == STEPS * 4 for v in before.values())
    args = [*COMMON, *TWO, "topology=ddp", "trainer.global_batch_size=16"]
    summary = _continue(runs, "ddp4_then_ddp2", run_dir, [*args, *runs.recorded("ddp4")])
    assert "launcher.nproc_per_node: 4 -> 2" in summary["extensions"], summary["extensions"]
    assert summary["resumes"] == 1 and summary["resumed_from"].endswith("step_00000004")
    assert summary["world_size"] == 2 and summary["metrics"]["global_batch"] == 16
    assert summary["metrics"]["steps"] == STEPS
    after = read_indices(record)
    continued = {rank: after[rank][len(before[rank]) :] for rank in (0, 1)}
    assert all(len(seen) == (STEPS - 4) * 8 for seen in continued.values()), continued
    for step in range(4, STEPS):
        trained = {i for rank in range(4) for i in before[rank][4 * step : 4 * step + 4]}
        offset = 8 * (step - 4)
        again = {i for rank in (0, 1) for i in continued[rank][offset : offset + 8]}
        assert again == trained, f"step {step + 1}"
    losses, reference = runs.losses("ddp4_then_ddp2"), runs.losses("ddp4")
    assert losses[:4] == reference[:4]  # the records before the stop, kept
    assert_close(losses[4:], reference[4:], rel=0.10)


@pytest.mark.parametrize("name", ["tp", "pp1"])
def test_a_tp_or_pp_run_continued_on_one_process_is_the_uninterrupted_run(
    runs: Runs, name: str
) -> None:
    """Channel TP x2 and PP x2 (one micro-batch) stopped at step 4, continued on one
    process: the shards re-split by SpikingJelly's builder (model and optimizer momentum),
    and the rest of the run is the single process's (as TP and PP runs are: 1e-4)."""
    run_dir = _stopped_at_step_4(runs, name, runs.root)
    summary = _continue(runs, f"{name}_then_single", run_dir, COMMON)
    assert any(e.startswith("topology.") for e in summary["extensions"]), summary["extensions"]
    assert summary["world_size"] == 1 and summary["resumes"] == 1
    assert_equivalent(runs, f"{name}_then_single", "single", rel=1e-4, atol=1e-5)


def test_a_global_batch_change_is_refused_before_launch(runs: Runs, tmp_path: Path) -> None:
    """The FSDP2 run (2 ranks x 8) continued on one process at 8: refused, one line with the
    numbers and the overrides that keep 16, nothing written."""
    from .conftest import run_cli_in_process

    run_dir = _stopped_at_step_4(runs, "fsdp2", tmp_path)
    result = run_cli_in_process([*COMMON, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid config: trainer.batch_size=8: a global batch of 16")
    assert "keep it with trainer.global_batch_size=16 or trainer.batch_size=16" in line
    assert "trainer.allow_global_batch_change=true" in line
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"


# --- a real job on real data, and sweeps ---------------------------------------------------


def test_two_rank_ddp_on_digits_learns_in_two_epochs(runs: Runs, figures) -> None:
    run_dir = runs.get(
        "ddp_digits",
        [
            *TWO,
            "topology=ddp",
            "trainer.epochs=2",
            "trainer.batch_size=16",
            "trainer.check_replicas=true",
            "trainer.log_every_n_steps=20",
            *NO_SPIKES,
        ],
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    figures(
        val_accuracy=round(summary["metrics"]["val_accuracy"], 4),
        images_per_second=round(summary["metrics"]["images_per_second"], 1),
        wall_s=summary["wall_time_s"],
        peak_memory_mb_per_rank=metrics[-1]["peak_memory_mb_per_rank"],
    )
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert summary["metrics"]["val_accuracy"] >= 0.75
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]
    assert len(metrics[-1]["peak_memory_mb_per_rank"]) == 2
    assert all(r["replica_max_diff"] == 0.0 for r in read_jsonl(run_dir / "steps.jsonl"))


def test_multirun_with_torchrun_launches_each_point_once(runs: Runs) -> None:
    """Each sweep point becomes one torchrun job in its own directory; the workers run that
    point only (they get the point's overrides, not the sweep), with the point's seed. The
    sweep varies the seed alone: the report groups the points as replicates of one
    configuration (issue 29 on torchrun sweeps). Its point 0 is the DDP run the other tests
    compare with (SWEPT)."""
    sweep_dir = runs.sweep()
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]
    finals = []
    for number, seed in (("0", SWEEP_SEEDS[0]), ("1", SWEEP_SEEDS[1])):
        point = sweep_dir / number
        summary = json.loads((point / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["world_size"] == 2
        assert summary["metrics"]["steps"] == STEPS
        # the seed the workers trained with (their checkpoint's recipe), not the override
        recipes = list(point.glob("checkpoints/step_*/config.json"))
        assert len(recipes) == 2, recipes  # steps 4 and 8
        assert all(json.loads(r.read_text())["seed"] == seed for r in recipes), number
        assert not [p for p in point.iterdir() if p.is_dir() and p.name.isdigit()]
        finals.append(summary["metrics"])
    with open(sweep_dir / "report_seeds.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))  # one configuration, two replicates
    assert (row["n"], row["n_completed"], row["n_failed"]) == ("2", "2", "0")
    for metric in ("val_accuracy", "val_loss", "train_loss"):
        values = [m[metric] for m in finals]
        assert float(row[f"{metric}_mean"]) == pytest.approx(statistics.fmean(values))
        assert float(row[f"{metric}_std"]) == pytest.approx(statistics.stdev(values))
    assert "## Seeds as replicates" in (sweep_dir / "report.md").read_text()


@pytest.mark.parametrize("name", ["single", "fsdp2_tp", "ddp_pp"])
def test_eval_of_the_final_checkpoint_reproduces_the_runs_validation(
    runs: Runs, name: str, capsys
) -> None:
    """experiments-eval rebuilds one process's model from the recorded config, merges the
    run's FSDP2/TP/PP shards and gets the run's own final validation numbers. Its main() runs
    in this process (no start-up; test_eval.py and test_spikingjelly_loop_guarantees.py run
    the console script)."""
    from .conftest import tool_in_process

    run_dir = runs.get(name)
    code, _, err = tool_in_process("eval", [run_dir], capsys)
    assert code == 0, err[-3000:]
    evaluated = json.loads((run_dir / "eval.json").read_text())
    metrics = runs.summary(name)["metrics"]
    assert evaluated["step"] == metrics["steps"] == STEPS
    assert abs(evaluated["val_accuracy"] - metrics["val_accuracy"]) <= 1e-6
    assert abs(evaluated["val_loss"] - metrics["val_loss"]) <= 1e-5 * metrics["val_loss"]
    assert evaluated["images"] == 64


@pytest.mark.parametrize("name", ["fsdp2_tp", "ddp_pp"])
def test_export_of_a_sharded_run_is_one_state_dict_that_evaluates_to_its_numbers(
    runs: Runs, name: str, tmp_path: Path, capsys
) -> None:
    """experiments-export merges the run's TP or PP shards into the single-process model's
    state dict: a plain file (weights_only) that the builder's model takes whole and strictly,
    and that experiments-eval (in-process here) evaluates to the run's own final numbers."""
    import torch

    from experiments.evaluate import evaluate
    from experiments.export import export
    from experiments.snn.evaluate import _config, _plan
    from experiments.snn.models import build_single_process_model

    run_dir = runs.get(name)
    out = tmp_path / f"{name}.pt"
    assert export([str(run_dir), "--out", str(out)]) == 0
    state = torch.load(out, map_location="cpu", weights_only=True)
    sidecar = json.loads((tmp_path / f"{name}.pt.json").read_text())
    assert (sidecar["step"], sidecar["run_dir"], sidecar["family"]) == (STEPS, str(run_dir), "snn")
    plan = _plan(run_dir, _config(run_dir, []))
    config = plan.training_config
    model = build_single_process_model(config.model, torch.device("cpu"), config.batch_size)
    assert set(state) == set(model.state_dict())  # no shard left out, nothing extra
    model.load_state_dict(state, strict=True)  # and every tensor at its full size
    assert evaluate([str(out)]) == 0
    evaluated = json.loads((run_dir / "eval.json").read_text())
    metrics = runs.summary(name)["metrics"]
    assert evaluated["checkpoint"] == str(out) and evaluated["step"] == STEPS
    assert abs(evaluated["val_accuracy"] - metrics["val_accuracy"]) <= 1e-6
    assert abs(evaluated["val_loss"] - metrics["val_loss"]) <= 1e-5 * metrics["val_loss"]
    if name == "fsdp2_tp":  # once: README's lines load it without this package
        _readme_loading_without_the_package(out, model, config)


def _readme_loading_without_the_package(out: Path, model: Any, config: Any) -> None:
    """docs/checkpoints.md's snippet, as printed there, run in a fresh interpreter on the
    exported file: its logits for seeded images are the package's own model's, and
    `experiments` was never imported."""
    from spikingjelly.activation_based import functional
    from spikingjelly.activation_based.distributed.vision.execution import (
        _forward_classification,
    )

    text = (REPO / "docs" / "checkpoints.md").read_text()
    block = text.split("<!-- load-without-this-package -->\n```python\n", 1)[1]
    snippet = block.split("```", 1)[0].replace('"model.pt', f'"{out}')
    seeded = snippet.replace("images = torch.rand", "torch.manual_seed(0)\nimages = torch.rand")
    probe = f"import sys\n{seeded}assert 'experiments' not in sys.modules\n"
    probe += "torch.save(logits, sys.argv[1])\n"
    saved = out.with_suffix(".logits.pt")
    done = subprocess.run(
        [sys.executable, "-c", probe, str(saved)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    torch.manual_seed(0)
    images = torch.rand(4, 3, config.model.image_size, config.model.image_size)
    model.eval()
    with torch.no_grad():
        expected = _forward_classification(model, images, config.model.time_steps, "m", "NCHW")
    functional.reset_net(model)
    torch.testing.assert_close(torch.load(saved, weights_only=True), expected)
