"""scikit-learn's digits as time series: each image rate-coded into `time_steps` binary frames
by SpikingJelly's `encoding.PoissonEncoder`, drawn once from a generator seeded by
`encoding_seed`, so every rank, resume and re-run sees the same frames. Batches are
`[N, T, C, H, W]` (`input_layout="NTCHW"`, passed on by the plan), so the engines feed frame t
at step t instead of repeating a static image T times.
"""

from __future__ import annotations

import torch
from spikingjelly.activation_based.encoding import PoissonEncoder
from torch.utils.data import Dataset

from experiments.data.digits import build_digits_datasets


class FrameSequences(Dataset):
    """Frames kept as one-channel bool (8x smaller than float RGB); widened per sample."""

    def __init__(self, frames: torch.Tensor, targets: torch.Tensor, channels: int) -> None:
        self.frames = frames  # [N, T, 1, H, W] bool
        self.targets = targets
        self.channels = channels

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        frames = self.frames[index].float().expand(-1, self.channels, -1, -1).contiguous()
        return frames, self.targets[index]


def rate_code(images: torch.Tensor, time_steps: int, seed: int) -> torch.Tensor:
    """[N, 1, H, W] intensities -> [N, T, 1, H, W] bool spikes, the same for the same seed."""
    encoder = PoissonEncoder()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        frames = [encoder(images).bool() for _ in range(time_steps)]
    return torch.stack(frames, dim=1)


def build_digits_sequence_datasets(
    time_steps: int = 4,
    image_size: int = 16,
    val_size: int = 384,
    split_seed: int = 0,
    encoding_seed: int = 0,
    channels: int = 3,
) -> tuple[FrameSequences, FrameSequences]:
    """`channels` copies of each frame (data.channels: 3 for the image models, 2 to stand in
    for event frames' two polarities)."""
    if time_steps < 1:
        raise ValueError("time_steps must be >= 1")
    train, validation = build_digits_datasets(image_size, val_size, split_seed)
    datasets = []
    for offset, (images, targets) in enumerate((train.tensors, validation.tensors)):
        grey = images[:, :1]  # the digits are grey: one channel, widened per sample
        frames = rate_code(grey.clamp(0.0, 1.0), time_steps, encoding_seed + offset)
        datasets.append(FrameSequences(frames, targets, channels))
    return datasets[0], datasets[1]


build_digits_sequence_datasets.input_layout = "NTCHW"  # type: ignore[attr-defined]
