"""Spikformer of any size through SpikingJelly's ModelConfig/ModelBuilder seam.

SpikingJelly's `Spikformer` class takes the depth, width, heads, MLP ratio and patch size, but
its `SpikformerConfig` always builds Spikformer-S (384 dims, 12 heads, 6 blocks). The papers'
models (Spikformer-4-384 on CIFAR, 8-384/8-512/8-768 on ImageNet, 2-256 on CIFAR10-DVS) are
`SpikformerDimsConfig`s: a subclass whose builder keeps SpikformerBuilder's head-wise TP, its
FSDP roots and (for 4 or 6 blocks) its stage split, and adds what the official code
(ZK-Zhou/spikformer) does differently where that changes the function (docs/models.md):

- `pool_after_neuron`: the official patch stem max-pools the spikes (conv, BN, LIF, pool;
  SPK:cifar10/model.py:150-158, imagenet/model.py:149-167); SpikingJelly pools before the LIF.
- `attention_scale`: 0.125 in the CIFAR and ImageNet code, 0.25 in the CIFAR10-DVS code
  (SPK:cifar10dvs/model.py:45); SpikingJelly fixes 0.125.
- `attention_v_threshold`: the attention LIF fires at 0.5 in every official model; SpikingJelly
  keeps 0.5 only for its own default neuron, and gives a configured neuron's threshold to all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.distributed as dist
import torch.nn as nn
from spikingjelly.activation_based import functional, layer, memopt
from spikingjelly.activation_based.model.spikformer import (
    Spikformer,
    SpikformerBlock,
    SpikformerBuilder,
    SpikformerConfig,
    SpikformerPatchStem,
    _convert_batch_norms,
    _SpikformerHead,
)

from experiments.snn.models.neuron_key import built_neuron

PATCH_SIZES = (4, 16)  # SpikingJelly's stem: 2 (patch 4) or 4 (patch 16) 2x max-pools
STAGE_SPLITS = (4, 6)  # block counts SpikingJelly's own Spikformer stage split handles


@dataclass(frozen=True)
class SpikformerDimsConfig(SpikformerConfig):
    builder: ClassVar[str] = "experiments.snn.models.spikformer.SpikformerDimsBuilder"
    patch_size: int = 16
    embed_dims: int = 384
    num_heads: int = 12
    depths: int = 6
    mlp_ratio: float = 4.0
    attention_scale: float = 0.125
    attention_v_threshold: float = 0.5
    pool_after_neuron: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.patch_size not in PATCH_SIZES:
            raise ValueError(f"patch_size must be one of {PATCH_SIZES}.")
        if self.depths < 1 or self.num_heads < 1 or self.embed_dims < 8:
            raise ValueError("depths and num_heads must be >= 1, embed_dims >= 8.")
        if self.embed_dims % 8 or self.embed_dims % self.num_heads:
            raise ValueError(
                "embed_dims must be divisible by 8 (the stem's first width is embed_dims/8) "
                "and by num_heads."
            )
        if self.mlp_ratio <= 0 or self.attention_scale <= 0 or self.attention_v_threshold <= 0:
            raise ValueError("mlp_ratio, attention_scale and attention_v_threshold must be > 0.")

    @property
    def token_grid(self) -> tuple[int, int]:
        """Tokens along (height, width): each of the stem's max-pools (3, 2, 1) halves a side,
        rounding up."""
        pools = int(math.log2(self.patch_size))
        return (-(-self.image_height // 2**pools), -(-self.image_width // 2**pools))


@dataclass(frozen=True)
class SpikformerTinyConfig(SpikformerDimsConfig):
    """Spikformer-Ti: SpikingJelly's spikformer_ti (256 dims, 8 heads, 4 blocks, patch 16)."""

    embed_dims: int = 256
    num_heads: int = 8
    depths: int = 4


