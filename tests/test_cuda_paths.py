"""CUDA-only paths rehearsed as far as a CPU allows (issue #26 items 2 and 8, #25 item 4).

- GAN runs on CUDA go through MMGen's own `train_model(distributed=True)`: its
  MMDistributedDataParallel (dynamic) or DistributedDataParallelWrapper (static), whose
  forwards read `_use_replicated_tensor_module`, an attribute torch 2.14's DDP no longer sets.
  Our fix must be in place on that path too, not only on the CPU ranks' own wrappers.
- trainer=classify in a Slurm allocation with launcher=local: the Trainer's
  `init_distributed_mode` takes SLURM_PROCID for a rank of a distributed run.

What only a GPU shows (NCCL, the CUDA wrappers' own device moves) is bench/gpu_check's."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from .conftest import plan_for, run_cli

FLAG = "_use_replicated_tensor_module"
# What a user's `salloc` shell (one task) has, and no RANK/WORLD_SIZE: launcher=local.
SALLOC_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOBID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NTASKS": "1",
    "SLURM_NPROCS": "1",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "localhost",
    "SLURM_CPUS_ON_NODE": "2",
}


@pytest.fixture
def gloo_group():
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def unfixed_mmcv(monkeypatch: pytest.MonkeyPatch):
    """mmcv's MMDistributedDataParallel as installed, before our fix (restored afterwards)."""
    from experiments.gan import mmgen_compat

    mmgen_compat.import_mmgen()
    from mmcv.parallel import MMDistributedDataParallel

    monkeypatch.delattr(MMDistributedDataParallel, FLAG, raising=False)
    return MMDistributedDataParallel


class _Gan(torch.nn.Module):
    """A generator and a discriminator, as MMGen's wrapper finds them (module children)."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.nn.Linear(4, 6)
        self.discriminator = torch.nn.Linear(6, 1)


@pytest.mark.gan
def test_mmgen_cuda_ddp_wrapper_forwards_with_the_fix_rehearsed_on_cpu(
    gloo_group, unfixed_mmcv, monkeypatch
):
    """MMGen's own DistributedDataParallelWrapper.to_ddp (what train_model builds for
    model.ddp=static on CUDA), on the CPU: only its `.cuda()` placement is a stand-in. Each
    part's forward is MMDistributedDataParallel's, the call a GAN's train_step makes."""
    from mmgen.core.ddp_wrapper import DistributedDataParallelWrapper

    from experiments.gan import ddp as gan_ddp

    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, device=None: self)

    def wrapped() -> _Gan:
        model = _Gan()
        wrapper = DistributedDataParallelWrapper.__new__(DistributedDataParallelWrapper)
        torch.nn.Module.__init__(wrapper)
        wrapper.module, wrapper.dim = model, 0
        wrapper.to_ddp(
            device_ids=None, dim=0, broadcast_buffers=False, find_unused_parameters=False
        )
        assert isinstance(model.generator, unfixed_mmcv)
        return model

    model = wrapped()
    with pytest.raises(AttributeError, match=FLAG):  # torch 2.14's DDP, mmcv's forward
        model.generator(torch.ones(2, 4))
    gan_ddp.install_replicated_tensor_fix()
    model = wrapped()
    scores = model.discriminator(model.generator(torch.ones(2, 4)))
    scores.sum().backward()
    assert scores.shape == (2, 1) and model.generator.module.weight.grad is not None


@pytest.mark.gan
def test_gan_engine_installs_the_fix_before_the_cuda_branch(unfixed_mmcv, tmp_path):
    """A planned 2-rank GAN run handed to the engine as a CUDA run (NCCL): on this machine it
    stops where CUDA is first needed, and the fix is installed by then, whatever the device."""
    from experiments.gan import engine
    from experiments.run.record import RunRecorder

    plan = plan_for(
        ["model=dcgan", "topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"],
        run_dir=str(tmp_path / "run"),
    )
    plan = dataclasses.replace(plan, device="cuda", backend="nccl")
    with pytest.raises((RuntimeError, AssertionError), match=r"(?i)cuda|nvidia|gpu"):
        engine.train(plan, RunRecorder(tmp_path, {}, enabled=False))
    assert getattr(unfixed_mmcv, FLAG) is False
    assert not dist.is_initialized()


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_classify_in_a_slurm_allocation_with_launcher_local_runs_alone(device, monkeypatch):
    """The Trainer's distributed set-up as trainer=classify runs it, on each device's branch:
    a salloc shell's SLURM_PROCID without RANK/WORLD_SIZE is one process, not a rank."""
    from spikingjelly.activation_based.examples.common.tv_ref_classify import utils

    from experiments.snn.engines import classify

    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in SALLOC_ENV.items():
        monkeypatch.setenv(key, value)
    args = argparse.Namespace(dist_url="env://", world_size=1)
    with classify._library_patches(device):
        utils.init_distributed_mode(args)
    assert args.distributed is False
    assert not dist.is_initialized()


