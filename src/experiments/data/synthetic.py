"""Synthetic images whose class is a fixed random pattern plus noise: learnable in a few
steps, so smoke tests can assert that the loss falls without touching a disk."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def _make(patterns: torch.Tensor, size: int, generator: torch.Generator) -> TensorDataset:
    targets = torch.randint(len(patterns), (size,), generator=generator)
    noise = 0.5 * torch.randn((size, *patterns.shape[1:]), generator=generator)
    return TensorDataset(patterns[targets] + noise, targets)


def build_synthetic_datasets(
    image_size: int = 16,
    train_size: int = 512,
    val_size: int = 128,
    num_classes: int = 10,
    seed: int = 0,
) -> tuple[TensorDataset, TensorDataset]:
    generator = torch.Generator().manual_seed(seed)
    patterns = torch.rand((num_classes, 3, image_size, image_size), generator=generator)
    return _make(patterns, train_size, generator), _make(patterns, val_size, generator)
