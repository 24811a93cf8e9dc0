"""Gradient accumulation inside SpikingJelly's training step (trainer.global_batch_size).

The library's `train_step` runs one forward, loss and backward of the rank's whole batch.
Where the plan splits it into micro-batches, the forward runs every micro-batch but the last
itself (weighted loss, backward, network reset; under DDP inside `no_sync()`) and returns
the last one's logits; the loss adds the earlier (constant) weighted losses, so its value is
the whole batch's mean and the library's own backward, outside `no_sync()`, makes DDP
synchronise once per optimizer step. BatchNorm normalises each micro-batch by its own
statistics, as in every framework's accumulation.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import torch


class Accumulation:
    def __init__(self, steps: int) -> None:
        self.steps = steps
        self._pending: tuple[torch.Tensor, int, int] | None = None  # (loss so far, last, total)

    def forward(self, original: Callable[..., torch.Tensor], loss: Callable[..., Any]) -> Any:
        """`_forward_classification` for the training step (evaluation passes through)."""

        def forward_classification(model: Any, images: torch.Tensor, *args: Any) -> torch.Tensor:
            if not model.training:
                return original(model, images, *args)
            step = sys._getframe(1).f_locals  # the library's train_step
            targets, loss_function = step["loss_targets"], step["loss_function"]
            scaler = step["scaler"] if step["precision"].scaler is not None else None
            image_chunks, target_chunks = images.chunk(self.steps), targets.chunk(self.steps)
            total = targets.shape[0]
            done = torch.zeros((), device=targets.device)
            no_sync = getattr(model, "no_sync", None)  # DDP's (not a pipeline stage's)
            for micro_images, micro_targets in zip(
                image_chunks[:-1], target_chunks[:-1], strict=True
            ):
                with no_sync() if no_sync is not None else contextlib.nullcontext():
                    micro = loss(original(model, micro_images, *args), micro_targets, loss_function)
                    weighted = micro * (micro_targets.shape[0] / total)
                    (scaler.scale(weighted) if scaler is not None else weighted).backward()
                _reset(model)
                done = done + micro.detach() * micro_targets.shape[0]
            self._pending = (done / total, target_chunks[-1].shape[0], total)
            return original(model, image_chunks[-1], *args)

        return forward_classification

    def loss(self, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`_classification_loss`: after an accumulating forward, the whole batch's mean loss
        whose gradient is the last micro-batch's share (everything else passes through)."""

        def classification_loss(logits: torch.Tensor, targets: torch.Tensor, function: Any):
            if self._pending is None:
                return original(logits, targets, function)
            done, last, total = self._pending
            self._pending = None
            micro = original(logits, targets[-last:], function)
            return micro * (last / total) + done

        return classification_loss


def _reset(model: Any) -> None:
    from spikingjelly.activation_based import functional

    functional.reset_net(model)
