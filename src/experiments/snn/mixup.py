"""Mixup and cutmix as a paper's code does them, in the place SpikingJelly's loop has for mixup.

SpikingJelly's `train_classification` builds `torchvision.transforms.v2.MixUp(alpha=
mixup_alpha, num_classes=...)` when its TrainingConfig's `mixup_alpha` is above 0, calls it on
every training batch (`images, loss_targets = mixup(images, targets)`) and hands the soft
targets to its loss. That is the whole of it: no cutmix, no probability that a batch is mixed,
no epoch after which mixing stops, and `[N, T, C, H, W]` frame batches raise. The papers need
each of those (Spikformer CIFAR-10: mixup off from epoch 200; ImageNet: mixup or cutmix at
switch probability 0.5; CIFAR10-DVS: mixup on half the batches of event frames, off from
epoch 75).

So where a run asks for one of them, the object the loop builds for mixup is timm's `Mixup`
instead (`TimmMixup` below, put in v2.MixUp's place while the loop runs:
engines/spikingjelly_loop.py), the one the Spikformer code calls, with the same arguments;
the loop's own call site, soft targets, loss and counting stay the library's. Otherwise the
loop's own v2.MixUp runs. Label smoothing always goes through the loss (`trainer.loss_kwargs:
{label_smoothing: ...}`): torch's cross_entropy smooths probability targets as
`(1 - e) * p + e / classes`, which equals timm's smoothed mixed targets, so the Mixup here
smooths nothing itself.
"""

from __future__ import annotations

import sys
from typing import Any

from experiments.errors import ConfigError

# The keys only timm's Mixup reads, and the values at which SpikingJelly's v2.MixUp does the same.
LIBRARY_EQUIVALENT = {
    "cutmix_alpha": 0.0,
    "mixup_prob": 1.0,
    "mixup_switch_prob": 0.5,
    "mixup_mode": "batch",
    "mixup_off_epoch": None,
}


def checked(trainer: dict[str, Any]) -> None:
    """timm's keys against the loop's own mixup, the refusal naming the key (their types and
    ranges are the trainer schema's: schemas/trainer.py)."""
    if trainer["mixup_alpha"]:
        return
    for key, neutral in LIBRARY_EQUIVALENT.items():
        if trainer[key] != neutral:
            raise ConfigError(
                f"trainer.{key}",
                trainer[key],
                f"{'null' if neutral is None else neutral} while trainer.mixup_alpha is 0 (no "
                "batch is mixed; cutmix rides the loop's mixup: for cutmix alone set "
                "trainer.mixup_alpha=1.0 with trainer.mixup_switch_prob=1.0)",
            )


def timm_reasons(trainer: dict[str, Any], input_layout: str) -> list[str]:
    """Why the run needs timm's Mixup in the loop's place: what v2.MixUp cannot do ([] where
    it can, or where no batch is mixed)."""
    if not trainer.get("mixup_alpha"):
        return []
    reasons = [
        f"{key}={trainer[key]}"
        for key, neutral in LIBRARY_EQUIVALENT.items()
        if trainer.get(key, neutral) != neutral
    ]
    if input_layout == "NTCHW":
        reasons.append("[N, T, C, H, W] frame batches")
    return reasons


def describe(trainer: dict[str, Any], input_layout: str) -> str | None:
    """The dry run's line: which mixup runs, with what, and why."""
    if not trainer.get("mixup_alpha"):
        return None
    reasons = timm_reasons(trainer, input_layout)
    if not reasons:
        return f"SpikingJelly's v2.MixUp(alpha={trainer['mixup_alpha']}) on every batch"
    return (
        f"timm Mixup(mixup_alpha={trainer['mixup_alpha']}, cutmix_alpha="
        f"{trainer['cutmix_alpha']}, prob={trainer['mixup_prob']}, switch_prob="
        f"{trainer['mixup_switch_prob']}, mode={trainer['mixup_mode']})"
        + (
            f", off from epoch {trainer['mixup_off_epoch']}"
            if trainer["mixup_off_epoch"] is not None
            else ""
        )
        + f" in the loop's mixup place (beyond v2.MixUp: {', '.join(reasons)})"
    )


class TimmMixup:
    """timm's Mixup as the callable the loop calls with each training batch on its device.

    - Its random draws (lambda, the cutmix box) come from numpy's generator seeded by (seed,
      data-parallel rank, optimizer step): tensor-parallel and pipeline peers of one
      data-parallel rank mix their shared batch identically (different draws would feed the
      stages of one model different images), and a resumed run draws what it would have.
    - From `off_epoch` on, timm's own switch (`mixup_enabled = False`, as timm's training
      script sets it) leaves the images unmixed; the targets stay one-hot probabilities.
    - `[N, T, C, H, W]` frames are viewed as `[N, T*C, H, W]`: timm cuts its box along the last
      two dimensions of a 4-D batch, so every frame and channel gets the same box.
    - timm requires an even batch (it pairs image i with N-1-i); SpikingJelly's loader keeps
      an epoch's short last batch, so an odd batch mixes its first N-1 images and leaves the
      last one unmixed, with its own label.
    """

    def __init__(self, trainer: dict[str, Any], num_classes: int, seed: int) -> None:
        from timm.data import Mixup

        self.seed = seed
        self.off_epoch = trainer["mixup_off_epoch"]
        self.num_classes = num_classes
        self.mixup = Mixup(
            mixup_alpha=float(trainer["mixup_alpha"]),
            cutmix_alpha=float(trainer["cutmix_alpha"]),
            prob=float(trainer["mixup_prob"]),
            switch_prob=float(trainer["mixup_switch_prob"]),
            mode=str(trainer["mixup_mode"]),
            label_smoothing=0.0,  # the loss's loss_kwargs smooths (module docstring)
            num_classes=num_classes,
        )

    def __call__(self, images: Any, targets: Any) -> tuple[Any, Any]:
        loop = sys._getframe(1).f_locals  # train_classification's
        return self.mix(
            images, targets, int(loop["epoch"]), int(loop["dp_rank"]), int(loop["global_step"])
        )

    def mix(self, images: Any, targets: Any, epoch: int, dp_rank: int, step: int) -> Any:
        """(images mixed in place, targets as probabilities [N, classes]) for the batch the
        loop trains at optimizer step `step` of `epoch` (0-based)."""
        import numpy as np
        import torch

        self.mixup.mixup_enabled = self.off_epoch is None or epoch < self.off_epoch
        shape = images.shape
        flat = images.reshape(shape[0], -1, *shape[-2:])  # a view: mixed in place
        even = shape[0] - shape[0] % 2
        state = np.random.get_state()
        np.random.seed(np.random.SeedSequence([self.seed, dp_rank, step]).generate_state(1)[0])
        try:
            soft = self.mixup(flat[:even], targets[:even])[1] if even else None  # mixes in place
        finally:
            np.random.set_state(state)
        probabilities = torch.nn.functional.one_hot(targets, self.num_classes).float()
        if soft is not None:
            probabilities[:even] = soft
        return flat.reshape(shape), probabilities
