"""SEW-ResNet depths and input channels beyond SpikingJelly's built-in SEWResNet34Config.

SpikingJelly's model zoo has sew_resnet18/34/50/101/152 but a distributed-vision config only
for depth 34, and that config requires `in_channels=3` (its factories hard-code a 3-channel
stem). We extend through its own seam (ModelConfig subclass + ModelBuilder): any zoo depth, and
any channel count by swapping the stem convolution (input_conv.py; 2 for event frames). The
builder's BasicBlock TP, its PP split into stages, memopt and FSDP roots stay SpikingJelly's:
they neither touch nor depend on the stem's input channels (its PP and memopt shapes read
`config.in_channels`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch.nn as nn
from spikingjelly.activation_based import functional, neuron
from spikingjelly.activation_based.model import sew_resnet
from spikingjelly.activation_based.model.sew_resnet import SEWResNet34Builder, SEWResNet34Config

from experiments.snn.models.input_conv import with_input_channels
from experiments.snn.models.neuron_key import built_neuron

ZOO = {
    18: sew_resnet.sew_resnet18,
    34: sew_resnet.sew_resnet34,
    50: sew_resnet.sew_resnet50,
    101: sew_resnet.sew_resnet101,
    152: sew_resnet.sew_resnet152,
}


@dataclass(frozen=True)
class SEWResNetConfig(SEWResNet34Config):
    builder: ClassVar[str] = "experiments.snn.models.sew_resnet.SEWResNetBuilder"
    depth: int = 18

    def __post_init__(self) -> None:
        if self.in_channels == 3:
            super().__post_init__()
        else:  # SpikingJelly's checks of every other field, on a 3-channel copy
            dataclasses.replace(self, in_channels=3)
            if self.in_channels < 1:
                raise ValueError("in_channels must be positive.")
        if self.depth not in ZOO:
            raise ValueError(f"depth must be one of {sorted(ZOO)}.")


class SEWResNetBuilder(SEWResNet34Builder):
    """SpikingJelly's SEW-ResNet34 builder (TP, PP split, memopt, FSDP roots) over any zoo
    depth and input channel count."""

    def _build_canonical_model(self) -> nn.Module:
        config = self.config
        if not isinstance(config, SEWResNetConfig):
            raise TypeError("SEWResNetBuilder requires SEWResNetConfig.")
        if config.neuron_config is None:  # SpikingJelly's builder default
            spiking_neuron, neuron_kwargs = (
                neuron.LIFNode,
                {"tau": config.tau, "detach_reset": config.detach_reset},
            )
        else:
            spiking_neuron, neuron_kwargs = built_neuron(config.neuron_config)
        model = ZOO[config.depth](
            pretrained=False,
            cnf=config.connection,
            spiking_neuron=spiking_neuron,
            num_classes=config.num_classes,
            **neuron_kwargs,
        )
        with_input_channels(model, config.in_channels)
        functional.set_step_mode(model, config.step_mode)
        return model
