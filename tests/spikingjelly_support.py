"""A test-only dataset builder: the synthetic data, whose training set SIGKILLs this rank at
its N-th sample fetch in the first torchrun attempt (`kill_rank`, `kill_at_fetch`). The data
are the synthetic builder's, so a run with it follows the same trajectory as one without;
torchrun ranks import it by its dotted path (the repo on PYTHONPATH)."""

from __future__ import annotations

import os
import signal

from torch.utils.data import Dataset

from experiments.data.synthetic import build_synthetic_datasets


class _KillAt(Dataset):
    def __init__(self, dataset: Dataset, fetch: int) -> None:
        self.dataset = dataset
        self.fetch = fetch
        self.fetched = 0

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int):
        self.fetched += 1
        if self.fetched == self.fetch:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.dataset[index]


def build_killing_datasets(
    kill_rank: int,
    kill_at_fetch: int,
    image_size: int = 16,
    train_size: int = 512,
    val_size: int = 128,
    num_classes: int = 10,
    seed: int = 0,
) -> tuple[Dataset, Dataset]:
    train, val = build_synthetic_datasets(image_size, train_size, val_size, num_classes, seed)
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    if first_attempt and int(os.environ.get("RANK", "0")) == kill_rank:
        train = _KillAt(train, kill_at_fetch)
    return train, val
