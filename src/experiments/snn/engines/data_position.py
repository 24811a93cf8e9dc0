"""Where a resumed epoch's data starts: past the batches the checkpoint already trained.

A run resumed mid-epoch must see the rest of that epoch in the sampler's order (the same
permutation: DistributedSampler seeds it by epoch). Iterating the loader and dropping the
trained batches gives that order, but loads every dropped batch first: a requeue at batch
4,000 of an ImageNet epoch would decode 4,000 batches of JPEGs before its first step, and
spend the global RNG of their augmentations. Here the sampler's order starts past them
instead, and nothing before that is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torch.utils.data import DataLoader, Sampler


class _StartingAt(Sampler[int]):
    """The wrapped sampler's indices from position `start` on (read when iterated, so it
    follows the wrapped sampler's set_epoch)."""

    def __init__(self, sampler: Sampler[int], start: int) -> None:
        self.sampler = sampler
        self.start = start

    def __iter__(self) -> Iterator[int]:
        for position, index in enumerate(self.sampler):
            if position >= self.start:
                yield index

    def __len__(self) -> int:
        return max(len(self.sampler) - self.start, 0)  # type: ignore[arg-type]


def batches_from(loader: DataLoader, batch: int) -> Iterable:
    """`loader`'s batches of this epoch from batch number `batch` on: the same batches, of the
    same samples in the same order, as iterating it whole and dropping the first `batch`.
    The loader's generator is shared, so its per-epoch draw (worker seeds) is the same one."""
    if batch == 0:
        return loader
    assert loader.batch_size is not None, "a loader with a batch sampler of its own"
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=_StartingAt(loader.sampler, batch * loader.batch_size),
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        worker_init_fn=loader.worker_init_fn,
        generator=loader.generator,
    )
