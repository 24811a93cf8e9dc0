"""Where this process sits in a run: the launching process, or one rank started by torchrun
or by a Slurm task."""

from __future__ import annotations

import os
import socket
from typing import Any

# Set by our torchrun launcher on the worker command line's environment: the workers are
# ranks of a run whose directory and plan the launching process already made.
WORKER_ENV = "EXPERIMENTS_WORKER"


def is_worker() -> bool:
    return os.environ.get(WORKER_ENV) == "1"


def in_slurm_job() -> bool:
    """A Slurm task started by submitit (hydra-submitit-launcher): it is one rank of its job."""
    return os.environ.get("SUBMITIT_EXECUTOR") == "slurm"


def rank() -> int:
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    return int(os.environ.get("SLURM_PROCID", "0")) if in_slurm_job() else 0


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
