"""The learning-rate schedule follows the run: a scheduler's length counted in the steps it is
stepped, derived from the run, or a length that ends before the run refused.

SpikingJelly's `train_classification` steps `trainer.scheduler` once per optimizer step, so a
cosine's `T_max` counts optimizer steps: epochs x ceil(ceil(images / data-parallel ranks) /
batch) (the distributed sampler pads each rank to the same count; a pipeline drops the last,
short batch), capped by `trainer.max_steps`. That number changes with the GPU count, so a
preset written for 8 ranks reaches zero halfway through on 4 and climbs again. `auto` (the
presets' value) derives it; a number below the run's steps is refused before launch: a cosine
would climb back up, and OneCycleLR raises mid-run when stepped past `total_steps`.
"""

from __future__ import annotations

import math
from typing import Any

from experiments.data import training_images
from experiments.errors import ConfigError

# The scheduler argument that counts the steps of the whole schedule, by class name.
LENGTH_ARGUMENT = {"CosineAnnealingLR": "T_max", "OneCycleLR": "total_steps"}
AUTO = "auto"


def optimizer_steps(images: int, trainer: dict[str, Any], dims: Any) -> int:
    """The optimizer steps of the run on SpikingJelly's loop under this topology."""
    per_rank = math.ceil(images / dims.data_parallel_size)
    batch = int(trainer["batch_size"])
    per_epoch = (
        per_rank // batch if dims.pipeline_parallel_size > 1 else math.ceil(per_rank / batch)
    )
    steps = int(trainer["epochs"]) * per_epoch
    return min(steps, int(trainer["max_steps"])) if trainer.get("max_steps") else steps


def follow_the_run(trainer: dict[str, Any], data: dict[str, Any], dims: Any) -> dict[str, Any]:
    """`trainer` with an `auto` schedule length derived from the run, and `schedule` saying
    how; a length shorter than the run refused."""
    name = str(trainer.get("scheduler") or "").rsplit(".", 1)[-1]
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