@pytest.mark.slow
def test_classify_run_in_a_salloc_shell_with_launcher_local(tmp_path):
    """The whole run, as a user starts it inside `salloc` (CPU here; the same set-up on CUDA
    is the test above)."""
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    result = run_cli(
        [
            "trainer=classify",
            "trainer.epochs=1",
            "trainer.lr_scheduler=step",
            "data=synthetic",
            "data.train_size=32",
            "data.val_size=16",
            "model.time_steps=2",
            "logger=none",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env={**env, **SALLOC_ENV},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["metrics"]["steps"] > 0
    assert Path(run_dir / "checkpoints" / "pt" / "classify" / "checkpoint_latest.pth").is_file()


@pytest.mark.gan
@pytest.mark.parametrize(
    ("launch", "distributed"),
    [
        (["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=1"], True),
        (["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"], True),
        (["topology=single", "launcher=local"], False),
    ],
)
def test_one_rank_gan_under_torchrun_takes_mmgens_distributed_path(launch, distributed):
    """topology=ddp under torchrun is MMGen's distributed path even with one rank (as its
    dist_train.sh CONFIG 1): the one-GPU run that reaches NCCL and MMGen's DDP wrappers."""
    plan = plan_for(["model=dcgan", *launch])
    assert plan.distributed is distributed
    assert plan.as_dict()["distributed"] is distributed
    assert plan.mmgen_config.runner.is_dynamic_ddp is distributed  # dcgan: dynamic DDP


INITIAL_SCALE = 2.0**16  # torch's default


@pytest.mark.slow
def test_classify_amp_branch_rehearsed_on_cpu(tmp_path, monkeypatch):
    """trainer=classify with amp: the Trainer's GradScaler branch (scale, unscale, step,
    update; the scaler's state in its checkpoint and back on resume) through our subclass.
    CUDA's autocast and GradScaler are stood in for by the CPU's (bf16 autocast, a CPU
    GradScaler) in this test process; planning refuses amp on CPU, so the plan is the fp32
    one with the Trainer's --disable-amp taken out."""
    from experiments.run.record import RunRecorder
    from experiments.snn import classify_plan
    from experiments.snn.engines import classify

    def cpu_autocast(enabled: bool = True, **kwargs):
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)

    monkeypatch.setattr(torch.cuda.amp, "autocast", cpu_autocast)
    monkeypatch.setattr(
        torch.cuda.amp,
        "GradScaler",
        lambda *a, **k: torch.amp.GradScaler("cpu", init_scale=INITIAL_SCALE),
    )
    run_dir = tmp_path / "run"
    base = [
        "trainer=classify",
        "trainer.lr_scheduler=step",
        "data=synthetic",
        "data.train_size=16",
        "data.val_size=8",
        "model.time_steps=2",
        "trainer.batch_size=8",
        "logger=none",
    ]

    def train(epochs: int) -> dict:
        plan = plan_for([*base, f"trainer.epochs={epochs}"], run_dir=str(run_dir))
        argv = [a for a in plan.trainer_args if a != "--disable-amp"]
        plan = dataclasses.replace(plan, trainer_args=argv, resume="auto")
        recorder = RunRecorder(run_dir, {}, enabled=True)
        return classify.train(plan, recorder)

    def scaler_counts(steps: int) -> tuple[int, int]:
        """(skipped, counted since the last skip) from the saved GradScaler state. Its
        update() after each step either counts the step (_growth_tracker + 1; growth comes
        only after 2000) or, when the step's gradients were not finite, skips it: the scale
        halves and the count restarts. Under CPU bf16 a step now and then is not finite
        (seen in 1 of ~5 runs here), so both are the scaler doing its job."""
        state = classify_plan._torch_load(
            classify_plan.checkpoint_dir(run_dir) / classify_plan.LATEST
        )["scaler"]
        skipped = round(math.log2(INITIAL_SCALE / state["scale"]))
        counted = state["_growth_tracker"]
        assert counted <= steps - skipped, state
        if skipped == 0:
            assert counted == steps, state  # update() every step
        return skipped, counted

    first = train(1)
    assert first["steps"] == 2
    skipped, counted = scaler_counts(2)
    second = train(2)  # resumes: the scaler's state comes back, then two more updates
    saved = classify_plan._torch_load(classify_plan.checkpoint_dir(run_dir) / classify_plan.LATEST)
    assert (saved["epoch"], second["steps"]) == (1, 4)
    skipped_after, counted_after = scaler_counts(4)
    assert skipped_after >= skipped  # the scale came back from the checkpoint
    if skipped_after == skipped:  # no skip in epoch 2: its count continues epoch 1's
        assert counted_after == counted + 2
