"""ImageNet-style image folders: torchvision's ImageFolder (what SpikingJelly's
`build_imagefolder_datasets` builds) with the recipe's augmentation (data/augment.py: its
defaults are SpikingJelly's transforms), plus a seeded validation split for a folder that has
no `val/` (many small datasets ship one folder per class only).

The class count is a property of the folders, not of the config: `class_names` reads it so
validation can refuse a `data.num_classes` that disagrees before anything starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, Subset

from experiments.data import augment as augmentation
from experiments.errors import ConfigError


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
    augment: dict[str, Any] | None = None,
) -> tuple[Dataset, Dataset]:
    """ImageFolder datasets of `root/<train>` and `root/<val>`; with `val_fraction`, the
    validation set is that fraction of `train/`, drawn by a seeded permutation (the same split
    on every rank and every re-run of the same config), read with the validation transform."""
    from torchvision.datasets import ImageFolder

    recipe = augmentation.parse(augment)
    root = Path(root)
    train_transform = augmentation.train_transform(recipe, image_size)
    validation_transform = augmentation.validation_transform(recipe, image_size)
    train = ImageFolder(root / train_subdirectory, train_transform)
    if val_fraction is None:
        return train, ImageFolder(root / validation_subdirectory, validation_transform)
    validation = ImageFolder(root / train_subdirectory, validation_transform)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(val_split_seed))
    count = max(1, round(len(train) * val_fraction))
    val_indices, train_indices = order[:count].tolist(), order[count:].tolist()
    return Subset(train, sorted(train_indices)), Subset(validation, sorted(val_indices))


def check_options(data: dict[str, Any]) -> None:
    fraction = data.get("val_fraction")
    if fraction is not None and (
        isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1
    ):
        raise ConfigError("data.val_fraction", fraction, "a fraction between 0 and 1, e.g. 0.1")
    augmentation.parse(data.get("augment"))


def check_layout(data: dict[str, Any]) -> None:
    """train/<class>/ and val/<class>/ under the root (or train/ alone with val_fraction)."""
    root = Path(str(data["root"]))
    train = root / str(data.get("train_subdirectory", "train"))
    val = root / str(data.get("validation_subdirectory", "val"))
    if not train.is_dir():
        raise ConfigError(
            "data.root",
            str(root),
            f"no folder {train}; expected an ImageNet-style root with train/<class>/ "
            "and val/<class>/",
        )
    if data.get("val_fraction") is None and not val.is_dir():
        raise ConfigError(
            "data.root",
            str(root),
            f"no folder {val}; add val/<class>/ folders, or set data.val_fraction=0.1 to "
            "hold out a seeded 10% of train/ for validation",
        )


build_imagefolder_datasets.check_options = check_options  # type: ignore[attr-defined]
build_imagefolder_datasets.check_layout = check_layout  # type: ignore[attr-defined]
