"""Who this process is in a run, decided once where the process enters our code and handed on.

A run directory has one owner, the process that takes its lock and writes its record
(summary.json, metrics.jsonl, steps.jsonl): a single run's own process (it trains, or it
launches torchrun's ranks), a local sweep's point, or rank 0 of a Slurm job (and a sweep's
login, for a point whose torchrun ranks it launches, while they run). The other processes
report to it (torchrun's rank 0 sends the record over the owner's channel: run/channel.py)
or are watched by torch elastic and Slurm.

The environment that says so is set by whoever started the process: our launching process
for the children it starts (`ROLE_ENV`), torchrun for its ranks, submitit for a Slurm task;
Hydra's mode says whether a process at the top is a sweep's login. Nothing else reads them.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any

# Set by the launching process for the children it starts (launchers/children.py): a rank
# torchrun starts, or a local sweep's point in a process of its own.
ROLE_ENV = "EXPERIMENTS_ROLE"


class Kind(enum.Enum):
    RUN = "run"  # a run's own process: it trains (launcher=local) or launches torchrun's ranks
    SWEEP_LOGIN = "sweep login"  # a -m sweep's login: starts each point, or submits Slurm jobs
    SWEEP_POINT = "sweep point"  # a local sweep's point, in a process of its own
    TORCHRUN_RANK = "torchrun rank"  # a rank torchrun started for a run's own process
    SLURM_TASK = "slurm task"  # a task of a Slurm job (submitit's): one rank of its job


@dataclass(frozen=True)
class Role:
    kind: Kind
    rank: int = 0
    # How many nodes torchrun's agents span (GROUP_WORLD_SIZE); 1 elsewhere.
    torchrun_nodes: int = 1
    # This process's attempt at the run: a Slurm job and its requeue count, or torchrun's
    # run id and its restart round's store; None outside a multi-rank launch (run/failures.py).
    attempt: str | None = None
    # A Slurm task's job id and requeue count (the lock's holder record names them).
    slurm_job: tuple[str, int] | None = None

    @property
    def owner(self) -> bool:
        """Owns its run directory: takes its lock and writes its record."""
        if self.kind is Kind.SLURM_TASK:
            return self.rank == 0
        return self.kind in (Kind.RUN, Kind.SWEEP_POINT)

    @property
    def records(self) -> bool:
        """The rank whose record reaches the run directory: the owner's own, or rank 0 of the
        ranks torchrun started for it (it reports to the owner)."""
        return self.rank == 0 and self.kind is not Kind.SWEEP_LOGIN

    @property
    def launched(self) -> bool:
        """Started by another process of the run: it plans only, and writes no .hydra/."""
        return self.kind in (Kind.SWEEP_POINT, Kind.TORCHRUN_RANK, Kind.SLURM_TASK)

    @property
    def ranked(self) -> bool:
        """Its log is one rank's (`train_rank<k>.log`)."""
        return self.launched

    @property
    def stops_gracefully(self) -> bool:
        """A signal (Slurm's SIGTERM, submitit's SIGUSR2, Ctrl-C at a local sweep) stops it
        at a step boundary after a checkpoint (run/stop.py)."""
        return self.kind in (Kind.SLURM_TASK, Kind.SWEEP_POINT)

    @property
    def watched_by_torch_elastic(self) -> bool:
        """All ranks of its run are children of one torchrun agent: when one dies, the agent
        stops the others and names the failed rank (launchers/torchrun.py)."""
        return self.kind is Kind.TORCHRUN_RANK and self.torchrun_nodes == 1

    def log_name(self, job_name: str) -> str:
        """The name of this process's log in the run directory (conf/hydra/default.yaml)."""
        return f"{job_name}_rank{self.rank}" if self.ranked else job_name


def of_process(mode: Any = None) -> Role:
    """This process's role: the one place that reads it from the environment and Hydra's
    mode (`mode`: hydra.mode as composed; MULTIRUN in a sweep's login and a Slurm task)."""
    from hydra.types import RunMode

    environ = os.environ
    if environ.get("SUBMITIT_EXECUTOR") == "slurm":
        job = environ.get("SLURM_JOB_ID")
        restarts = int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
        return Role(
            Kind.SLURM_TASK,
            rank=int(environ.get("RANK") or environ.get("SLURM_PROCID") or 0),
            attempt=f"slurm:{job}:{restarts}" if job else None,
            slurm_job=(job, restarts) if job else None,
        )
    launched = environ.get(ROLE_ENV)
    if launched == Kind.TORCHRUN_RANK.value:
        return Role(
            Kind.TORCHRUN_RANK,
            rank=int(environ.get("RANK", "0")),
            torchrun_nodes=int(environ.get("GROUP_WORLD_SIZE", "1")),
            attempt=_torchrun_attempt(environ),
        )
    if launched == Kind.SWEEP_POINT.value:
        return Role(Kind.SWEEP_POINT)
    return Role(Kind.SWEEP_LOGIN if mode == RunMode.MULTIRUN else Kind.RUN)


def _torchrun_attempt(environ: Any) -> str | None:
    """Each restart round has a rendezvous store of its own (distributed_env's
    init_process_group): its address is the round's, the same on every node (restart counts
    are not)."""
    if "TORCHELASTIC_RUN_ID" not in environ:
        return None
    store = f"{environ.get('MASTER_ADDR')}:{environ.get('MASTER_PORT')}"
    return f"torchrun:{environ['TORCHELASTIC_RUN_ID']}:{store}"


def child_environment(kind: Kind) -> dict[str, str]:
    """What a process this one starts for the same run is told of its role."""
    return {ROLE_ENV: kind.value}
