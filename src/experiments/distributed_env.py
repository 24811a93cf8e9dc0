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
