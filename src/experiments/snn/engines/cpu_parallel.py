"""Process groups, data-parallel wrappers and pipeline schedules for CPU ranks (gloo).

The mesh is SpikingJelly's: `(dp, pp, tp)` with the same rank layout as
`train_classification`, built with `init_device_mesh("cpu", ...)`. What differs from the CUDA
path is only what CUDA-specific code cannot do on a CPU:

- DDP is constructed with `device_ids=None` (SpikingJelly passes `[device.index]`, which is
  `[None]` on a CPU device and which DDP rejects);
- pipeline stages infer their boundary shapes at run time: with SpikingJelly's static
  `input_args`/`output_args`, gloo delivers `None` output gradients to stage 0.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from spikingjelly.activation_based.distributed.vision import training as sj_training
from spikingjelly.activation_based.distributed.vision.execution import (
    _pipeline_loss,
    _wrap_data_parallel,
)
from spikingjelly.activation_based.precision import PrecisionConfig

from experiments import distributed_env
from experiments.topology import MESH_DIM_NAMES, ParallelDims

DEVICE = torch.device("cpu")


@dataclass
class ParallelContext:
    dims: ParallelDims
    rank: int = 0
    dp_rank: int = 0
    pp_rank: int = 0
    tp_rank: int = 0
    mesh: Any = None
    dp_group: Any = None
    pp_group: Any = None
    tp_group: Any = None
    initialized_here: bool = False

    @classmethod
    def setup(cls, dims: ParallelDims) -> ParallelContext:
        if dims.world_size == 1:
            return cls(dims)
        initialized_here = not dist.is_initialized()
        if initialized_here:
            distributed_env.init_process_group()
        if dist.get_world_size() != dims.world_size:
            raise RuntimeError(
                f"the launcher started {dist.get_world_size()} ranks but the plan has "
                f"world size {dims.world_size}"
            )
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", dims.mesh_shape, mesh_dim_names=MESH_DIM_NAMES)
        dp, pp, tp = dims.mesh_shape
        rank = dist.get_rank()
        dp_rank, pp_rank, tp_rank = dims.coordinates(rank)
        return cls(
            dims,
            rank,
            dp_rank,
            pp_rank,
            tp_rank,
            mesh,
            dp_group=mesh["dp"].get_group() if dp > 1 else None,
            pp_group=mesh["pp"].get_group() if pp > 1 else None,
            tp_group=mesh["tp"].get_group() if tp > 1 else None,
            initialized_here=initialized_here,
        )

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def last_stage_rank(self) -> int:
        """Global rank of the last pipeline stage in this rank's pipeline."""
        pp = self.dims.pipeline_parallel_size
        return self.rank + (pp - 1 - self.pp_rank) * self.dims.tensor_parallel_size

    def barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier()

    def all_reduce_dp(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.dp_group is not None:
            dist.all_reduce(tensor, group=self.dp_group)
        return tensor

    def all_true(self, flag: bool) -> bool:
        if not dist.is_initialized():
            return flag
        value = distributed_env.collective_tensor(int(flag))  # the backend's device
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        return bool(value.item())

    def any_true(self, flag: bool) -> bool:
        return not self.all_true(not flag)

    def broadcast(self, value: Any) -> Any:
        """Rank 0's value on every rank."""
        if not dist.is_initialized():
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def gather(self, value: Any) -> list[Any]:
        if not dist.is_initialized():
            return [value]
        values: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(values, value)
        return values

    def close(self) -> None:
        if self.initialized_here and dist.is_initialized():
            dist.destroy_process_group()


def wrap_data_parallel(
    model: nn.Module,
    context: ParallelContext,
    step_mode: str,
    precision: PrecisionConfig,
    fsdp_roots: tuple[str, ...],
) -> nn.Module:
    dims = context.dims
    if (
        dims.data_parallel == "ddp"
        and dims.data_parallel_size > 1
        and dims.pipeline_parallel_size == 1
    ):
        return nn.parallel.DistributedDataParallel(
            model,
            device_ids=None,
            process_group=context.dp_group,
            forward_sync_buffers=step_mode == "m",  # SpikingJelly's broadcast_buffers, renamed
        )
    return _wrap_data_parallel(
        model,
        data_parallel=dims.data_parallel,
        pipeline_parallel_size=dims.pipeline_parallel_size,
        step_mode=step_mode,
        precision=precision,
        device=DEVICE,
        dp_size=dims.data_parallel_size,
        dp_group=context.dp_group,
        dp_mesh=context.mesh["dp"] if context.mesh is not None else None,
        fsdp_roots=fsdp_roots,
    )


def pipeline_schedules(
    model: nn.Module, context: ParallelContext, loss_function: Any
) -> tuple[Any, Any]:
    """(train, evaluation) GPipe schedules over SpikingJelly's stage split.

    Stage 0 takes batch-first sequences [N, T, C, H, W] so micro-batches are cut along the
    batch; `_ResetAfterForward` resets neuron state after each micro-batch's forward.
    """
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    from torch.distributed.pipelining.microbatch import TensorChunkSpec

    dims = context.dims

    def stage() -> Any:
        return PipelineStage(
            sj_training._ResetAfterForward(model, batch_first=context.pp_rank == 0),
            context.pp_rank,
            dims.pipeline_parallel_size,
            DEVICE,
            group=context.pp_group,
        )

    kwargs = {"n_microbatches": dims.pipeline_microbatches, "output_merge_spec": TensorChunkSpec(1)}
    train = ScheduleGPipe(
        stage(), loss_fn=functools.partial(_pipeline_loss, loss_function=loss_function), **kwargs
    )
    return train, ScheduleGPipe(stage(), **kwargs)
