"""`launcher=<name>`'s schemas, one per launcher (conf/launcher/<name>.yaml ->
launchers/<name>.py, which starts the ranks these keys describe)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from experiments.errors import ConfigError
from experiments.validation import integer, positive_number


@dataclass
class LocalLauncherConfig:
    """This process is the only rank."""

    name: str
    warm_points: bool  # a -m sweep's points fork one warm process (launchers/warm_points.py)


@dataclass
class TorchrunLauncherConfig:
    """torchrun's own flags, under its names (launchers/torchrun.py writes its command)."""

    name: str
    nproc_per_node: int
    nnodes: int
    node_rank: int
    rdzv_backend: str
    rdzv_endpoint: str | None  # host:port for multi-node; null: standalone on this node
    rdzv_id: str | None  # null: a run-specific id
    max_restarts: int
    monitor_interval: float  # seconds between torchrun's checks of its ranks

    def __post_init__(self) -> None:
        integer(self.nproc_per_node, "launcher.nproc_per_node", minimum=1)
        integer(self.nnodes, "launcher.nnodes", minimum=1)
        integer(self.node_rank, "launcher.node_rank", minimum=0)
        integer(self.max_restarts, "launcher.max_restarts", minimum=0)
        positive_number(self.monitor_interval, "launcher.monitor_interval")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ConfigError(
                "launcher.rdzv_endpoint",
                None,
                "multi-node torchrun needs a rendezvous endpoint, e.g. node001:29400",
            )


@dataclass
class SlurmLauncherConfig:
    """What each Slurm job asks for; conf/launcher/slurm.yaml maps these keys onto
    hydra-submitit-launcher's (hydra.launcher), and launchers/slurm.py reads them."""

    name: str
    nodes: int
    tasks_per_node: int  # one task = one torch.distributed rank
    gpus_per_node: int  # 0: no GPU asked for (SpikingJelly's loop then runs on CPUs)
    cpus_per_task: int
    mem_gb: int
    timeout_min: int
    partition: str | None
    account: str | None
    qos: str | None
    constraint: str | None
    additional_parameters: dict[str, Any]  # sbatch options, e.g. {mail-type: END}
    setup: list[str]  # shell lines run before the job's command
    max_requeues: int  # requeues after a time limit or preemption
    signal_delay_s: int  # SIGUSR2 this long before the time limit
    wait: bool  # false: submit, record it in the sweep directory, exit
    snapshot: bool  # jobs import a copy of the code taken at submission
    array_parallelism: int  # at most this many points of a sweep at once

    def __post_init__(self) -> None:
        integer(self.nodes, "launcher.nodes", minimum=1)
        integer(self.tasks_per_node, "launcher.tasks_per_node", minimum=1)
        integer(self.gpus_per_node, "launcher.gpus_per_node", minimum=0)
        integer(self.cpus_per_task, "launcher.cpus_per_task", minimum=1)
        integer(self.mem_gb, "launcher.mem_gb", minimum=1)
        integer(self.timeout_min, "launcher.timeout_min", minimum=1)
        integer(self.max_requeues, "launcher.max_requeues", minimum=0)
        integer(self.signal_delay_s, "launcher.signal_delay_s", minimum=0)
        integer(self.array_parallelism, "launcher.array_parallelism", minimum=1)
        if self.gpus_per_node and self.tasks_per_node != self.gpus_per_node:
            raise ConfigError(
                "launcher.tasks_per_node",
                self.tasks_per_node,
                f"a GPU run needs one task (rank) per GPU; with launcher.gpus_per_node="
                f"{self.gpus_per_node} use launcher.tasks_per_node={self.gpus_per_node}",
            )


# launcher.name -> its schema (experiments.launchers.LAUNCHERS names the same three)
LAUNCHER_SCHEMAS: dict[str, type] = {
    "local": LocalLauncherConfig,
    "torchrun": TorchrunLauncherConfig,
    "slurm": SlurmLauncherConfig,
}
