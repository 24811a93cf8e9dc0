"""scikit-learn's bundled handwritten digits as RGB tensors: real data with no download."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

DIGITS_TOTAL = 1797


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's `load_digits()` images (N, 8, 8, float64 grey levels 0..16) and targets,
    read from the same bundled file (sklearn/datasets/data/digits.csv.gz) the way sklearn
    reads it, without importing scikit-learn: its import (scipy, its array-API layer) costs
    every rank process ~1.1 s idle, ~2 s under load, and nothing of it is used but this file."""
    spec = importlib.util.find_spec("sklearn")  # a top-level package: found, not executed
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "data=digits reads scikit-learn's bundled digits: pip install scikit-learn"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, mode="rt", encoding="utf-8") as text:
        data = np.loadtxt(text, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)


def _to_rgb_tensor(images: np.ndarray, image_size: int) -> torch.Tensor:
    # 8x8 grey levels 0..16 -> [N, 3, S, S] in [0, 1]; the zoo's models expect 3 channels.
    x = torch.from_numpy(images.astype(np.float32) / 16.0).unsqueeze(1)
    if image_size != x.shape[-1]:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    return x.expand(-1, 3, -1, -1).contiguous()


def build_digits_datasets(
    image_size: int = 16, val_size: int = 384, split_seed: int = 0
) -> tuple[TensorDataset, TensorDataset]:
    """A fixed stratification-free split, seeded separately from training so every run,
    rank and resume sees the same validation images."""
    digit_images, digit_targets = load_digits_arrays()
    order = np.random.default_rng(split_seed).permutation(len(digit_targets))
    images = _to_rgb_tensor(digit_images[order], image_size)
    targets = torch.from_numpy(digit_targets[order].astype(np.int64))
    train = TensorDataset(images[val_size:], targets[val_size:])
    validation = TensorDataset(images[:val_size], targets[:val_size])
    return train, validation
