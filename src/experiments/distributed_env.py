"""Where this process sits in a run: the launching process, or one rank started by torchrun
or by a Slurm task."""

from __future__ import annotations

import os

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


def init_process_group(backend: str = "gloo") -> None:
    """`init_process_group` from torchrun's environment, with restart rounds kept apart.

    torchrun (torch 2.14, shared rendezvous store by default) hands every restart round the
    same TCPStore, and the ranks' keys carry no round prefix: a restarted rank can read the
    address its dead predecessor published and fail with "Gloo connectFullMesh failed ...
    Connection refused" (seen in our SIGKILL-and-restart test). Prefixing the store with
    TORCHELASTIC_RESTART_COUNT gives each round its own keys.
    """
    import torch.distributed as dist

    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if not restart or restart == "0":
        dist.init_process_group(backend)
        return
    store, worker_rank, world_size = next(dist.rendezvous("env://"))
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"experiments/restart_{restart}", store),
        rank=worker_rank,
        world_size=world_size,
    )
