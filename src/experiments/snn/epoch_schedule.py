"""A learning-rate schedule stepped once per epoch, as the papers' code steps theirs, under
SpikingJelly's loop, which steps `trainer.scheduler` once per optimizer step.

Spikformer steps timm's CosineLRScheduler once per epoch (`lr_scheduler.step(epoch + 1)`:
warm-up from warmup_lr_init, cosine to lr_min over t_initial epochs, then lr_min for the
cool-down epochs); SEW-ResNet steps torch's CosineAnnealingLR (ImageNet, CIFAR10-DVS) and
StepLR (DVS128 Gesture) once per epoch. The lr is then constant within an epoch. `EpochSchedule`
is `trainer.scheduler`; it builds the paper's scheduler (`schedule`, torch's or timm's class,
with its own arguments) and steps it whenever the loop's optimizer steps complete an epoch, so
the values are the library's, not a copy of its formula:

```yaml
trainer:
  scheduler: experiments.snn.epoch_schedule.EpochSchedule
  scheduler_kwargs:
    schedule: timm.scheduler.CosineLRScheduler
    steps_per_epoch: auto      # derived from the run before launch (snn/schedule.py)
    t_initial: 300
    warmup_t: 20
    warmup_lr_init: 1.0e-5
    lr_min: 1.0e-5
```

A timm scheduler built with `t_in_epochs: false` counts optimizer steps instead: it is
stepped through its `step_update` after every optimizer step (a per-step warm-up and cosine).
A torch scheduler meant per step needs no wrapper: name it as `trainer.scheduler` itself.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler

from experiments.data import import_object

SCHEDULE_KEY = "trainer.scheduler_kwargs.schedule"


def is_timm(cls: Any) -> bool:
    """timm's schedulers are not torch LRSchedulers: they take the epoch (or update count)
    they are stepped to."""
    try:
        from timm.scheduler.scheduler import Scheduler
    except ImportError:
        return False
    return isinstance(cls, type) and issubclass(cls, Scheduler)


class EpochSchedule(LRScheduler):
    """`schedule` stepped once every `steps_per_epoch` calls of `step()` (the loop's optimizer
    steps). The optimizer's lr is whatever `schedule` set: this class only decides when it
    steps. LRScheduler's own __init__ is not called: it would step once and write the lrs
    itself; the attributes torch's code reads (`optimizer`, `base_lrs`, `last_epoch`,
    `get_last_lr`) are set here."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        schedule: str,
        steps_per_epoch: int,
        **kwargs: Any,
    ) -> None:
        if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int):
            raise TypeError(f"steps_per_epoch must be an integer, got {steps_per_epoch!r}")
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be >= 1, got {steps_per_epoch}")
        self.optimizer = optimizer
        self.steps_per_epoch = steps_per_epoch
        self.schedule = import_object(schedule, SCHEDULE_KEY)(optimizer, **kwargs)
        self.timm = not isinstance(self.schedule, LRScheduler)
        self.per_update = self.timm and not self.schedule.t_in_epochs
        self.updates = 0  # the loop's optimizer steps so far
        self.last_epoch = 0  # the epoch whose lr is set
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self, epoch: int | None = None) -> None:  # the loop passes no epoch
        self.updates += 1
        if self.per_update:
            self.schedule.step_update(self.updates)
        elif self.updates % self.steps_per_epoch == 0:
            self.last_epoch = self.updates // self.steps_per_epoch
            if self.timm:
                self.schedule.step(self.last_epoch)  # timm's: the epoch about to start
            else:
                self.schedule.step()
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {
            "updates": self.updates,
            "last_epoch": self.last_epoch,
            "steps_per_epoch": self.steps_per_epoch,
            "schedule": self.schedule.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.updates = int(state_dict["updates"])
        self.last_epoch = int(state_dict["last_epoch"])
        self.schedule.load_state_dict(state_dict["schedule"])
        if self.per_update:  # timm set its warm-up start at construction: back to this step's
            self.schedule.step_update(self.updates)
        elif self.timm:
            self.schedule.step(self.last_epoch)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
