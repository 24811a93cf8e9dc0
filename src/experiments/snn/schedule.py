"""The learning-rate schedule follows the run: a scheduler's length counted in the steps it is
stepped, derived from the run, or a length that ends before the run refused.

SpikingJelly's `train_classification` steps `trainer.scheduler` once per optimizer step, so a
cosine's `T_max` counts optimizer steps: epochs x ceil(ceil(images / data-parallel ranks) /
batch) (the distributed sampler pads each rank to the same count; a pipeline drops the last,
short batch), capped by `trainer.max_steps`. That number changes with the GPU count, so a
preset written for 8 ranks reaches zero halfway through on 4 and climbs again. `auto` (the
presets' value) derives it; a number below the run's steps is refused before launch: a cosine
would climb back up, and OneCycleLR raises mid-run when stepped past `total_steps`.

A schedule the paper stepped once per epoch (epoch_schedule.EpochSchedule) needs the optimizer
steps of one epoch instead: its `steps_per_epoch: auto` is derived the same way.
"""

from __future__ import annotations

import math
from typing import Any

from experiments.data import training_images
from experiments.errors import ConfigError

# The scheduler argument that counts the steps of the whole schedule, by class name.
LENGTH_ARGUMENT = {"CosineAnnealingLR": "T_max", "OneCycleLR": "total_steps"}
AUTO = "auto"
EPOCH_SCHEDULE = "EpochSchedule"  # epoch_schedule.py
STEPS_PER_EPOCH = "steps_per_epoch"


def steps_per_epoch(images: int, trainer: dict[str, Any], dims: Any) -> int:
    """The optimizer steps of one epoch on SpikingJelly's loop under this topology (its
    train loader's length)."""
    per_rank = math.ceil(images / dims.data_parallel_size)
    batch = int(trainer["batch_size"])
    return per_rank // batch if dims.pipeline_parallel_size > 1 else math.ceil(per_rank / batch)


def optimizer_steps(images: int, trainer: dict[str, Any], dims: Any) -> int:
    """The optimizer steps of the run on SpikingJelly's loop under this topology."""
    steps = int(trainer["epochs"]) * steps_per_epoch(images, trainer, dims)
    return min(steps, int(trainer["max_steps"])) if trainer.get("max_steps") else steps


def _per_epoch(trainer: dict[str, Any], data: dict[str, Any], dims: Any) -> dict[str, Any]:
    """EpochSchedule's `steps_per_epoch: auto` derived from the run."""
    kwargs = dict(trainer.get("scheduler_kwargs") or {})
    if kwargs.get(STEPS_PER_EPOCH) != AUTO:
        return trainer
    images = training_images(data)
    if images is None:  # a dry run's placeholder data.root: a real run has to set it
        how = f"{STEPS_PER_EPOCH} auto: derived from data.root's training images before launch"
        return {**trainer, "schedule": how}
    steps = steps_per_epoch(images, trainer, dims)
    how = (
        f"{kwargs['schedule'].rsplit('.', 1)[-1]} stepped once per epoch of {steps} optimizer "
        f"steps ({images} images over {dims.data_parallel_size} data-parallel rank(s) in "
        f"batches of {trainer['batch_size']})"
    )
    return {**trainer, "scheduler_kwargs": {**kwargs, STEPS_PER_EPOCH: steps}, "schedule": how}


def follow_the_run(trainer: dict[str, Any], data: dict[str, Any], dims: Any) -> dict[str, Any]:
    """`trainer` with an `auto` schedule length derived from the run, and `schedule` saying
    how; a length shorter than the run refused."""
    name = str(trainer.get("scheduler") or "").rsplit(".", 1)[-1]
    if name == EPOCH_SCHEDULE:
        return _per_epoch(trainer, data, dims)
    argument = LENGTH_ARGUMENT.get(name)
    kwargs = dict(trainer.get("scheduler_kwargs") or {})
    if argument is None or argument not in kwargs:
        return trainer
    key = f"trainer.scheduler_kwargs.{argument}"
    images = training_images(data)
    if images is None:  # a dry run's placeholder data.root: a real run has to set it
        if kwargs[argument] == AUTO:
            how = f"{argument} auto: derived from data.root's train/ images before launch"
            return {**trainer, "schedule": how}
        return trainer
    steps = optimizer_steps(images, trainer, dims)
    how = (
        f"{argument} {steps}: {trainer['epochs']} epochs x {images} images over "
        f"{dims.data_parallel_size} data-parallel rank(s) in batches of {trainer['batch_size']}"
        + (
            f", capped by trainer.max_steps={trainer['max_steps']}"
            if trainer.get("max_steps")
            else ""
        )
    )
    if kwargs[argument] == AUTO:
        return {**trainer, "scheduler_kwargs": {**kwargs, argument: steps}, "schedule": how}
    given = kwargs[argument]
    if isinstance(given, int) and not isinstance(given, bool) and given < steps:
        ending = (
            "the cosine reaches its minimum and climbs back up"
            if argument == "T_max"
            else "OneCycleLR raises"
        )
        raise ConfigError(
            key,
            given,
            f"auto (derives this run's {steps} optimizer steps) or a number >= {steps}: at "
            f"step {given} of {steps} {ending} ({how.split(': ', 1)[1]})",
        )
    return trainer
