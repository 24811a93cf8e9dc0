"""An experiments-export file of a GAN run's generator, taken in place of a checkpoint by
`experiments-sample FILE` and `experiments-eval FILE`: the run's recorded recipe builds the
model, the file's weights go into its generator, and the same seed draws the same images as
the run's checkpoint (gan/export.py writes the file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from experiments.errors import ConfigError
from experiments.run import exported


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
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated, or not a state dict
        raise ConfigError(
            "checkpoint", str(path), f"a readable export ({type(error).__name__})"
        ) from None
    model = build_model(plan.mmgen_config)
    targets = [model.generator]
    if conditional.uses_ema(model):
        targets.append(model.generator_ema)
    for generator in targets:
        try:
            generator.load_state_dict(state, strict=True)
        except RuntimeError as error:
            first = str(error).strip().splitlines()[0]
            raise ConfigError(
                "checkpoint",
                str(path),
                f"the generator this run's recipe builds ({plan.recipe.recipe}): {first}",
            ) from None
    ema = bool(sidecar.get("ema"))
    if not ema and conditional.uses_ema(model):
        model.use_ema = False
    model.eval()
    return model, int(sidecar.get("iteration", -1)), ema
