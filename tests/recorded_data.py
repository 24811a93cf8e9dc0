"""A test-only dataset builder: the synthetic data, with every training sample index each rank
reads appended to <record_dir>/rank<RANK>.txt. Torchrun children import it by its dotted path
(`data.builder=tests.recorded_data.build_recorded_datasets`, the repo on PYTHONPATH), which lets
a test prove how the data-parallel sampler shards an epoch without reaching into a process."""

from __future__ import annotations

import os
from pathlib import Path

from torch.utils.data import Dataset

from experiments.data.synthetic import build_synthetic_datasets


class _Recording(Dataset):
    def __init__(self, dataset: Dataset, path: Path) -> None:
        self.dataset = dataset
        self.path = path

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int):
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(f"{index}\n")
        return self.dataset[index]


def build_recorded_datasets(
    record_dir: str,
    image_size: int = 16,
    train_size: int = 512,
    val_size: int = 128,
    num_classes: int = 10,
    seed: int = 0,
) -> tuple[Dataset, Dataset]:
    train, val = build_synthetic_datasets(image_size, train_size, val_size, num_classes, seed)
    Path(record_dir).mkdir(parents=True, exist_ok=True)
    path = Path(record_dir) / f"rank{os.environ.get('RANK', '0')}.txt"
    return _Recording(train, path), val


def read_indices(record_dir: Path) -> dict[int, list[int]]:
    return {
        int(path.stem.removeprefix("rank")): [int(line) for line in path.read_text().split()]
        for path in sorted(record_dir.glob("rank*.txt"))
    }
