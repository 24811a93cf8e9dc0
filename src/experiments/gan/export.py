"""experiments-export for GAN runs: the generator alone (the EMA one by default where the recipe
trains one), as the plain state dict of MMGen's generator module, in MMGen's own key layout
(what `mmgen.models.build_module(config.model.generator)` loads strictly; MMGen's own
checkpoints hold the same tensors under `generator.` / `generator_ema.`).

`experiments-sample FILE` and `experiments-eval FILE` take the file in place of a checkpoint
(gan/exported_generator.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.errors import ConfigError
from experiments.run import exported
from experiments.run.record import read_summary


def export_run(run_dir: Path, checkpoint: Path | None, out: Path | None, ema: bool | None) -> Path:
    from experiments.gan import conditional
    from experiments.gan.evaluate import checkpoint_of, load_model, recorded_plan

    if checkpoint is not None and exported.is_exported(checkpoint):
        raise ConfigError("checkpoint", str(checkpoint), "a run's checkpoint, not an export")
    plan = recorded_plan(run_dir, [])
    path = checkpoint_of(run_dir, checkpoint)
    model, iteration = load_model(plan, path)
    has_ema = conditional.uses_ema(model)
    if ema and not has_ema:
        raise ConfigError(
            "--ema",
            None,
            f"--no-ema or left out: model={plan.choices.get('model')} trains no EMA generator "
            f"({plan.recipe.recipe})",
        )
    use_ema = has_ema if ema is None else ema
    generator = model.generator_ema if use_ema else model.generator
    state = {name: value.detach().cpu() for name, value in generator.state_dict().items()}
    name = f"{plan.recipe.recipe}-generator{'_ema' if use_ema else ''}"
    target = out or exported.default_path(run_dir, name, iteration)
    summary = read_summary(run_dir) or {}
    return exported.write(
        target,
        state,
        {
            "family": "gan",
            "model": plan.recipe.recipe,
            # MMGen's config of the generator module (build_module takes it as it is)
            "generator": json.loads(json.dumps(plan.mmgen_config.model.generator, default=str)),
            "generator_class": type(generator).__name__,
            "run_dir": str(run_dir),
            "checkpoint": str(path),
            "step": iteration,
            "iteration": iteration,
            "engine": summary.get("engine"),
            "metrics": summary.get("metrics") or {},
            "ema": use_ema,
        },
    )
