"""trainer.global_batch_size (issue 28): the batch the optimizer sees, whatever the topology.

The plan derives the per-rank batch from the data-parallel size (and gradient-accumulation
micro-batches where the per-rank batch exceeds trainer.batch_size); accumulation inside
SpikingJelly's training step gives the gradient of the whole batch's mean loss (checked
against one backward on a network without BatchNorm: with BatchNorm each micro-batch is
normalised by its own statistics, as in every framework); one real 2-rank run accumulates.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from spikingjelly.activation_based import functional, layer, neuron

from .conftest import DDP_ACCUMULATING_PROFILED, SharedRuns, plan_for, read_jsonl


@pytest.mark.parametrize(
    ("topology", "cap", "per_rank", "steps"),
    [
        ([], 32, 32, 1),
        (["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"], 32, 16, 1),
        (["topology=fsdp2", "launcher=torchrun", "launcher.nproc_per_node=4"], 32, 8, 1),
        (["topology=fsdp2", "launcher=torchrun", "launcher.nproc_per_node=2"], 8, 16, 2),
        (["topology=channel_tp", "launcher=torchrun", "launcher.nproc_per_node=2"], 6, 32, 8),
    ],
    ids=["single", "ddp2", "fsdp2x4", "fsdp2x2-accumulating", "tp2-accumulating"],
)
def test_the_global_batch_stays_whatever_the_topology(
    topology: list[str], cap: int, per_rank: int, steps: int
) -> None:
    """(tp2: 32 per rank at most 6 a forward: 8 micro-batches of 4, the fewest equal ones.)"""
    plan = plan_for(
        [*topology, "trainer.global_batch_size=32", f"trainer.batch_size={cap}", "data=synthetic"]
    )
    batch = plan.as_dict()["batch"]
    assert (batch["global"], batch["per_rank"]) == (32, per_rank)
    assert plan.training_config.batch_size == per_rank  # what each rank's loader yields
    assert batch["accumulation_steps"] == steps
    assert batch["derivation"].startswith("trainer.global_batch_size=32 / data-parallel")
    assert ("accumulation steps" in batch["derivation"]) == (steps > 1)
    assert "32 global (trainer.global_batch_size=32" in plan.as_text()


def test_without_it_the_per_rank_batch_is_the_default() -> None:
    plan = plan_for(["topology=ddp", "launcher=torchrun", "launcher.nproc_per_node=2"])
    batch = plan.as_dict()["batch"]
    assert (batch["per_rank"], batch["global"]) == (32, 64) and "derivation" not in batch


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        layer.Conv2d(3, 4, 3, padding=1),
        neuron.LIFNode(),
        layer.Flatten(),
        layer.Linear(4 * 8 * 8, 10),
    )
    functional.set_step_mode(net, "m")
    return net


def _library_step(forward, loss_of, model, images, targets) -> torch.Tensor:
    """One training step shaped as SpikingJelly's `train_step` (its locals are what
    accumulation reads, the names the loop looks up are `forward` and `loss_of`)."""
    loss_function, precision, scaler = F.cross_entropy, SimpleNamespace(scaler=None), None

    def train_step(images: torch.Tensor, loss_targets: torch.Tensor) -> torch.Tensor:
        assert precision is not None and scaler is None  # free variables, as in the library's
        logits = forward(model, images, 2, "m", "NCHW")
        loss = loss_of(logits, loss_targets, loss_function)
        loss.backward()
        return loss

    return train_step(images, targets)


@pytest.mark.parametrize("batch", [8, 7])  # 7: an uneven last micro-batch
def test_accumulated_gradients_are_the_whole_batchs(batch: int) -> None:
    """SpikingJelly's training step with 4 accumulation steps (engines/accumulation.py): no
    forward sees more than its micro-batch, the loss is the whole batch's mean, and the
    gradients are those of one backward over the whole batch."""
    from spikingjelly.activation_based.distributed.vision.execution import (
        _classification_loss,
        _forward_classification,
    )

    from experiments.snn.engines.accumulation import Accumulation

    images, targets = torch.randn(batch, 3, 8, 8), torch.arange(batch) % 10
    reference = _net()
    whole = _library_step(_forward_classification, _classification_loss, reference, images, targets)
    expected = [p.grad.clone() for p in reference.parameters()]

    accumulated = _net()
    seen: list[int] = []
    accumulated[0].register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[1]))
    accumulation = Accumulation(4)
    forward = accumulation.forward(_forward_classification, _classification_loss)
    loss = _library_step(
        forward, accumulation.loss(_classification_loss), accumulated, images, targets
    )
    assert max(seen) == 2 and sum(seen) == batch, seen  # [T, N, ...]: N per forward
    assert loss.item() == pytest.approx(whole.item(), rel=1e-6)
    for got, want in zip((p.grad for p in accumulated.parameters()), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_ddp_synchronises_once_per_accumulated_step() -> None:
    """Under DDP the micro-batches before the last backward inside `no_sync()`: the gradient
    buckets are all-reduced once per optimizer step, as often as for one whole-batch
    backward (a real one-rank gloo group; DDP's comm hook counts the reductions)."""
    import torch.distributed as dist
    from spikingjelly.activation_based.distributed.vision.execution import (
        _classification_loss,
        _forward_classification,
    )

    from experiments.snn.engines.accumulation import Accumulation

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        images, targets = torch.randn(8, 3, 8, 8), torch.arange(8) % 10
        reductions = []
        for accumulation in (None, Accumulation(4)):
            model = torch.nn.parallel.DistributedDataParallel(_net())
            count = [0]

            def hook(state, bucket, count=count):
                count[0] += 1
                future = torch.futures.Future()
                future.set_result(bucket.buffer())
                return future

            model.register_comm_hook(None, hook)
            forward, loss_of = _forward_classification, _classification_loss
            if accumulation is not None:
                forward = accumulation.forward(forward, loss_of)
                loss_of = accumulation.loss(loss_of)
            _library_step(forward, loss_of, model, images, targets)
            reductions.append(count[0])
        assert reductions[0] >= 1 and reductions[1] == reductions[0], reductions
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.dist
def test_a_two_rank_run_accumulates_to_the_global_batch(shared_runs: SharedRuns) -> None:
    """ddp x2, trainer.global_batch_size=16 with at most 4 per forward: 8 per rank in two
    micro-batches, 4 optimizer steps (trainer.max_steps) of 16 images each. The session's run
    of that config (conftest.DDP_ACCUMULATING_PROFILED), which test_profiling.py reads too."""
    run_dir = shared_runs.get("ddp_accumulating_profiled", DDP_ACCUMULATING_PROFILED)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["metrics"]["global_batch"] == 16 and summary["metrics"]["steps"] == 4
    assert [r["step"] for r in read_jsonl(run_dir / "steps.jsonl")] == [1, 2, 3, 4]
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["batch"]["accumulation_steps"] == 2 and plan["batch"]["per_rank"] == 8


def test_accumulation_under_a_cuda_graph_is_refused() -> None:
    """A CUDA graph replays the one forward and backward it captured: a global batch that
    needs accumulation is refused before launch, naming both ways out."""
    from experiments.errors import ConfigError

    gpu = ["launcher=slurm", "launcher.gpus_per_node=1", "trainer.execution_mode=cuda_graph"]
    with pytest.raises(ConfigError) as refused:
        plan_for([*gpu, "trainer.global_batch_size=64", "trainer.batch_size=16"])
    assert refused.value.key == "trainer.execution_mode"
    assert "accumulates 4 micro-batches a step" in str(refused.value)
    assert "or trainer.batch_size=64: no accumulation" in str(refused.value)
    assert plan_for([*gpu, "trainer.global_batch_size=64", "trainer.batch_size=64"])
