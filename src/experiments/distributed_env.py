"""Where this rank sits in a run's process group: its rank and node (as its launcher set them:
torchrun, or launchers/slurm.py for a Slurm task), and the devices its collectives use. Who the
process is in the run (its owner, a rank torchrun started, a Slurm task) is role.py's."""

from __future__ import annotations

import os
import socket
from typing import Any


def rank() -> int:
    """This process's torch.distributed rank (0 for a process of its own)."""
    return int(os.environ.get("RANK", "0"))


def node() -> str:
    """The node this process runs on: Slurm's node name, else the host's."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def placement() -> dict[str, Any]:
    """Where this rank runs, for summary.json's `ranks`: global and local rank, the node, and
    which node of the launch it is (torchrun's --node-rank, Slurm's node id)."""
    return {
        "rank": rank(),
        "local_rank": local_rank(),
        "node": node(),
        "node_rank": int(os.environ.get("GROUP_RANK") or os.environ.get("SLURM_NODEID") or 0),
        # torchrun restarts this node's agent counted (launcher.max_restarts)
        "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
    }


def restarts(placements: list[dict[str, Any]]) -> int:
    """How often torchrun restarted the run's ranks: the most any node counted. An agent
    counts only the restarts its own workers' failures caused; the other nodes restart too
    (a new rendezvous round) without counting."""
    return max((p.get("restarts", 0) for p in placements), default=0)


def init_process_group(backend: str = "gloo") -> None:
    """`init_process_group` from the launcher's environment (env://).

    Under torchrun every restart round must not see the keys of the one before (a restarted
    rank could read the address its dead predecessor published: "Gloo connectFullMesh failed
    ... Connection refused"). Our torchrun launcher therefore turns off torchrun's shared
    rendezvous store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, launchers/torchrun.py): each round
    gets a store of its own, on every node alike. (A per-round key prefix made from
    TORCHELASTIC_RESTART_COUNT does not work across nodes: an agent that restarts because
    another node's worker died does not count that restart, so the nodes' counts differ.)
    """
    import torch.distributed as dist

    dist.init_process_group(backend)


def collective_device(group: Any = None) -> Any:
    """The device a collective's tensors must live on for `group`'s backend (the default
    group when None); see `backend_device`.

    Every collective our code issues on a tensor it makes (flags, losses, sums) puts that
    tensor here, so one code path serves CPU ranks on gloo and GPU ranks on NCCL."""
    import torch.distributed as dist

    return backend_device(dist.get_backend(group))


def backend_device(backend: str) -> Any:
    """NCCL takes CUDA tensors only, on this rank's current device (a CPU tensor fails: "No
    backend type associated with device type cpu"); gloo (and any other backend we start)
    takes CPU tensors."""
    import torch

    if "nccl" in str(backend).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def collective_tensor(value: Any, group: Any = None, dtype: Any = None) -> Any:
    """`torch.tensor(value)` on `collective_device(group)` (a tensor is moved there)."""
    import torch

    device = collective_device(group)
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype or value.dtype)
    return torch.tensor(value, device=device, dtype=dtype)
