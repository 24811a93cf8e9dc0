"""`launcher=<name>`'s schemas, one per launcher (conf/launcher/<name>.yaml ->
launchers/<name>.py, which starts the ranks these keys describe)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from experiments.errors import ConfigError


def _at_least(key: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ConfigError(f"launcher.{key}", value, f"an integer >= {minimum}")


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
        _at_least("nproc_per_node", self.nproc_per_node, 1)
        _at_least("nnodes", self.nnodes, 1)
        _at_least("node_rank", self.node_rank, 0)
        _at_least("max_restarts", self.max_restarts, 0)
        if not self.monitor_interval > 0:
            raise ConfigError(
                "launcher.monitor_interval", self.monitor_interval, "a number > 0, e.g. 1e-3"
            )
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
        _at_least("nodes", self.nodes, 1)
        _at_least("tasks_per_node", self.tasks_per_node, 1)
        _at_least("gpus_per_node", self.gpus_per_node, 0)
        _at_least("cpus_per_task", self.cpus_per_task, 1)
        _at_least("mem_gb", self.mem_gb, 1)
        _at_least("timeout_min", self.timeout_min, 1)
        _at_least("max_requeues", self.max_requeues, 0)
        _at_least("signal_delay_s", self.signal_delay_s, 0)
        _at_least("array_parallelism", self.array_parallelism, 1)
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
