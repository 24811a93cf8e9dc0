"""The papers' datasets in their real on-disk formats, written tiny for tests (no download).

- `write_cifar(root, "cifar10" | "cifar100")`: torchvision's pickled batches
  (`cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}`,
  `cifar-100-python/{train,test,meta}`), keys and dtypes as the real files (uint8 rows of
  3072 = R, G, B planes of 32x32; labels as ints);
- `write_events(root, name)`: SpikingJelly's `events_np` tree of each event dataset, as its
  own preparation writes it (`np.savez_compressed`, keys t, x, y, p with the dtypes its
  readers produce), in each dataset's layout (`{train,test}/<class>/` or `<class>/`).

torchvision md5-checks every CIFAR file against the real archive's checksums; synthetic files
cannot pass, so tests read them with those checksums set to None (`skip_cifar_md5`), in this
process or, through `EXPERIMENTS_TEST_SKIP_CIFAR_MD5=1` and the test site
(tests/support/site/sitecustomize.py), in every process a test starts. The path users take
keeps the check.

tests/conftest.py's session fixture `dataset_files` writes each of these once per test session
and hands out the roots (see its docstring); other tests (e.g. a preset trained 2 steps on
each dataset) reuse it.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np

SKIP_CIFAR_MD5 = "EXPERIMENTS_TEST_SKIP_CIFAR_MD5"

CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}

# name -> (sensor height, width, classes, ships a train/test split, class folder names, file stem)
EVENT_DATASETS = {
    "dvs128_gesture": (
        128,
        128,
        [str(label) for label in range(11)],
        True,
        "user{index:02d}_led_0",
    ),
    "n_mnist": (34, 34, [str(label) for label in range(10)], True, "{index:05d}"),
    "cifar10_dvs": (
        128,
        128,
        ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
        False,
        "cifar10_{label}_{index}",
    ),
    "n_caltech101": (
        180,
        240,
        [f"class_{label:03d}" for label in range(101)],
        False,
        "image_{index:04d}",
    ),
}


def write_cifar(
    root: Path, variant: str = "cifar10", train_per_class: int = 2, test_per_class: int = 1
) -> Path:
    """CIFAR-10 (10 classes) or CIFAR-100 (100 fine, 20 coarse classes) under `root`, each
    class's images a colour of its own plus seeded noise (learnable, a few bytes each)."""
    classes = 10 if variant == "cifar10" else 100
    folder = root / CIFAR_FOLDERS[variant]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    train_labels = [label for label in range(classes) for _ in range(train_per_class)]
    test_labels = [label for label in range(classes) for _ in range(test_per_class)]
    if variant == "cifar10":
        batches = [train_labels[index::5] for index in range(5)]
        for number, labels in enumerate(batches, start=1):
            _pickle(folder / f"data_batch_{number}", _cifar10_batch(labels, rng, f"{number} of 5"))
        _pickle(folder / "test_batch", _cifar10_batch(test_labels, rng, "testing batch 1 of 1"))
        names = ["airplane", "automobile", "bird", "cat", "deer"]
        names += ["dog", "frog", "horse", "ship", "truck"]
        meta = {"num_cases_per_batch": len(batches[0]), "label_names": names, "num_vis": 3072}
        _pickle(folder / "batches.meta", meta)
    else:
        _pickle(folder / "train", _cifar100_set(train_labels, rng, "training"))
        _pickle(folder / "test", _cifar100_set(test_labels, rng, "testing"))
        meta = {
            "fine_label_names": [f"fine_{label}" for label in range(100)],
            "coarse_label_names": [f"coarse_{label}" for label in range(20)],
        }
        _pickle(folder / "meta", meta)
    return root


def _images(labels: list[int], rng: np.random.Generator) -> np.ndarray:
    """uint8 rows of 3072 (the R, G and B planes of a 32x32 image), as CIFAR stores them."""
    colours = np.random.default_rng(1).integers(0, 256, size=(max(labels) + 1, 3, 1))
    noise = rng.integers(-40, 41, size=(len(labels), 3, 1024))
    return np.clip(colours[labels] + noise, 0, 255).astype(np.uint8).reshape(len(labels), 3072)


def _cifar10_batch(labels: list[int], rng: np.random.Generator, name: str) -> dict:
    return {
        "batch_label": f"training batch {name}",
        "labels": list(labels),
        "data": _images(labels, rng),
        "filenames": [f"image_{index}.png" for index in range(len(labels))],
    }


