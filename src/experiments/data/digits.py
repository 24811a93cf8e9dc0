"""scikit-learn's bundled handwritten digits as RGB tensors: real data with no download."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

DIGITS_TOTAL = 1797


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
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(split_seed).permutation(len(digits.target))
    images = _to_rgb_tensor(digits.images[order], image_size)
    targets = torch.from_numpy(digits.target[order].astype(np.int64))
    train = TensorDataset(images[val_size:], targets[val_size:])
    validation = TensorDataset(images[:val_size], targets[:val_size])
    return train, validation
