"""The first convolution of an ImageNet-style network, for input of another channel count.

SpikingJelly's SEW-ResNet, spiking ResNet and spiking VGG factories hard-code a 3-channel stem
(`layer.Conv2d(3, 64, ...)`), and its SEWResNet34Config requires `in_channels=3`. Event frames
have 2 channels (the two polarities), so the builders of our configs swap that one layer for the
same convolution over `in_channels`, initialised as the factories initialise every convolution
(Kaiming normal, fan-out): the rest of the network, its TP shards and PP stages are unchanged.
"""

from __future__ import annotations

import torch.nn as nn


def with_input_channels(model: nn.Module, in_channels: int) -> nn.Module:
    """`model` with its first Conv2d (in module order: the stem) taking `in_channels`."""
    for parent in model.modules():
        for name, child in parent.named_children():
            if not isinstance(child, nn.Conv2d):
                continue
            if child.in_channels != in_channels:
                setattr(parent, name, _conv_like(child, in_channels))
            return model
    raise ValueError(f"{type(model).__name__} has no Conv2d to take {in_channels} channels")


def _conv_like(conv: nn.Conv2d, in_channels: int) -> nn.Conv2d:
    replacement = type(conv)(
        in_channels,
        conv.out_channels,
        kernel_size=conv.kernel_size,
        stride=conv.stride,
        padding=conv.padding,
        dilation=conv.dilation,
        groups=conv.groups,
        bias=conv.bias is not None,
        padding_mode=conv.padding_mode,
    ).to(conv.weight.device)
    if hasattr(conv, "step_mode"):  # SpikingJelly's layer.Conv2d
        replacement.step_mode = conv.step_mode
    nn.init.kaiming_normal_(replacement.weight, mode="fan_out", nonlinearity="relu")
    return replacement