def _cifar100_set(labels: list[int], rng: np.random.Generator, name: str) -> dict:
    return {
        "filenames": [f"image_{index}.png" for index in range(len(labels))],
        "batch_label": f"{name} batch 1 of 1",
        "fine_labels": list(labels),
        "coarse_labels": [label // 5 for label in labels],
        "data": _images(labels, rng),
    }


def _pickle(path: Path, entry: dict) -> None:
    with open(path, "wb") as handle:
        pickle.dump(entry, handle, protocol=2)


# Samples a class by default: 2 (and 2 in test/) where the dataset ships a split; CIFAR10-DVS 10,
# so that SpikingJelly's 0.9 split leaves one a class for validation (9 / 1); N-Caltech101 2,
# with 101 classes (a run on it passes data.train_ratio=0.5: 1 / 1 a class).
DEFAULT_PER_CLASS = {"dvs128_gesture": 2, "n_mnist": 2, "cifar10_dvs": 10, "n_caltech101": 2}


def write_events(
    root: Path,
    name: str,
    per_class: int | None = None,
    test_per_class: int = 2,
    events: int = 96,
    classes: int | None = None,
    patch: int | None = 8,
) -> Path:
    """SpikingJelly's `root/events_np/` of dataset `name`: `per_class` samples a class
    (DEFAULT_PER_CLASS), and `test_per_class` in test/ where the dataset ships a split,
    `events` events each, spread evenly in time (every time bin of a few frames holds events,
    so split_by='time' works). `classes`: only the first few class folders (SpikingJelly's
    classes read any; the plan refuses a root without all of them). `patch`: the side of the
    square the events fall in (None: the whole sensor, as a real recording; a benchmark)."""
    height, width, names, ships_split, stem = EVENT_DATASETS[name]
    classes_written = names[:classes] if classes else names
    count = DEFAULT_PER_CLASS[name] if per_class is None else per_class
    rng = np.random.default_rng(0)
    splits = {"train": count, "test": test_per_class} if ships_split else {"": count}
    for split, samples in splits.items():
        for label, class_name in enumerate(classes_written):
            folder = root / "events_np" / split / class_name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(samples):
                file_name = stem.format(index=index + 1, label=class_name) + ".npz"
                _write_sample(
                    folder / file_name,
                    name,
                    rng,
                    height=height,
                    width=width,
                    events=events,
                    label=label,
                    patch=patch,
                )
    return root


def _write_sample(
    path: Path,
    name: str,
    rng: np.random.Generator,
    *,
    height: int,
    width: int,
    events: int,
    label: int,
    patch: int | None,
) -> None:
    """One sample's events with the dtypes SpikingJelly's readers give: DVS128 Gesture's
    load_aedat_v3 int64 arrays; N-MNIST's and N-Caltech101's load_ATIS_bin uint32; CIFAR10-DVS
    big-endian uint32 times, uint32 x/y and int64 polarity (cifar10_dvs._load_origin_data)."""
    t = np.arange(events, dtype=np.int64) * 1000 + 17
    # a patch whose place depends on the class, so the classes differ in their frames and pixels
    # see several events (frames hold event counts, not 0/1)
    x = (rng.integers(0, patch or width, size=events) + label * 3) % width
    y = (rng.integers(0, patch or height, size=events) + label * 2) % height
    p = rng.integers(0, 2, size=events)
    if name == "dvs128_gesture":
        arrays = {"t": t, "x": x.astype(np.int64), "y": y.astype(np.int64), "p": p.astype(np.int64)}
    elif name == "cifar10_dvs":
        arrays = {
            "t": t.astype(">u4"),
            "x": x.astype(np.uint32),
            "y": y.astype(np.uint32),
            "p": p.astype(np.int64),
        }
    else:
        arrays = {
            "t": t.astype(np.uint32),
            "x": x.astype(np.uint32),
            "y": y.astype(np.uint32),
            "p": p.astype(np.uint32),
        }
    np.savez_compressed(path, **arrays)


@contextlib.contextmanager
def skip_cifar_md5() -> Iterator[None]:
    """torchvision's CIFAR10/CIFAR100 with every checksum None (check_integrity then only asks
    that the file exists), restored after: for the synthetic files of write_cifar."""
    from torchvision.datasets import CIFAR10, CIFAR100

    saved = {cls: (cls.train_list, cls.test_list, cls.meta) for cls in (CIFAR10, CIFAR100)}
    try:
        for cls in (CIFAR10, CIFAR100):
            cls.train_list = [[name, None] for name, _ in cls.train_list]
            cls.test_list = [[name, None] for name, _ in cls.test_list]
            cls.meta = {**cls.meta, "md5": None}
        yield
    finally:
        for cls, (train_list, test_list, meta) in saved.items():
            cls.train_list, cls.test_list, cls.meta = train_list, test_list, meta
