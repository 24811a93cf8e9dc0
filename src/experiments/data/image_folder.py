"""ImageNet-style image folders: SpikingJelly's own builder, plus a seeded validation split
for a folder that has no `val/` (many small datasets ship one folder per class only).

The class count is a property of the folders, not of the config: `class_names` reads it so
validation can refuse a `data.num_classes` that disagrees before anything starts.
"""

from __future__ import annotations

from pathlib import Path

import torch
from spikingjelly.activation_based.distributed.vision import (
    build_imagefolder_datasets as spikingjelly_imagefolder,
)
from torch.utils.data import Dataset, Subset


def class_names(folder: Path) -> list[str]:
    """The classes torchvision's ImageFolder will find: one sub-folder each, sorted."""
    return sorted(entry.name for entry in folder.iterdir() if entry.is_dir())


def build_imagefolder_datasets(
    root: str | Path,
    image_size: int = 224,
    train_subdirectory: str = "train",
    validation_subdirectory: str = "val",
    val_fraction: float | None = None,
    val_split_seed: int = 0,
) -> tuple[Dataset, Dataset]:
    """SpikingJelly's image-folder datasets; with `val_fraction`, the validation set is that
    fraction of `train/`, drawn by a seeded permutation (the same split on every rank and
    every re-run of the same config), read with the validation transform."""
    if val_fraction is None:
        return spikingjelly_imagefolder(
            root, image_size, train_subdirectory, validation_subdirectory
        )
    train, validation = spikingjelly_imagefolder(
        root, image_size, train_subdirectory, train_subdirectory
    )
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(val_split_seed))
    count = max(1, round(len(train) * val_fraction))
    val_indices, train_indices = order[:count].tolist(), order[count:].tolist()
    return Subset(train, sorted(train_indices)), Subset(validation, sorted(val_indices))
