"""Where this process sits in a run: the launching process, or one rank started by torchrun
or by a Slurm task."""

from __future__ import annotations

import os

# Set by our torchrun launcher on the worker command line's environment: the workers are
# ranks of a run whose directory and plan the launching process already made.
WORKER_ENV = "EXPERIMENTS_WORKER"


def is_worker() -> bool:
    return os.environ.get(WORKER_ENV) == "1"


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))
