"""Event-camera datasets through SpikingJelly's own dataset classes, as frames: DVS128 Gesture,
CIFAR10-DVS, N-MNIST and N-Caltech101.

Each sample is SpikingJelly's integration of its events into `frames_number` frames
(`data_type='frame'`, `split_by` 'number' or 'time'), float32 `[T, 2, H, W]`, so batches are
`[N, T, 2, H, W]` (`input_layout = "NTCHW"`, passed on by the plan). SpikingJelly integrates
once and caches the frames under `root/frames_number_<T>_split_by_<how>/`; every rank of a run
calls this builder, so the first build runs under a lock (data/locks.py) and the other ranks
then read the finished cache. A cache that is complete is read without the lock (a read-only
root works).

CIFAR10-DVS and N-Caltech101 ship no train/test split: the papers' per-class split is
SpikingJelly's own `split_to_train_test_set(train_ratio, dataset, classes, random_split)`,
computed from the labels alone (it would otherwise load every sample once to read its label)
and, with `random_split`, drawn from numpy's global generator seeded by `split_seed` (the state
is restored after).

What the plan refuses before launch, in one line naming the layout (`check_layout`): a missing
root or `events_np/`, a wrong layout, a half-built cache (SpikingJelly's `.building` markers, a
frames folder with fewer files than `events_np/`), a root that must be written but is not, and
any case where SpikingJelly would download (a node without internet would hang).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from experiments.data import event_augment, event_layout
from experiments.data.event_layout import (
    CIFAR10_DVS,
    DVS128_GESTURE,
    N_CALTECH101,
    N_MNIST,
    RAW,
    EventDataset,
    building_marker,
    cache_folder,
)
from experiments.data.locks import held

LOCK = ".experiments-prepare.lock"


@dataclass(frozen=True)
class FrameOptions:
    """How events become the model's input: SpikingJelly's integration (frames_number,
    split_by), then a resize of each frame to `image_size` when it differs from the sensor."""

    frames_number: int
    split_by: str
    image_size: int
    interpolation: str


@dataclass(frozen=True)
class Split:
    """The papers' per-class split of a dataset that ships none (SpikingJelly's
    split_to_train_test_set): the first `train_ratio` of each class (rounded up) trains, in
    file-name order, or a seeded shuffle of each class first when `random_split`."""

    train_ratio: float
    random_split: bool
    seed: int


# ---------------------------------------------------------------- builders


def build_dvs128_gesture_datasets(
    root: str | Path,
    frames_number: int,
    split_by: str = "number",
    image_size: int = 128,
    interpolation: str = "bilinear",
    augment: dict[str, Any] | None = None,
) -> tuple[Dataset, Dataset]:
    options = FrameOptions(frames_number, split_by, image_size, interpolation)
    return _shipped_split(DVS128_GESTURE, Path(root), options, augment)


def build_n_mnist_datasets(
    root: str | Path,
    frames_number: int,
    split_by: str = "number",
    image_size: int = 34,
    interpolation: str = "bilinear",
    augment: dict[str, Any] | None = None,
) -> tuple[Dataset, Dataset]:
    options = FrameOptions(frames_number, split_by, image_size, interpolation)
    return _shipped_split(N_MNIST, Path(root), options, augment)


def build_cifar10_dvs_datasets(
    root: str | Path,
    frames_number: int,
    split_by: str = "number",
    image_size: int = 128,
    interpolation: str = "bilinear",
    train_ratio: float = 0.9,
    random_split: bool = False,
    split_seed: int = 0,
    download: bool = False,
    augment: dict[str, Any] | None = None,
) -> tuple[Dataset, Dataset]:
    """`download`: let SpikingJelly download CIFAR10-DVS (figshare) when `events_np/` and the
    archives are missing; otherwise that case is refused (before launch by the plan, and here
    in each rank)."""
    if not (Path(root) / RAW).is_dir():
        event_layout.check_preparation(Path(root), CIFAR10_DVS, download)
    options = FrameOptions(frames_number, split_by, image_size, interpolation)
    split = Split(train_ratio, random_split, split_seed)
    return _per_class_split(CIFAR10_DVS, Path(root), options, split, augment)


def build_n_caltech101_datasets(
    root: str | Path,
    frames_number: int,
    split_by: str = "number",
    image_size: int = 128,
    interpolation: str = "bilinear",
    train_ratio: float = 0.9,
    random_split: bool = False,
    split_seed: int = 0,
    augment: dict[str, Any] | None = None,
) -> tuple[Dataset, Dataset]:
    options = FrameOptions(frames_number, split_by, image_size, interpolation)
    split = Split(train_ratio, random_split, split_seed)
    return _per_class_split(N_CALTECH101, Path(root), options, split, augment)


def _shipped_split(
    spec: EventDataset, root: Path, options: FrameOptions, augment: dict[str, Any] | None
) -> tuple[Dataset, Dataset]:
    recipe = event_augment.parse(augment)
    train = _frames(spec, root, options, True, FrameTransform(spec, options, recipe))
    test = _frames(spec, root, options, False, FrameTransform(spec, options, None))
    return train, test


def _per_class_split(
    spec: EventDataset,
    root: Path,
    options: FrameOptions,
    split: Split,
    augment: dict[str, Any] | None,
) -> tuple[Dataset, Dataset]:
    recipe = event_augment.parse(augment)
    train = _frames(spec, root, options, None, FrameTransform(spec, options, recipe))
    test = _frames(spec, root, options, None, FrameTransform(spec, options, None))
    train_indices, test_indices = split_indices(train.targets, spec.classes, split)
    return Subset(train, train_indices), Subset(test, test_indices)


def _frames(
    spec: EventDataset, root: Path, options: FrameOptions, train: bool | None, transform: Any
) -> Any:
    """SpikingJelly's dataset of frames; the first rank to get here integrates and caches them
    (under the lock), the others wait and read the cache."""
    dataset_class = spec.dataset_class()
    kwargs: dict[str, Any] = {
        "data_type": "frame",
        "frames_number": options.frames_number,
        "split_by": options.split_by,
        "transform": transform,
    }
    if spec.ships_split:
        kwargs["train"] = train
    if is_built(root, options.frames_number, options.split_by):
        return dataset_class(str(root), **kwargs)
    with held(root / LOCK):
        return dataset_class(str(root), **kwargs)


def is_built(root: Path, frames_number: int, split_by: str) -> bool:
    """SpikingJelly's own test of a finished cache: the folder exists, its marker does not."""
    folder = cache_folder(root, frames_number, split_by)
    return folder.is_dir() and not building_marker(folder).exists() and (root / RAW).is_dir()


