"""The NCCL device rule (issue #26 item 1): every collective our code issues on a tensor it
makes puts that tensor on the backend's device through one helper,
`distributed_env.collective_device` (NCCL: this rank's current CUDA device; gloo: the CPU).

No GPU here, so no NCCL group can be made ("ProcessGroupNCCL is only supported with GPUs"):
the helper's NCCL answer is read from its backend rule with torch's current CUDA device
standing in, its gloo answer from a real gloo group, and each collective site of ours runs a
real gloo collective while the helper is watched (a site that made its own CPU tensor would
pass on gloo and stop every NCCL run at its first iteration: "No backend type associated
with device type cpu")."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from experiments import distributed_env


@pytest.fixture
def gloo_group():
    """A real one-rank gloo process group in this process."""
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[torch.device]:
    """The devices the helper answered, in order (it still answers for real)."""
    answers: list[torch.device] = []
    real = distributed_env.collective_device

    def watched(group=None):
        answers.append(real(group))
        return answers[-1]

    monkeypatch.setattr(distributed_env, "collective_device", watched)
    return answers


def test_helper_answers_cuda_for_nccl_and_cpu_for_gloo(gloo_group, monkeypatch):
    # NCCL: the rank's current CUDA device (set from LOCAL_RANK before the group is made)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert distributed_env.backend_device(dist.Backend.NCCL) == torch.device("cuda", 3)
    assert distributed_env.backend_device("cuda:nccl,cpu:gloo") == torch.device("cuda", 3)
    # gloo: the CPU, for the default group and a subgroup, and a real collective through it
    assert distributed_env.collective_device() == torch.device("cpu")
    subgroup = dist.new_group([0], backend="gloo")
    assert distributed_env.collective_device(subgroup) == torch.device("cpu")
    value = distributed_env.collective_tensor([2, 5], dtype=torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    assert value.tolist() == [2, 5] and value.device.type == "cpu"
    moved = distributed_env.collective_tensor(torch.ones(2, dtype=torch.float64))
    assert moved.dtype == torch.float64 and moved.device.type == "cpu"


def test_flag_agreement_goes_through_the_helper(gloo_group, asked):
    from experiments import collectives

    assert collectives.all_true(True) is True
    assert collectives.any_true(False) is False
    assert asked == [torch.device("cpu")] * 2


def test_the_replica_spread_goes_through_the_helper(gloo_group, asked):
    from experiments import collectives

    assert collectives.replica_spread(torch.nn.Linear(3, 2).parameters()) == 0.0
    assert asked == [torch.device("cpu")]


def test_without_a_process_group_each_collective_answers_for_this_rank():
    from experiments import collectives

    assert not dist.is_initialized()
    assert collectives.broadcast_from_rank0({"a": 1}) == {"a": 1}
    assert collectives.gather(3) == [3]
    assert (collectives.all_true(False), collectives.any_true(True)) == (False, True)
    assert collectives.replica_spread(torch.nn.Linear(3, 2).parameters()) == 0.0


def test_gan_replica_difference_goes_through_the_helper(gloo_group, asked):
    from experiments.gan.engine import _replica_max_diff

    assert _replica_max_diff(torch.nn.Linear(3, 2)) == 0.0
    assert asked == [torch.device("cpu")]


@pytest.mark.gan
def test_gan_stop_hook_agreement_goes_through_the_helper(gloo_group, asked):
    """The hook that all-reduces a flag after EVERY iteration of a GAN run (defect 1)."""
    from experiments.gan import hooks, mmgen_compat
    from experiments.run.stop import GracefulStop

    mmgen_compat.import_mmgen()
    stop = GracefulStop()
    hook = hooks._stop_hook()(stop, distributed=True)
    assert stop.requested(hook._any_rank) is False
    stop.received = 15
    assert stop.requested(hook._any_rank) is True
    assert asked == [torch.device("cpu")] * 2


def test_classify_replica_spread_goes_through_the_helper(gloo_group, asked):
    from experiments.snn.engines.classify import _trainer_class

    trainer = object.__new__(_trainer_class())
    trainer.model = torch.nn.Linear(3, 2)
    assert trainer.replica_spread() == 0.0
    assert asked == [torch.device("cpu")]
