"""Topology group: the parallel degrees of a run, in one object every other module asks.

Sizes use SpikingJelly's names; the data-parallel size is derived from the launcher's world
size. Rank layout and mesh order (dp, pp, tp) are SpikingJelly's, so a CPU rank and a CUDA
rank with the same number hold the same shard.
"""

from __future__ import annotations

from dataclasses import dataclass

from experiments.errors import ConfigError

MESH_DIM_NAMES = ("dp", "pp", "tp")


@dataclass(frozen=True)
class Capabilities:
    """What one architecture's SpikingJelly builder can be split into."""

    pipeline_sizes: tuple[int, ...]
    tensor_parallel_divides: int  # TP size must divide this (1 = no TP)
    tensor_parallel_what: str  # the dimension TP splits, for messages
    image_multiple: int = 1  # input side must be a multiple of this
    fixed_image_size: int | None = None
    note: str = ""
    image_reason: str = "its patch stem"  # why image_multiple, for messages
    memopt: bool = True  # whether its builder applies SpikingJelly memopt (CUDA engine)
    # Input the architecture's builder takes: a fixed channel count (None: its in_channels,
    # any), square frames only (one image_size), a smallest side.
    channels: int | None = None
    channels_reason: str = ""
    square_only: bool = False
    min_image_side: int = 1


@dataclass(frozen=True)
class ParallelDims:
    world_size: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    pipeline_microbatches: int
    data_parallel: str

    @property
    def model_parallel_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def data_parallel_size(self) -> int:
        return self.world_size // self.model_parallel_size

    @property
    def mesh_shape(self) -> tuple[int, int, int]:
        return (self.data_parallel_size, self.pipeline_parallel_size, self.tensor_parallel_size)

    def coordinates(self, rank: int) -> tuple[int, int, int]:
        """(dp_rank, pp_rank, tp_rank) of a global rank, as train_classification assigns them."""
        tp = self.tensor_parallel_size
        return (
            rank // self.model_parallel_size,
            (rank // tp) % self.pipeline_parallel_size,
            rank % tp,
        )

    def describe(self) -> str:
        dp, pp, tp = self.mesh_shape
        return f"dp={dp} x pp={pp} x tp={tp} ({self.data_parallel.upper()} over dp)"

    def as_dict(self) -> dict[str, object]:
        return {
            "world_size": self.world_size,
            "shape": list(self.mesh_shape),
            "dim_names": list(MESH_DIM_NAMES),
            "data_parallel": self.data_parallel,
            "pipeline_microbatches": self.pipeline_microbatches,
        }


def parallel_dims(
    topology: dict, world_size: int, caps: Capabilities, model_name: str, batch_size: int
) -> ParallelDims:
    """Check the topology against the world size, the model and the batch, naming the key
    that is wrong (what a topology can be on its own is its schema's: schemas/topology.py)."""
    name = topology["name"]
    tp = topology["tensor_parallel_size"]
    pp = topology["pipeline_parallel_size"]
    micro = topology["pipeline_microbatches"]
    if name == "single" and (world_size != 1 or tp != 1 or pp != 1):
        raise ConfigError(
            "topology",
            name,
            f"'single' runs one rank, but the launcher gives "
            f"{world_size} rank(s) with tp={tp}, pp={pp}; use topology=ddp, "
            "fsdp2, channel_tp or pp for more ranks",
        )
    if tp > 1 and caps.tensor_parallel_divides % tp:
        detail = caps.note or f"{model_name} splits {caps.tensor_parallel_what}"
        valid = [size for size in (1, 2, 4, 8) if caps.tensor_parallel_divides % size == 0]
        raise ConfigError(
            "topology.tensor_parallel_size",
            tp,
            f"{detail}; valid sizes: {', '.join(map(str, valid))}",
        )
    if pp not in caps.pipeline_sizes:
        detail = caps.note or f"{model_name} splits into pipeline stages"
        raise ConfigError(
            "topology.pipeline_parallel_size",
            pp,
            f"{detail}; valid sizes: {', '.join(map(str, caps.pipeline_sizes))}",
        )
    if batch_size % micro:
        raise ConfigError(
            "topology.pipeline_microbatches", micro, f"must divide trainer.batch_size={batch_size}"
        )
    if world_size % (tp * pp):
        raise ConfigError(
            "topology",
            f"tp={tp} x pp={pp}",
            f"the launcher's world size {world_size} is not divisible by TP x PP = "
            f"{tp * pp}; use a world size that is a multiple of {tp * pp}",
        )
    return ParallelDims(world_size, tp, pp, micro, topology["data_parallel"])