class NeuronThenPool(nn.Module):
    """A stem stage in the official order: conv, BN, LIF, then max-pool over the spikes. It
    keeps SpikingJelly's `conv_bn.block` (conv at 0, BN at 1) and `neuron`, so the builder's
    stem TP and a checkpoint's names are those of SpikingJelly's stage."""

    def __init__(self, stage: nn.Module) -> None:
        super().__init__()
        conv, batch_norm, pool = stage.conv_bn.block
        stage.conv_bn.block = layer.SeqToANNContainer(conv, batch_norm)
        self.conv_bn = stage.conv_bn
        self.neuron = stage.neuron
        self.pool = layer.SeqToANNContainer(pool)

    def forward(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.pool(self.neuron(self.conv_bn(x_seq)))


class SpikformerDimsBuilder(SpikformerBuilder):
    def _build_canonical_model(self) -> nn.Module:
        config = self.config
        if not isinstance(config, SpikformerDimsConfig):
            raise TypeError("SpikformerDimsBuilder requires SpikformerDimsConfig.")
        spiking_neuron, neuron_kwargs = (
            (None, {}) if config.neuron_config is None else built_neuron(config.neuron_config)
        )
        model = Spikformer(
            T=config.time_steps,
            in_channels=config.in_channels,
            img_size_h=config.image_height,
            img_size_w=config.image_width,
            patch_size=config.patch_size,
            num_classes=config.num_classes,
            embed_dims=config.embed_dims,
            num_heads=config.num_heads,
            mlp_ratio=config.mlp_ratio,
            depths=config.depths,
            spiking_neuron=spiking_neuron,
            **neuron_kwargs,
        )
        for block in model.blocks:
            block.attn.scale = config.attention_scale
            block.attn.attn_lif.v_threshold = config.attention_v_threshold
        if config.pool_after_neuron:
            stages = model.patch_embed.stages
            for index, stage in enumerate(stages):
                if len(stage.conv_bn.block) == 3:  # conv, BN, max-pool
                    stages[index] = NeuronThenPool(stage)
        _convert_batch_norms(model)
        functional.set_step_mode(model, config.step_mode)
        return model

    def _pipeline_stage(self, model: nn.Module, rank: int, size: int) -> nn.Module:
        """SpikingJelly's split for 4 or 6 blocks (the same stages, the same checkpoint
        names); otherwise the blocks in `size` equal runs, the stem before the first and the
        head after the last."""
        depth = len(model.blocks)
        if size == 1 or depth in STAGE_SPLITS:
            return super()._pipeline_stage(model, rank, size)
        if depth % size:
            raise ValueError(f"{depth} Spikformer blocks do not split into {size} stages.")
        per_stage = depth // size
        blocks = list(model.blocks[rank * per_stage : (rank + 1) * per_stage])
        parts: list[nn.Module] = [model.patch_embed] if rank == 0 else []
        if rank == size - 1:
            parts.append(_SpikformerHead(nn.Sequential(*blocks), model.head))
        else:
            parts.extend(blocks)
        return nn.Sequential(*parts)

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
        """SpikformerBuilder.build's steps (head-wise TP, the stage, FSDP roots, memopt) with
        the stage boundaries of this width and token grid: SpikingJelly's own assume
        Spikformer-S (384 dims, patch 16, sides divisible by 16)."""
        config = self.config
        model = self._build_canonical_model()
        if process_group is not None and dist.get_world_size(process_group) > 1:
            self._parallelize_stem(model, process_group)
            for block in model.blocks:
                self._parallelize_block(block, process_group)
        model = self._pipeline_stage(model, pipeline_rank, pipeline_size)
        roots = tuple(
            name
            for name, module in model.named_modules()
            if isinstance(module, (SpikformerPatchStem, SpikformerBlock))
        )
        model.to(device)
        batch = micro_batch_size // pipeline_microbatches
        image = (config.in_channels, config.image_height, config.image_width)
        first = (batch, config.time_steps, *image)  # stage 0 takes the batch-first sequence
        between = (config.time_steps, batch, config.embed_dims, *config.token_grid)
        last = (config.time_steps, batch, config.num_classes)
        if memopt_level:
            trial = (batch, *image) if pipeline_size == 1 else (config.time_steps, batch, *image)
            dummy = torch.zeros(trial if pipeline_rank == 0 else between, device=device)
            memopt.optimize_memory(
                model,
                SpikformerBlock,
                lambda current: current(dummy),
                level=memopt_level,
                checkpoint_budget=memopt_checkpoint_budget,
                compress=False,
                split_fn=self._memopt_split,
                can_chunk=self._memopt_can_chunk,
                process_group=memopt_process_group,
            )
        if pipeline_size == 1:
            return model, roots, None, None
        return (
            model,
            roots,
            first if pipeline_rank == 0 else between,
            last if pipeline_rank == pipeline_size - 1 else between,
        )
