"""An experiments-export file of a GAN run's generator, taken in place of a checkpoint by
`experiments-sample FILE` and `experiments-eval FILE`: the run's recorded recipe builds the
model, the file's weights go into its generator, and the same seed draws the same images as
the run's checkpoint (gan/export.py writes the file)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from experiments.errors import ConfigError
from experiments.run import exported


def readable(path: Path, what: str) -> Any:
    """torch.load of a checkpoint or export, or refused as not `a readable <what>`."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, foreign, or not a state dict
        raise ConfigError(
            "checkpoint", str(path), f"a readable {what} ({type(error).__name__})"
        ) from None


@contextmanager
def fitting(path: Path, what: str) -> Iterator[None]:
    """A strict weight load that refuses weights of another model: `what` and the first line
    of torch's error (another recipe's weights, or data of other channels)."""
    try:
        yield
    except RuntimeError as error:
        first = str(error).strip().splitlines()[0]
        raise ConfigError("checkpoint", str(path), f"{what}: {first}") from None


def load_exported(plan: Any, path: Path) -> tuple[Any, int, bool]:
    """(the run's model in eval mode with the exported generator in it, the export's
    iteration, whether it is the EMA generator). The weights go into every generator the
    model has, and a raw generator's export turns the model's EMA off, so sampling and
    quality draw from the exported weights whatever they ask for."""
    from experiments.gan import conditional
    from experiments.gan.recipes import build_model

    sidecar = exported.read_sidecar(path)
    if sidecar.get("family") != "gan":
        raise ConfigError("checkpoint", str(path), "an export of a GAN run's generator")
    state = readable(path, "export")
    model = build_model(plan.mmgen_config)
    targets = [model.generator]
    if conditional.uses_ema(model):
        targets.append(model.generator_ema)
    for generator in targets:
        with fitting(path, f"the generator this run's recipe builds ({plan.recipe.recipe})"):
            generator.load_state_dict(state, strict=True)
    ema = bool(sidecar.get("ema"))
    if not ema and conditional.uses_ema(model):
        model.use_ema = False
    model.eval()
    return model, int(sidecar.get("iteration", -1)), ema
