"""SEW-ResNet's networks for DVS128 Gesture and CIFAR10-DVS (Fang et al., NeurIPS 2021).

The official code (fangwei123456/Spike-Element-Wise-ResNet @ cfc547c, `dvsgesture/smodels.py`
and `cifar10dvs/smodels.py`, `ResNetN` and `SEWResNet`) builds them from a layer list; every
entry there is `{'channels': C, 'up_kernel_size': 1, 'mid_channels': C, 'num_blocks': 1,
'block_type': 'sew', 'k_pool': 2}`, so a network is its list of stage widths:

- DVS128 Gesture: 7 x 32 (smodels.py:136-144), 11 classes;
- CIFAR10-DVS: 4 x 64, then 3 x 128, 10 classes.

Each stage: a 1x1 conv + BN + neuron where the width changes (`conv1x1`, :15-22), one SEW block
(conv3x3 + BN + neuron twice, then ADD/AND/IAND with its input; :24-43), a 2x2 max-pool. Then
flatten and a Linear layer on the mean over time (:130-133). SpikingJelly 2.0 has no such
network (its `parametric_lif_net` nets are the PLIF paper's), so this is a ModelConfig +
ModelBuilder of our own through its seam, trained whole on every rank (no TP or PP split: about
0.13 M and 1.19 M parameters).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn as nn
from spikingjelly.activation_based import functional, layer
from spikingjelly.activation_based.distributed.vision import ModelConfig
from spikingjelly.activation_based.distributed.vision.config import NeuronConfig

from experiments.snn.models.neuron_key import built_neuron
from experiments.snn.models.whole_model import WholeModelBuilder

CONNECTIONS = ("ADD", "AND", "IAND")
# The neuron of both official networks: cext MultiStepParametricLIFNode(init_tau=2.0,
# detach_reset=True) (smodels.py:12,21), whose default surrogate is ATan with alpha 2.
PLIF = NeuronConfig(
    "spikingjelly.activation_based.neuron.ParametricLIFNode",
    {"init_tau": 2.0, "detach_reset": True},
    "spikingjelly.activation_based.surrogate.ATan",
    {"alpha": 2.0},
)


@dataclass(frozen=True)
class SEWDVSConfig(ModelConfig):
    builder: ClassVar[str] = "experiments.snn.models.sew_dvs.SEWDVSBuilder"
    num_classes: int = 11
    image_height: int = 128
    image_width: int = 128
    in_channels: int = 2
    connection: str = "ADD"
    stage_channels: list[int] = field(default_factory=lambda: [32] * 7)
    neuron_config: NeuronConfig = field(default_factory=lambda: copy.deepcopy(PLIF))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step_mode != "m":
            raise ValueError("the SEW DVS networks are multi-step: step_mode must be 'm'.")
        if self.connection not in CONNECTIONS:
            raise ValueError(f"connection must be one of {', '.join(CONNECTIONS)}.")
        if not self.stage_channels or any(
            isinstance(width, bool) or not isinstance(width, int) or width < 1
            for width in self.stage_channels
        ):
            raise ValueError("stage_channels must be a non-empty list of positive integers.")
        if self.in_channels < 1 or self.image_height < 1 or self.image_width < 1:
            raise ValueError("in_channels, image_height and image_width must be positive.")

    @property
    def smallest_side(self) -> int:
        return 2 ** len(self.stage_channels)

    @property
    def features(self) -> int:
        """Inputs of the Linear layer: the official code measures them on a 128x128 frame
        (smodels.py:122-127); here on the configured one, the same number at 128x128."""
        pools = len(self.stage_channels)
        return self.stage_channels[-1] * (self.image_height >> pools) * (self.image_width >> pools)


def _conv_bn_neuron(
    in_channels: int, out_channels: int, kernel_size: int, make_neuron: Any
) -> nn.Sequential:
    """`conv3x3` / `conv1x1` of smodels.py:6-22: conv (no bias) + BN over time, then a neuron."""
    return nn.Sequential(
        layer.SeqToANNContainer(
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size=kernel_size,
                padding=kernel_size // 2,
                bias=False,
            ),
            nn.BatchNorm2d(out_channels),
        ),
        make_neuron(),
    )


class SEWBlock(nn.Module):
    def __init__(self, channels: int, connection: str, make_neuron: Any) -> None:
        super().__init__()
        self.connection = connection
        self.conv = nn.Sequential(
            _conv_bn_neuron(channels, channels, 3, make_neuron),
            _conv_bn_neuron(channels, channels, 3, make_neuron),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        if self.connection == "ADD":
            return out + x
        if self.connection == "AND":
            return out * x
        return x * (1.0 - out)  # IAND


class SEWDVSNet(nn.Module):
    """Input [T, N, C, H, W] (SpikingJelly's loop gives frames time-first); output [N, classes]."""

    def __init__(self, config: SEWDVSConfig, make_neuron: Any) -> None:
        super().__init__()
        if config.features == 0:  # planning refuses it first (capabilities: min_image_side)
            raise ValueError(
                f"frames of {config.image_height}x{config.image_width}: each of the "
                f"{len(config.stage_channels)} stages halves them; the network needs "
                f"{config.smallest_side} pixels a side."
            )
        layers: list[nn.Module] = []
        channels = config.in_channels
        for width in config.stage_channels:
            if width != channels:
                layers.append(_conv_bn_neuron(channels, width, 1, make_neuron))
            channels = width
            layers.append(SEWBlock(width, config.connection, make_neuron))
            layers.append(layer.SeqToANNContainer(nn.MaxPool2d(2, 2)))
        layers.append(nn.Flatten(2))
        self.conv = nn.Sequential(*layers)
        self.out = nn.Linear(config.features, config.num_classes)

    def forward(self, x_seq: torch.Tensor) -> torch.Tensor:
        return self.out(self.conv(x_seq).mean(0))


class SEWDVSBuilder(WholeModelBuilder):
    def _fsdp_roots(self, model: nn.Module) -> tuple[str, ...]:
        return tuple(name for name, module in model.named_modules() if isinstance(module, SEWBlock))

    def _build_canonical_model(self) -> nn.Module:
        config = self.config
        if not isinstance(config, SEWDVSConfig):
            raise TypeError("SEWDVSBuilder requires SEWDVSConfig.")
        spiking_neuron, kwargs = built_neuron(config.neuron_config)

        def make_neuron() -> nn.Module:
            return spiking_neuron(**copy.deepcopy(kwargs), step_mode="m")

        model = SEWDVSNet(config, make_neuron)
        functional.set_step_mode(model, config.step_mode)
        return model
