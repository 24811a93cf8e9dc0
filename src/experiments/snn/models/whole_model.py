"""A ModelBuilder for networks that SpikingJelly's loop trains whole on every rank.

SpikingJelly's builders for SEW-ResNet and Spikformer shard channels (TP) and cut stages (PP);
the zoo's factories and the SEW DVS networks have no such split. Their builders return the
whole model, with FSDP2 roots, and refuse a TP group, pipeline stages or memopt with the
library's ValueError (planning refuses them first, through the model's capabilities).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from spikingjelly.activation_based.distributed.vision import ModelBuilder


class WholeModelBuilder(ModelBuilder):
    def _name(self) -> str:
        """The network, in the library's error messages."""
        return type(self.config).__name__

    def _fsdp_roots(self, model: nn.Module) -> tuple[str, ...]:
        """Module names fully_shard wraps, inner to outer."""
        raise NotImplementedError

    def _pipeline_stage(self, model: nn.Module, rank: int, size: int) -> nn.Module:
        if size != 1:
            raise ValueError(f"{self._name()} has no pipeline split.")
        return model

    def build(
        self,
        *,
        process_group: dist.ProcessGroup | None,
        memopt_process_group: dist.ProcessGroup | None,
        pipeline_rank: int,
        pipeline_size: int,
        pipeline_microbatches: int,
        device: torch.device,
        micro_batch_size: int,
        memopt_level: int,
        memopt_compress_inputs: bool,
        memopt_checkpoint_budget: str,
    ) -> tuple[nn.Module, tuple[str, ...], tuple[int, ...] | None, tuple[int, ...] | None]:
        if process_group is not None and dist.get_world_size(process_group) > 1:
            raise ValueError(f"{self._name()} has no tensor-parallel shard.")
        if memopt_level:
            raise ValueError(f"{self._name()} has no memopt split.")
        model = self._pipeline_stage(self._build_canonical_model(), pipeline_rank, pipeline_size)
        model.to(device)
        return model, self._fsdp_roots(model), None, None
