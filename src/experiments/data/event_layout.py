"""What an event dataset's root must hold before launch, checked without SpikingJelly doing any
work: its raw events (`events_np/`, or the archives it would prepare them from), their
layout, the frame cache of this run's `frames_number` and `split_by` (finished, or buildable
in a writable root). Each refusal is one line naming the layout expected.

SpikingJelly's own behaviour this mirrors (spikingjelly/datasets/base.py, 2.0.0):
- `events_np/` present: used as is (no download, no checksum);
- absent: it reads `root/download/` (md5-checking each archive, downloading what is missing
  or damaged, or raising for datasets it cannot download), extracts into `root/extract/` and
  converts; a run on a node without internet would hang there, so a missing archive is
  refused here unless the option allows the download;
- `<folder>.building` beside `events_np/` or a frames folder: an unfinished preparation, which
  it refuses at run time; refused here before launch, saying what to remove.
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.errors import ConfigError

SUFFIXES = (".npz", ".npy")  # what SpikingJelly's DatasetFolder reads
RAW = "events_np"  # SpikingJelly's raw_root: root/events_np
SPLITS = ("train", "test")
SPLIT_BY = ("number", "time")


@dataclass(frozen=True)
class EventDataset:
    """What this module needs to know of one SpikingJelly dataset class."""

    class_name: str  # in spikingjelly.datasets
    classes: int
    ships_split: bool  # events_np/{train,test}/<class>/ (else events_np/<class>/)

    def dataset_class(self) -> type:
        import spikingjelly.datasets as sj_datasets

        return getattr(sj_datasets, self.class_name)

    def layout(self) -> str:
        inner = f"{{{','.join(SPLITS)}}}/<class>/*.npz" if self.ships_split else "<class>/*.npz"
        return f"{RAW}/{inner} ({self.classes} classes)"


DVS128_GESTURE = EventDataset("DVS128Gesture", 11, ships_split=True)
CIFAR10_DVS = EventDataset("CIFAR10DVS", 10, ships_split=False)
N_MNIST = EventDataset("NMNIST", 10, ships_split=True)
N_CALTECH101 = EventDataset("NCaltech101", 101, ships_split=False)


def cache_folder(root: Path, frames_number: int, split_by: str) -> Path:
    """Where SpikingJelly keeps the frames (FrameFixedNumberBuilder.processed_root)."""
    return root / f"frames_number_{frames_number}_split_by_{split_by}"


def building_marker(folder: Path) -> Path:
    """SpikingJelly's marker of a preparation that has not finished (base.py)."""
    return folder.with_name(f"{folder.name}.building")


def check(data: dict[str, Any], spec: EventDataset) -> None:
    root = Path(str(data["root"]))
    expected = f"expected {root}/{spec.layout()}"
    if not root.is_dir():
        raise ConfigError("data.root", str(root), f"no such folder; {expected}")
    raw = root / RAW
    if building_marker(raw).exists():
        raise ConfigError(
            "data.root",
            str(root),
            f"half-built {RAW}/ ({building_marker(raw).name} is left from an interrupted "
            f"preparation): remove {raw} and {building_marker(raw)}, then run again; {expected}",
        )
    if raw.is_dir():
        _check_raw_layout(root, spec, expected)
        _check_split(data, root, spec)
    else:
        check_preparation(root, spec, bool(data.get("download")))
    _check_cache(data, root, spec, expected)


def _class_counts(folder: Path) -> dict[str, int]:
    """Files DatasetFolder will read, per class sub-folder (sorted, as it sorts them)."""
    if not folder.is_dir():
        return {}
    counts = {}
    for entry in sorted(os.scandir(folder), key=operator.attrgetter("name")):
        if entry.is_dir():
            counts[entry.name] = sum(
                1 for item in os.scandir(entry.path) if item.name.endswith(SUFFIXES)
            )
    return counts


def raw_counts(root: Path, spec: EventDataset) -> dict[str, dict[str, int]]:
    """Per split (train/test, or '' for a dataset that ships none) the files of each class."""
    raw = root / RAW
    if spec.ships_split:
        return {split: _class_counts(raw / split) for split in SPLITS}
    return {"": _class_counts(raw)}


def _check_raw_layout(root: Path, spec: EventDataset, expected: str) -> None:
    for split, counts in raw_counts(root, spec).items():
        folder = root / RAW / split if split else root / RAW
        if len(counts) != spec.classes:
            found = f"{len(counts)} class folders" if counts else "no class folders"
            raise ConfigError(
                "data.root", str(root), f"{folder} has {found}, not {spec.classes}; {expected}"
            )
        empty = [name for name, count in counts.items() if count == 0]
        if empty:
            raise ConfigError(
                "data.root",
                str(root),
                f"{folder}/{empty[0]} holds no .npz files; {expected}",
            )


