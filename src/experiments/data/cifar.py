"""CIFAR-10 and CIFAR-100 in torchvision's own on-disk format (the pickled batches under
`root/cifar-10-batches-py/` or `root/cifar-100-python/`), read by torchvision's CIFAR10 and
CIFAR100 classes with the recipe's augmentation (data/augment.py).

Nothing is downloaded unless `data.download=true`; then torchvision downloads and extracts
the archive into `root`, under a lock so that the ranks of one run never download into the
same folder at once. torchvision md5-checks every file when it reads them, and so does the
plan before launch (`check_layout`): a wrong or damaged folder is refused in one line.
"""

from __future__ import annotations

import functools
import os
import pickle
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from torchvision.datasets import CIFAR10, CIFAR100
from torchvision.datasets.utils import check_integrity

from experiments.data import augment as augmentation
from experiments.data.locks import held
from experiments.errors import ConfigError

NATIVE_SIZE = 32


def build_cifar10_datasets(
    root: str | Path,
    image_size: int = NATIVE_SIZE,
    download: bool = False,
    augment: dict[str, Any] | None = None,
) -> tuple[Dataset, Dataset]:
    return _build(CIFAR10, Path(root), image_size, download, augment)


def build_cifar100_datasets(
    root: str | Path,
    image_size: int = NATIVE_SIZE,
    download: bool = False,
    augment: dict[str, Any] | None = None,
) -> tuple[Dataset, Dataset]:
    return _build(CIFAR100, Path(root), image_size, download, augment)


def _build(
    dataset: type[CIFAR10],
    root: Path,
    image_size: int,
    download: bool,
    augment: dict[str, Any] | None,
) -> tuple[Dataset, Dataset]:
    recipe = augmentation.parse(augment)
    if download:
        root.mkdir(parents=True, exist_ok=True)
        with held(root / f".{dataset.base_folder}.lock"):
            dataset(root, train=True, download=True)
    train = dataset(root, train=True, transform=augmentation.train_transform(recipe, image_size))
    validation = dataset(
        root, train=False, transform=augmentation.validation_transform(recipe, image_size)
    )
    return train, validation


def layout(dataset: type[CIFAR10]) -> str:
    """The files torchvision reads, as the refusals name them."""
    names = [name for name, _ in (*dataset.train_list, *dataset.test_list)]
    return f"{dataset.base_folder}/{{{','.join([*names, dataset.meta['filename']])}}}"


def check_layout(data: dict[str, Any], dataset: type[CIFAR10]) -> None:
    """Before launch: the folder torchvision will read is there and every file passes its
    md5 check, or `data.download=true` lets torchvision fetch it (into a writable root)."""
    root = Path(str(data["root"]))
    folder = root / dataset.base_folder
    expected = f"expected {root}/{layout(dataset)} (torchvision's {dataset.__name__} format)"
    if data.get("download"):
        target = root if root.is_dir() else next((p for p in root.parents if p.is_dir()), root)
        if not folder.is_dir() and not os.access(target, os.W_OK):
            raise ConfigError("data.root", str(root), f"not writable for the download; {expected}")
        return
    if not root.is_dir():
        raise ConfigError("data.root", str(root), f"no such folder; {expected}")
    if not folder.is_dir():
        found = ", ".join(sorted(entry.name for entry in root.iterdir())[:5]) or "nothing"
        raise ConfigError(
            "data.root",
            str(root),
            f"no {dataset.base_folder}/ in it (found: {found}); {expected}, or set "
            "data.download=true to let torchvision download it",
        )
    files = [
        *dataset.train_list,
        *dataset.test_list,
        (dataset.meta["filename"], dataset.meta["md5"]),
    ]
    for name, md5 in files:
        if not check_integrity(str(folder / name), md5):
            what = "missing" if not (folder / name).is_file() else "fails torchvision's md5 check"
            raise ConfigError(
                "data.root",
                str(root),
                f"{dataset.base_folder}/{name} {what}; {expected} (data.download=true "
                "downloads it again)",
            )


def split_sizes(data: dict[str, Any], dataset: type[CIFAR10]) -> tuple[int, int] | None:
    """(train, validation) images, read from the batches (None: not on disk yet)."""
    folder = Path(str(data["root"])) / dataset.base_folder
    counts = []
    for files in (dataset.train_list, dataset.test_list):
        paths = [folder / name for name, _ in files]
        if not all(path.is_file() for path in paths):
            return None
        counts.append(sum(_rows(str(path), path.stat().st_mtime_ns) for path in paths))
    return counts[0], counts[1]


@functools.cache
def _rows(path: str, modified: int) -> int:
    """Images in one pickled batch (cached per file version: the plan and preflight both ask)."""
    with open(path, "rb") as batch:
        entry = pickle.load(batch, encoding="latin1")
    return len(entry.get("labels", entry.get("fine_labels", [])))


def _declare(builder: Any, dataset: type[CIFAR10]) -> None:
    """What the plan reads from a CIFAR builder (data/__init__.py)."""
    builder.check_options = check_options
    builder.check_layout = functools.partial(check_layout, dataset=dataset)
    builder.split_sizes = functools.partial(split_sizes, dataset=dataset)


def check_options(data: dict[str, Any]) -> None:
    augmentation.parse(data.get("augment"))


_declare(build_cifar10_datasets, CIFAR10)
_declare(build_cifar100_datasets, CIFAR100)
