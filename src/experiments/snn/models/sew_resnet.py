"""SEW-ResNet depths beyond SpikingJelly's built-in SEWResNet34Config.

SpikingJelly's model zoo has sew_resnet18/34/50/101/152 but a distributed-vision config only
for depth 34. We extend through its own seam (ModelConfig subclass + ModelBuilder) so the
same TrainingConfig runs on SpikingJelly's trainer on CUDA and on CPU ranks alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch.nn as nn
from spikingjelly.activation_based import functional, neuron
from spikingjelly.activation_based.distributed.vision.config import _resolve_neuron_config
from spikingjelly.activation_based.model import sew_resnet
from spikingjelly.activation_based.model.sew_resnet import SEWResNet34Builder, SEWResNet34Config

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
        super().__post_init__()
        if self.depth not in ZOO:
            raise ValueError(f"depth must be one of {sorted(ZOO)}.")


class SEWResNetBuilder(SEWResNet34Builder):
    """SpikingJelly's SEW-ResNet34 builder (TP, PP split, memopt, FSDP roots) over any zoo depth."""

    def _build_canonical_model(self) -> nn.Module:
        config = self.config
        if not isinstance(config, SEWResNetConfig):
            raise TypeError("SEWResNetBuilder requires SEWResNetConfig.")
        spiking_neuron, neuron_kwargs = _resolve_neuron_config(config.neuron_config)
        if spiking_neuron is None:
            spiking_neuron = neuron.LIFNode
            neuron_kwargs = {"tau": config.tau, "detach_reset": config.detach_reset}
        model = ZOO[config.depth](
            pretrained=False,
            cnf=config.connection,
            spiking_neuron=spiking_neuron,
            num_classes=config.num_classes,
            **neuron_kwargs,
        )
        functional.set_step_mode(model, config.step_mode)
        return model