def _check_split(data: dict[str, Any], root: Path, spec: EventDataset) -> None:
    """The per-class split leaves samples on both sides (SpikingJelly's loop refuses an empty
    validation set mid-start)."""
    found = sizes(data, spec)
    if found is not None and (found[0] == 0 or found[1] == 0):
        smallest = min(raw_counts(root, spec)[""].values())
        raise ConfigError(
            "data.train_ratio",
            data.get("train_ratio"),
            f"leaves {found[0]} training and {found[1]} validation samples (the smallest class "
            f"of {root / RAW} has {smallest}: ceil(ratio x n) of each class train); e.g. 0.5",
        )


def check_preparation(root: Path, spec: EventDataset, download: bool) -> None:
    """No events_np/: SpikingJelly would prepare it from root/download/ (every archive it
    lists), downloading what is missing when the dataset allows it; refused unless `download`
    lets it. The plan asks before launch; the CIFAR10-DVS builder asks again in each rank (a
    node that does not see the login's files must not start a download either)."""
    expected = f"expected {root}/{spec.layout()}"
    dataset_class = spec.dataset_class()
    archives = root / "download"
    missing = [
        (name, url)
        for name, url, _ in dataset_class.resource_url_md5()
        if not (archives / name).is_file()
    ]
    hint = _misplaced(root, spec)
    if missing and not (dataset_class.downloadable() and download):
        name, url = missing[0]
        if dataset_class.downloadable():
            action = (
                f"SpikingJelly would download it from {url} (a node without internet hangs); "
                "put the archives there, or set data.download=true to let it download"
            )
        else:
            action = f"SpikingJelly cannot download it: fetch {name} from {url} into {archives}/"
        raise ConfigError(
            "data.root",
            str(root),
            f"no {RAW}/ and {archives}/ lacks {name} "
            f"({len(missing)} of {len(dataset_class.resource_url_md5())} archives missing): "
            f"{action}; {expected}{hint}",
        )
    if not os.access(root, os.W_OK):
        raise ConfigError(
            "data.root",
            str(root),
            f"no {RAW}/ yet and the folder is not writable: SpikingJelly prepares {RAW}/ in it "
            f"from {archives}/; {expected}",
        )


def _misplaced(root: Path, spec: EventDataset) -> str:
    """A hint when data.root points one level too deep (at events_np itself)."""
    inside = _class_counts(root / SPLITS[0]) if spec.ships_split else _class_counts(root)
    if len(inside) == spec.classes:
        return f" ({root} looks like an {RAW}/ folder: set data.root to the folder that holds it)"
    return ""


def _check_cache(data: dict[str, Any], root: Path, spec: EventDataset, expected: str) -> None:
    """The frames of this run's frames_number/split_by: finished, or buildable here."""
    folder = cache_folder(root, int(data["frames_number"]), str(data["split_by"]))
    marker = building_marker(folder)
    if marker.exists():
        raise ConfigError(
            "data.root",
            str(root),
            f"half-built frame cache ({marker.name} is left from an interrupted integration): "
            f"remove {folder} and {marker}, then run again to rebuild it; {expected}",
        )
    if folder.is_dir():
        raw = raw_counts(root, spec)
        for split, counts in raw.items():
            frames = _class_counts(folder / split if split else folder)
            if frames != counts:
                have, need = sum(frames.values()), sum(counts.values())
                where = folder / split if split else folder
                raise ConfigError(
                    "data.root",
                    str(root),
                    f"partial frame cache: {where} holds {have} frame files for the {need} "
                    f"event files of {root / RAW}; remove {folder} to rebuild it; {expected}",
                )
        return
    if not os.access(root, os.W_OK):
        raise ConfigError(
            "data.root",
            str(root),
            f"the frame cache {folder.name}/ is not built and the folder is not writable: "
            f"SpikingJelly writes it there (build it once where {root} is writable); {expected}",
        )


def sizes(data: dict[str, Any], spec: EventDataset) -> tuple[int, int] | None:
    """(train, validation) samples: the shipped split's files, or the per-class split
    SpikingJelly's split_to_train_test_set makes (ceil(ratio x n) of each class train).
    None when events_np/ is not there yet."""
    root = Path(str(data["root"]))
    if not (root / RAW).is_dir():
        return None
    counts = raw_counts(root, spec)
    if spec.ships_split:
        return sum(counts["train"].values()), sum(counts["test"].values())
    ratio = float(data.get("train_ratio", 0.9))
    train = sum(math.ceil(count * ratio) for count in counts[""].values())
    return train, sum(counts[""].values()) - train


def check_options(data: dict[str, Any], spec: EventDataset) -> None:
    """The keys of an event option that need no disk: split_by, frames_number, the split."""
    from experiments import validation as check
    from experiments.data import event_augment

    check.choice(data.get("split_by"), "data.split_by", SPLIT_BY)
    check.integer(data.get("frames_number"), "data.frames_number", minimum=1)
    check.choice(
        data.get("interpolation"), "data.interpolation", ("bilinear", "bicubic", "nearest")
    )
    if not spec.ships_split:
        ratio = data.get("train_ratio")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1:
            raise ConfigError("data.train_ratio", ratio, "a fraction between 0 and 1, e.g. 0.9")
        check.boolean(data.get("random_split"), "data.random_split")
    event_augment.parse(data.get("augment"))
