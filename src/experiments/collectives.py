"""The few collectives our code issues beside a library's loop: agree on a value, gather one
from each rank, compare data-parallel replicas.

Every tensor here is made on the backend's device (`distributed_env.collective_tensor`: NCCL
takes CUDA tensors only, gloo CPU ones), so one code path serves CPU ranks and GPU ranks. In
a process without a process group (one rank, nothing launched) each answers for that rank
alone, so callers never branch on "distributed or not".
"""

from __future__ import annotations

from typing import Any

from experiments import distributed_env


def _active() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank in the process group (0 without one)."""
    import torch.distributed as dist

    return dist.get_rank() if _active() else 0


def broadcast_from_rank0(value: Any) -> Any:
    """Rank 0's value on every rank: decisions that read shared storage are rank 0's, so all
    ranks act on the same one."""
    import torch.distributed as dist

    if not _active() or dist.get_world_size() == 1:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather(value: Any) -> list[Any]:
    """Every rank's value, in rank order, on every rank."""
    import torch.distributed as dist

    if not _active():
        return [value]
    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def all_true(flag: bool, group: Any = None) -> bool:
    """True on every rank when the flag is true on every rank of `group`."""
    import torch.distributed as dist

    if not _active():
        return flag
    value = distributed_env.collective_tensor(int(flag), group)
    dist.all_reduce(value, op=dist.ReduceOp.MIN, group=group)
    return bool(value.item())


def any_true(flag: bool, group: Any = None) -> bool:
    """True on every rank once the flag is true on any rank of `group`."""
    return not all_true(not flag, group)


def replica_spread(parameters: Any, group: Any = None) -> float:
    """The largest difference of any parameter's sum across the data-parallel replicas of
    `group` (0.0: in step). One all-gather of one float64 per parameter."""
    import torch
    import torch.distributed as dist

    sums = torch.stack([p.detach().double().sum() for p in parameters])
    if not _active():
        return 0.0
    sums = distributed_env.collective_tensor(sums, group)
    gathered = [torch.empty_like(sums) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, sums, group=group)
    stacked = torch.stack(gathered)
    return (stacked.max(0).values - stacked.min(0).values).abs().max().item()
