"""Spikformer-Ti through SpikingJelly's ModelConfig/ModelBuilder seam.

SpikingJelly's SpikformerConfig always builds Spikformer-S; the zoo also has spikformer_ti.
Subclassing keeps SpikformerBuilder's head-wise TP, stage split and FSDP roots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch.nn as nn
from spikingjelly.activation_based import functional
from spikingjelly.activation_based.distributed.vision.config import _resolve_neuron_config
from spikingjelly.activation_based.model.spikformer import (
    SpikformerBuilder,
    SpikformerConfig,
    _convert_batch_norms,
    spikformer_ti,
)


@dataclass(frozen=True)
class SpikformerTinyConfig(SpikformerConfig):
    builder: ClassVar[str] = "experiments.snn.models.spikformer.SpikformerTinyBuilder"


class SpikformerTinyBuilder(SpikformerBuilder):
    def _build_canonical_model(self) -> nn.Module:
        config = self.config
        if not isinstance(config, SpikformerTinyConfig):
            raise TypeError("SpikformerTinyBuilder requires SpikformerTinyConfig.")
        spiking_neuron, neuron_kwargs = _resolve_neuron_config(config.neuron_config)
        model = spikformer_ti(
            T=config.time_steps,
            in_channels=config.in_channels,
            img_size_h=config.image_height,
            img_size_w=config.image_width,
            num_classes=config.num_classes,
            spiking_neuron=spiking_neuron,
            **neuron_kwargs,
        )
        _convert_batch_norms(model)
        functional.set_step_mode(model, config.step_mode)
        return model
