"""Labelled images for MMGen's class-conditional recipes, registered in MMGen's DATASETS.

MMGen's conditional recipes read `mmcls.CIFAR10` (MMClassification and the CIFAR archive); our
data groups already write labelled image folders, so a conditional run reads those here, classes
numbered as torchvision's ImageFolder does (label 3 of `data=digits` is the digit 3). A composed
config names this module in `custom_imports`, so MMGen's own tools load the dumped
`mmgen_config.py` without us.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from experiments.errors import ConfigError

DATASET_TYPE = "LabelledImageFolder"
IMAGE_KEY = "img"  # BasiccGAN.train_step: data_batch["img"], data_batch["gt_label"]
LABEL_KEY = "gt_label"
SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def class_folders(root: Path) -> list[str]:
    """The class names of an image folder: its sub-folders, sorted (ImageFolder's order)."""
    if not root.is_dir():
        return []
    return sorted(entry.name for entry in os.scandir(root) if entry.is_dir())


def count_classes(data: dict[str, Any], image_root: Path) -> int:
    """Classes of the run's data, known before any file is written (planning): the data
    group's `num_classes` (digits), else the class folders of an image folder."""
    declared = data.get("num_classes")
    if isinstance(declared, int) and declared > 1 and data.get("name") == "digits":
        return declared
    classes = class_folders(image_root)
    if len(classes) < 2:
        raise ConfigError(
            "data",
            data.get("name"),
            f"a class-conditional GAN needs labelled images: class sub-folders in {image_root} "
            f"(found {len(classes)}); use data=digits or an ImageNet-style folder",
        )
    return len(classes)


def train_data(image_root: Path, scale: int, channels: int) -> dict[str, Any]:
    """data.train of a conditional recipe: our labelled folder through MMGen's own transforms
    (the ones its unconditional recipes use, keyed `img`), at the run's scale and channels."""
    return dict(
        type=DATASET_TYPE,
        imgs_root=str(image_root),
        pipeline=[
            dict(
                type="LoadImageFromFile",
                key=IMAGE_KEY,
                flag="grayscale" if channels == 1 else "color",
                io_backend="disk",
            ),
            dict(type="Resize", keys=[IMAGE_KEY], scale=(scale, scale)),
            dict(
                type="Normalize",
                keys=[IMAGE_KEY],
                mean=[127.5] * channels,
                std=[127.5] * channels,
                to_rgb=False,  # mmcv reads BGR; MMGen trains on BGR (its sample hook flips)
            ),
            dict(type="ImageToTensor", keys=[IMAGE_KEY]),
            dict(type="ToTensor", keys=[LABEL_KEY]),
            dict(type="Collect", keys=[IMAGE_KEY, LABEL_KEY], meta_keys=[f"{IMAGE_KEY}_path"]),
        ],
    )


def register() -> None:
    """Add LabelledImageFolder to MMGen's DATASETS (idempotent; imports mmgen)."""
    from experiments.gan import mmgen_compat

    mmgen_compat.install_ada_stub()
    from mmgen.datasets.builder import DATASETS
    from mmgen.datasets.pipelines import Compose
    from torch.utils.data import Dataset

    if DATASET_TYPE in DATASETS.module_dict:
        return

    @DATASETS.register_module(name=DATASET_TYPE)
    class LabelledImageFolder(Dataset):
        """<imgs_root>/<class>/<image>: each item is the pipeline applied to
        {img_path, gt_label}; gt_label is a 0-d int64 array (collates to shape (N,))."""

        def __init__(self, imgs_root: str, pipeline: list[Any], test_mode: bool = False) -> None:
            super().__init__()
            self.imgs_root = imgs_root
            self.pipeline = Compose(pipeline)
            self.test_mode = test_mode
            root = Path(imgs_root)
            self.CLASSES = class_folders(root)
            self.samples = [
                (str(path), index)
                for index, name in enumerate(self.CLASSES)
                for path in sorted((root / name).rglob("*"))
                if path.suffix.lower() in SUFFIXES
            ]
            if not self.samples:
                raise FileNotFoundError(f"no labelled images under {imgs_root}/<class>/")

        def __len__(self) -> int:
            return len(self.samples)

        def __getitem__(self, idx: int) -> dict[str, Any]:
            path, label = self.samples[idx]
            results = {f"{IMAGE_KEY}_path": path, LABEL_KEY: np.array(label, dtype=np.int64)}
            return self.pipeline(results)

        def __repr__(self) -> str:
            return (
                f"{DATASET_TYPE}: {len(self)} images in {len(self.CLASSES)} classes "
                f"under {self.imgs_root}"
            )


try:  # `custom_imports` of a dumped config imports this module: register for MMGen's tools
    register()
except ModuleNotFoundError as missing:  # an SNN-only install: nothing to register into
    if (missing.name or "").split(".")[0] not in ("mmgen", "mmcv"):
        raise
