"""Training augmentation of event frames (`[T, 2, H, W]` tensors), as the papers' code applies
it: one random transform per sample, the same for all T frames.

No library ships these: Spikformer's CIFAR10-DVS code (ZK-Zhou/spikformer, commit b196880,
`cifar10dvs/train.py` and `cifar10dvs/autoaugment.py`) flips each sample horizontally with
p=0.5 and then applies its `SNNAugmentWide`, a TrivialAugment over six ops on frames; both are
written here from that code (torchvision's functional ops, as it calls them), since no
package provides them. The default is none: SpikingJelly's and SEW-ResNet's DVS code train on
the frames as integrated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

from experiments.errors import ConfigError
from experiments.known_keys import refuse_unknown

POLICIES = ("snn_augment_wide",)


@dataclass(frozen=True)
class EventAugment:
    hflip: float = 0.0  # probability of a horizontal flip of every frame of a sample
    policy: str | None = None  # snn_augment_wide: Spikformer's TrivialAugment for frames

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        if self.hflip > 0 and torch.rand(1).item() < self.hflip:
            frames = frames.flip(-1)
        if self.policy == "snn_augment_wide":
            frames = snn_augment_wide(frames)
        return frames

    def active(self) -> bool:
        return self.hflip > 0 or self.policy is not None


def parse(values: dict[str, Any] | None, key: str = "data.augment") -> EventAugment | None:
    """The event augment node, checked key by key; None when it does nothing."""
    if values is None:
        return None
    refuse_unknown(f"{key}.", values, frozenset(field.name for field in fields(EventAugment)), key)
    augment = EventAugment(**values)
    if (
        isinstance(augment.hflip, bool)
        or not isinstance(augment.hflip, (int, float))
        or not (0 <= augment.hflip <= 1)
    ):
        raise ConfigError(f"{key}.hflip", augment.hflip, "a probability from 0 to 1, e.g. 0.5")
    if augment.policy is not None and augment.policy not in POLICIES:
        raise ConfigError(f"{key}.policy", augment.policy, f"null or {', '.join(POLICIES)}")
    return augment if augment.active() else None


# SNNAugmentWide's op space (Spikformer, cifar10dvs/autoaugment.py): name -> (bins, signed).
_BINS = 31


def _magnitudes() -> dict[str, tuple[torch.Tensor, bool]]:
    return {
        "Identity": (torch.tensor(0.0), False),
        "ShearX": (torch.linspace(-0.3, 0.3, _BINS), True),
        "TranslateX": (torch.linspace(-5.0, 5.0, _BINS), True),
        "TranslateY": (torch.linspace(-5.0, 5.0, _BINS), True),
        "Rotate": (torch.linspace(-30.0, 30.0, _BINS), True),
        "Cutout": (torch.linspace(1.0, 30.0, _BINS), True),
    }


def snn_augment_wide(frames: torch.Tensor) -> torch.Tensor:
    """One op drawn uniformly, its magnitude drawn from 31 bins and negated with p=0.5 (as the
    original draws them, in the same order of torch draws); nearest-neighbour interpolation,
    zero fill; Cutout is torchvision's RandomErasing(p=1, scale=(0.001, 0.11), ratio=(1, 1))."""
    from torchvision.transforms import InterpolationMode, RandomErasing
    from torchvision.transforms import functional as F

    space = _magnitudes()
    name = list(space)[int(torch.randint(len(space), (1,)).item())]
    magnitudes, signed = space[name]
    magnitude = (
        float(magnitudes[torch.randint(len(magnitudes), (1,), dtype=torch.long)].item())
        if magnitudes.ndim > 0
        else 0.0
    )
    if signed and torch.randint(2, (1,)):
        magnitude *= -1.0
    nearest = InterpolationMode.NEAREST
    if name == "Cutout":
        return RandomErasing(p=1, scale=(0.001, 0.11), ratio=(1, 1))(frames)
    if name == "ShearX":
        return F.affine(
            frames,
            angle=0.0,
            translate=[0, 0],
            scale=1.0,
            shear=[math.degrees(magnitude), 0.0],
            interpolation=nearest,
        )
    if name == "TranslateX":
        return F.affine(
            frames,
            angle=0.0,
            translate=[int(magnitude), 0],
            scale=1.0,
            shear=[0.0, 0.0],
            interpolation=nearest,
        )
    if name == "TranslateY":
        return F.affine(
            frames,
            angle=0.0,
            translate=[0, int(magnitude)],
            scale=1.0,
            shear=[0.0, 0.0],
            interpolation=nearest,
        )
    if name == "Rotate":
        return F.rotate(frames, magnitude, interpolation=nearest)
    return frames