class _Labels(Dataset):
    """The labels alone, in the dataset's order, for split_to_train_test_set to read."""

    def __init__(self, targets: list[int]) -> None:
        self.targets = targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[None, int]:
        return None, self.targets[index]


def split_indices(targets: list[int], classes: int, split: Split) -> tuple[list[int], list[int]]:
    """SpikingJelly's split_to_train_test_set over the labels; a random split draws from
    numpy's global generator (as the function does) seeded by `split.seed`, then restored."""
    from spikingjelly.datasets.utils import split_to_train_test_set

    state = np.random.get_state()
    np.random.seed(split.seed)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its tqdm progress bar, once a rank
            train, test = split_to_train_test_set(
                split.train_ratio, _Labels(targets), classes, split.random_split
            )
    finally:
        np.random.set_state(state)
    return list(train.indices), list(test.indices)


class FrameTransform:
    """One sample's frames (numpy `[T, 2, H, W]`) as a tensor at the model's input size, then
    the training augmentation (data/event_augment.py) if any. A class, not a closure: the
    DataLoader's worker processes receive it by pickling."""

    def __init__(
        self, spec: EventDataset, options: FrameOptions, augment: event_augment.EventAugment | None
    ) -> None:
        self.size = options.image_size
        self.interpolation = options.interpolation
        self.resize = tuple(spec.dataset_class().get_H_W()) != (self.size, self.size)
        self.augment = augment

    def __call__(self, frames: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(frames)
        if self.resize:
            tensor = resize_frames(tensor, self.size, self.interpolation)
        if self.augment is not None:
            tensor = self.augment(tensor)
        return tensor


def resize_frames(frames: torch.Tensor, size: int, interpolation: str) -> torch.Tensor:
    """`[T, 2, H, W]` -> `[T, 2, size, size]`, torchvision's tensor resize (antialiased)."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    mode = InterpolationMode(interpolation)
    return F.resize(frames, [size, size], interpolation=mode, antialias=True)


def _declare(builder: Any, spec: EventDataset) -> None:
    """What the plan reads from an event builder (data/__init__.py): the batches' layout,
    the checks before launch, the sample counts."""
    builder.input_layout = "NTCHW"
    builder.check_options = partial(event_layout.check_options, spec=spec)
    builder.check_layout = partial(event_layout.check, spec=spec)
    builder.split_sizes = partial(event_layout.sizes, spec=spec)


_declare(build_dvs128_gesture_datasets, DVS128_GESTURE)
_declare(build_cifar10_dvs_datasets, CIFAR10_DVS)
_declare(build_n_mnist_datasets, N_MNIST)
_declare(build_n_caltech101_datasets, N_CALTECH101)
