"""Synthetic images whose class is a fixed random binary pattern plus noise: strong enough
inputs for spiking neurons to fire from the first step, so smoke tests and benchmarks can
assert that the loss falls within a few steps without touching a disk."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def _make(patterns: torch.Tensor, size: int, generator: torch.Generator) -> TensorDataset:
    targets = torch.randint(len(patterns), (size,), generator=generator)
    noise = 0.2 * torch.randn((size, *patterns.shape[1:]), generator=generator)
    return TensorDataset(patterns[targets] + noise, targets)


def build_synthetic_datasets(
    image_size: int = 16,
    train_size: int = 512,
    val_size: int = 128,
    num_classes: int = 10,
    seed: int = 0,
) -> tuple[TensorDataset, TensorDataset]:
    generator = torch.Generator().manual_seed(seed)
    shape = (num_classes, 3, image_size, image_size)
    patterns = 2.0 * (torch.rand(shape, generator=generator) > 0.5).float()
    return _make(patterns, train_size, generator), _make(patterns, val_size, generator)
