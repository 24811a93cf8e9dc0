"""`topology=<name>`'s schema: the parallel degrees every conf/topology/*.yaml sets.

What a topology can be on its own is checked here; what it must be for a launcher's world
size, a model's split or a batch is topology.parallel_dims's (it needs those to answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from experiments.errors import ConfigError


class DataParallel(StrEnum):
    """How the data-parallel ranks hold the model (SpikingJelly's TrainingConfig names)."""

    ddp = "ddp"  # replicated, torch DDP
    fsdp2 = "fsdp2"  # sharded, torch fully_shard


@dataclass
class TopologyConfig:
    """A topology option's keys (conf/topology/*.yaml set every one of them)."""

    name: str  # single | ddp | fsdp2 | channel_tp | pp: `single` runs one rank
    data_parallel: DataParallel
    tensor_parallel_size: int
    pipeline_parallel_size: int
    pipeline_microbatches: int

    def __post_init__(self) -> None:
        for key, size in (
            ("tensor_parallel_size", self.tensor_parallel_size),
            ("pipeline_parallel_size", self.pipeline_parallel_size),
            ("pipeline_microbatches", self.pipeline_microbatches),
        ):
            if size < 1:
                raise ConfigError(f"topology.{key}", size, "a positive integer")
        if self.pipeline_parallel_size == 1 and self.pipeline_microbatches != 1:
            raise ConfigError(
                "topology.pipeline_microbatches",
                self.pipeline_microbatches,
                "micro-batches apply to pipeline parallelism only; use 1 with pp=1",
            )
